// `mxq bench`: the benchmark. Every op timed under CUDA-graph replay over rotating buffers (inputs
// totalling >= 2x L2), median of the replays, bytes from traffic.h, % of a cudaMemcpy roof measured
// in the same run; results printed as one table per case set and written as JSON for
// benchmarks/plot.py.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "traffic.h"

namespace mxq::tools {

// The case sets. A default run takes all of them; --sets picks some.
//   main     --shapes (default: the six aligned bandwidth shapes and the 512x4096 latency shape),
//            dense and random groups (--groups), every activation op; dense bf16 also the probe
//            (mxq::bench::quantize_probe: the design's ceiling) and the copy (x's bytes by a plain
//            copy kernel: the shape's ceiling), right after fused
//   ragged   32-multiple shapes that are not 128-multiples, each next to an aligned neighbour
//   grouped  32768x7168: random groups (G = 8, 64, 256: 32-multiple sizes, an empty group, a tail), an
//            even split and a skewed one (one group holding 90% of the rows) at G = 8, and dense
//   dtypes   32768x7168 dense, bf16 / fp16 / fp32 input: fused, rowwise, colwise
//   weights  expert weights W (G, N, K) through mxq::quantize_weight, both scalings, bf16
enum class BenchSet { kMain, kRagged, kGrouped, kDtypes, kWeights };
constexpr BenchSet kAllSets[] = {BenchSet::kMain, BenchSet::kRagged, BenchSet::kGrouped,
                                 BenchSet::kDtypes, BenchSet::kWeights};
inline const char* set_name(BenchSet set) {
  switch (set) {
    case BenchSet::kMain:
      return "main";
    case BenchSet::kRagged:
      return "ragged";
    case BenchSet::kGrouped:
      return "grouped";
    case BenchSet::kDtypes:
      return "dtypes";
    case BenchSet::kWeights:
      return "weights";
  }
  return "?";
}
inline std::optional<BenchSet> parse_set(const std::string& name) {
  for (BenchSet s : kAllSets) {
    if (name == set_name(s)) return s;
  }
  return std::nullopt;
}

struct BenchOptions {
  std::vector<BenchSet> sets;         // empty: every set (only main when --shapes is given)
  std::vector<MatrixShape> shapes;    // the main set's shapes; default_bench_shapes() when empty
  std::vector<Op> ops;                // every op when empty (each set keeps the ops it runs)
  std::vector<int> groups{4, 8, 64};  // the main set's random group counts
  bool no_dense = false;              // main and grouped sets: skip the dense runs
  DType dtype = DType::kBFloat16;     // input of the main, ragged and grouped sets
  int replays = 20;
  int warmup = 3;
  std::string json_path;  // empty: benchmarks/results/<gpu>_<date>.json; "-": no JSON
  bool quick = false;
  bool list = false;   // print the cases and exit (no GPU needed)
  bool verify = true;  // fused == composed byte check per (shape, dtype, groups)
  std::string rule = "rceil";
  uint64_t seed = 1;
  int tile_rows = 0;  // the 16-bit quantize kernels' tile height: 0 automatic, 64 or 128 forced
};

// The main set's shapes: the bandwidth shapes first and the latency shape (512x4096) last.
inline std::vector<MatrixShape> default_bench_shapes() {
  return {{8192, 2048},   {8192, 7168},   {32768, 2048}, {32768, 7168},
          {131072, 2048}, {131072, 7168}, {512, 4096}};
}
inline std::vector<MatrixShape> quick_bench_shapes() { return {{8192, 2048}, {32768, 7168}}; }

int run_bench(const BenchOptions& options);

}  // namespace mxq::tools
