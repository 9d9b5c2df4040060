// `mxq bench`: the SPEC §10 measurement. Every op timed under CUDA-graph replay over rotating
// buffers (inputs totalling >= 2x L2), median of the replays, bytes from traffic.h, % of a
// cudaMemcpy roof measured in the same run; results printed and written as JSON for
// benchmarks/plot.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "traffic.h"

namespace mxq::tools {

struct BenchOptions {
  std::vector<MatrixShape> shapes;    // SPEC §10 shapes when empty
  std::vector<Op> ops;                // all when empty
  std::vector<int> groups{4, 8, 64};  // grouped runs; dense always runs unless no_dense
  bool no_dense = false;
  int replays = 20;
  int warmup = 3;
  std::string json_path;  // empty: benchmarks/results/<gpu>_<date>.json; "-": no JSON
  bool quick = false;
  bool verify = true;  // fused == composed byte check per (shape, groups)
  std::string rule = "rceil";
  uint64_t seed = 1;
};

// The SPEC §10 shapes, the bandwidth shapes first and the latency shape (512x4096) last.
inline std::vector<MatrixShape> default_bench_shapes() {
  return {{8192, 2048},   {8192, 7168},   {32768, 2048}, {32768, 7168},
          {131072, 2048}, {131072, 7168}, {512, 4096}};
}
inline std::vector<MatrixShape> quick_bench_shapes() { return {{8192, 2048}, {32768, 7168}}; }

int run_bench(const BenchOptions& options);

}  // namespace mxq::tools
