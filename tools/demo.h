// `mxq demo`: quantize one random tensor (bf16, fp16 or fp32) on both axes, check the GPU paths
// byte-exact against the CPU reference, and show what came out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "mxq/mxq.h"

namespace mxq::tools {

struct DemoOptions {
  MatrixShape shape{4096, 4096};
  std::string rule = "rceil";
  DType dtype = DType::kBFloat16;
  int groups = 0;  // 0: dense
  uint64_t seed = 1;
  bool cpu_only = false;
  int repeats = 5;  // timed GPU runs per path (the median is shown)
};
int run_demo(const DemoOptions& options);

// The input of one demo run, on the host.
struct DemoInput {
  MatrixShape shape;
  ScaleRounding rule = ScaleRounding::kRceil;
  DType dtype = DType::kBFloat16;
  std::vector<uint8_t> x;         // raw elements of `dtype`, row-major (M, K)
  std::vector<Special> specials;  // the special values placed in x
  std::vector<int32_t> offs;      // empty: dense
  int64_t groups() const { return static_cast<int64_t>(offs.size()); }
  float value(int64_t m, int64_t k) const { return input_value(x, dtype, m * shape.K + k); }
};

// The four outputs of a two-axis quantize, on the host, sized as the API says (layout.h).
struct QuantizeOutputs {
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  static QuantizeOutputs allocate(const MatrixShape& s, int64_t groups);
  // What allocate() asks for, computed without allocating (the demo's memory check).
  static double bytes(const MatrixShape& s, int64_t groups);
};

// One named output for tables and comparisons.
struct OutputView {
  const char* name;
  Shape2d shape;
  const std::vector<uint8_t>* bytes;
};
std::vector<OutputView> views(const QuantizeOutputs& out, const MatrixShape& s, int64_t groups);

#if defined(MXQ_WITH_CUDA)
// The two GPU paths of the demo (demo_gpu.cpp): mxq::quantize and mxq::quantize_composed.
enum class GpuPath { kFused, kComposed };
const char* path_name(GpuPath path);
struct GpuRun {
  QuantizeOutputs out;           // from a run into outputs poisoned with 0xA5 first
  std::vector<double> times_ms;  // one per timed run, cudaEvent elapsed time
  int32_t status = 0;            // grouped: the status word (0 = offs well formed)
};
// Device memory one path needs for this input (input, outputs, the composed workspace), and what
// the current device has free; the demo refuses a shape that does not fit before allocating.
double gpu_bytes_needed(const MatrixShape& s, int64_t groups, DType dtype);
double gpu_bytes_free();
GpuRun run_gpu(const DemoInput& in, GpuPath path, int repeats);
#endif

}  // namespace mxq::tools
