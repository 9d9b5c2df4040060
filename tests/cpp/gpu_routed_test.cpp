// mxq::quantize_routed on the device (docs/numerics.md §12.1) against mxq::ref::quantize_routed, raw
// bytes: every output poisoned first, guard bands around every buffer, both tile heights, every
// dtype and rule, int32 and int64 index and counts, adversarial routings and scales; and bad
// device-side input (index out of range, counts negative or not summing to N): status bits, and
// nothing written outside the outputs.
#include "gpu_util.h"
#include "routed_util.h"

namespace mxq::test {
namespace {

struct DeviceRouted {
  Stream stream;
  GuardedBuffer x, index, counts, scale, q_row, s_row, q_col, s_col, offs_p, dest, workspace,
      status;
  QuantizeRoutedParams params;

  DeviceRouted(const RoutedProblem& p, ScalingMode mode, bool rowwise, bool colwise,
               IndexType index_type, IndexType counts_type) {
    const int64_t Mp = p.Mp();
    const auto idx = int_bytes(p.index, index_type);
    const auto cnt = int_bytes(p.counts, counts_type);
    x = GuardedBuffer("x", p.x.size());
    x.upload(p.x.data(), stream.get());
    index = GuardedBuffer("index", idx.size());
    index.upload(idx.data(), stream.get());
    counts = GuardedBuffer("counts", cnt.size());
    counts.upload(cnt.data(), stream.get());
    if (!p.scale.empty()) {
      scale = GuardedBuffer("scale", p.scale.size() * 4);
      scale.upload(p.scale.data(), stream.get());
    }
    if (rowwise) {
      q_row = GuardedBuffer("q_row", q_row_shape(Mp, p.K).bytes());
      s_row = GuardedBuffer("s_row", s_row_shape(Mp, p.K, p.E).bytes());
    }
    if (colwise) {
      q_col = GuardedBuffer("q_col", q_col_shape(Mp, p.K).bytes());
      s_col = GuardedBuffer("s_col", s_col_shape(Mp, p.K, p.E).bytes());
    }
    offs_p = GuardedBuffer("offs_p", p.E * 4);
    dest = GuardedBuffer("dest", p.N * 4);
    workspace = GuardedBuffer("workspace", quantize_routed_workspace_bytes(p.N, p.E));
    status = GuardedBuffer("status", 4);
    params.x = x.data();
    params.dtype = p.dtype;
    params.T = p.T;
    params.K = p.K;
    params.index = index.data();
    params.index_type = index_type;
    params.N = p.N;
    params.counts = counts.data();
    params.counts_type = counts_type;
    params.num_experts = p.E;
    params.scale = scale.as<float>();
    params.scaling_mode = mode;
    params.q_row = q_row.data();
    params.s_row = s_row.data();
    params.q_col = q_col.data();
    params.s_col = s_col.data();
    params.offs_p = offs_p.as<int32_t>();
    params.dest = dest.as<int32_t>();
    params.workspace = workspace.data();
    params.status = status.as<int32_t>();
    params.stream = stream.get();
  }

  void poison() {
    for (GuardedBuffer* b : {&q_row, &s_row, &q_col, &s_col, &offs_p, &dest, &workspace, &status}) {
      b->fill(kPoison, stream.get());
    }
  }

  RoutedOutputs run() {
    poison();
    detail::quantize_routed_with_tile_rows(params, forced_tile_rows());
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    RoutedOutputs o;
    o.q_row = q_row.download(stream.get());
    o.s_row = s_row.download(stream.get());
    o.q_col = q_col.download(stream.get());
    o.s_col = s_col.download(stream.get());
    const auto offs = offs_p.download(stream.get());
    o.offs_p.resize(offs.size() / 4);
    std::memcpy(o.offs_p.data(), offs.data(), offs.size());
    const auto d = dest.download(stream.get());
    o.dest.resize(d.size() / 4);
    std::memcpy(o.dest.data(), d.data(), d.size());
    return o;
  }

  int32_t read_status() {
    const auto s = status.download(stream.get());
    int32_t v;
    std::memcpy(&v, s.data(), 4);
    return v;
  }

  ::testing::AssertionResult guards_intact() {
    for (GuardedBuffer* b : {&x, &index, &counts, &scale, &q_row, &s_row, &q_col, &s_col, &offs_p,
                             &dest, &workspace, &status}) {
      auto r = b->guards_intact(stream.get());
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
};

struct GpuCase {
  DType dtype;
  ScalingMode mode;
  Routing routing;
  bool scaled;
  int tile_rows;
  IndexType index_type;
  int64_t T, K, N, E;
};

std::string gpu_case_name(const ::testing::TestParamInfo<GpuCase>& info) {
  const GpuCase& c = info.param;
  return std::string(to_string(c.dtype)) + "_" + to_string(c.mode) + "_" + routing_name(c.routing) +
         (c.scaled ? "_scaled" : "") + "_tile" + std::to_string(c.tile_rows) +
         (c.index_type == IndexType::kInt64 ? "_i64" : "_i32") + "_T" + std::to_string(c.T) + "_K" +
         std::to_string(c.K) + "_N" + std::to_string(c.N) + "_E" + std::to_string(c.E);
}

std::vector<GpuCase> gpu_cases() {
  std::vector<GpuCase> cases;
  for (DType d : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (ScalingMode m : {ScalingMode::kRceil, ScalingMode::kFloor}) {
      for (Routing r : {Routing::kRandom, Routing::kEmpty, Routing::kOneExpert,
                        Routing::kDuplicates, Routing::kAligned}) {
        for (bool scaled : {false, true}) {
          for (int tile : kTileHeights) {
            if (d == DType::kFloat32 && tile == 64) continue;  // fp32 tiles are 64 rows anyway
            const IndexType it = (int(r) + scaled) % 2 ? IndexType::kInt64 : IndexType::kInt32;
            cases.push_back({d, m, r, scaled, tile, it, 300, 416, 777, 9});
          }
        }
      }
    }
  }
  for (int tile : kTileHeights) {
    cases.push_back({DType::kBFloat16, ScalingMode::kRceil, Routing::kRandom, true, tile,
                     IndexType::kInt32, 4096, 256, 8192, 256});
    cases.push_back({DType::kFloat16, ScalingMode::kFloor, Routing::kEmpty, true, tile,
                     IndexType::kInt64, 100, 96, 3000, 200});
    cases.push_back({DType::kBFloat16, ScalingMode::kFloor, Routing::kRandom, false, tile,
                     IndexType::kInt32, 10, 128, 0, 4});
  }
  cases.push_back({DType::kFloat32, ScalingMode::kRceil, Routing::kOneExpert, true, 128,
                   IndexType::kInt64, 64, 288, 1000, 1});
  return cases;
}

class GpuRouted : public GpuTestWithParam<GpuCase> {};

TEST_P(GpuRouted, MatchesReference) {
  const GpuCase& c = GetParam();
  const ForcedTileRows forced(c.tile_rows);
  const RoutedProblem p =
      make_routed_problem(c.dtype, c.T, c.K, c.N, c.E, c.routing, c.scaled, test_seed());
  const RoutedOutputs want = reference_routed(p, c.mode, true, true);
  for (auto [rowwise, colwise] :
       {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    DeviceRouted dev(p, c.mode, rowwise, colwise, c.index_type, c.index_type);
    RoutedOutputs expected = want;
    if (!rowwise) expected.q_row.clear(), expected.s_row.clear();
    if (!colwise) expected.q_col.clear(), expected.s_col.clear();
    for (int run = 0; run < 2; ++run) {  // the same bytes on a second call over poison
      EXPECT_TRUE(same_routed(dev.run(), expected, p.Mp(), p.K))
          << "rowwise " << rowwise << " colwise " << colwise << " run " << run;
      EXPECT_EQ(dev.read_status(), 0);
    }
    EXPECT_TRUE(dev.guards_intact());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuRouted, ::testing::ValuesIn(gpu_cases()), gpu_case_name);

// ---- bad device-side input: status bits, nothing outside the outputs ----

class GpuRoutedBadInput : public GpuTest {};

TEST_F(GpuRoutedBadInput, IndexOutOfRange) {
  for (int tile : kTileHeights) {
    const ForcedTileRows forced(tile);
    RoutedProblem p = make_routed_problem(DType::kBFloat16, 50, 160, 300, 5, Routing::kRandom, true,
                                          test_seed(tile));
    DeviceRouted dev(p, ScalingMode::kRceil, true, true, IndexType::kInt64, IndexType::kInt32);
    // The reference of the same problem with those rows' sources replaced by a zero row and their factors by 1:
    // a bad index's row is +0 bytes whatever its scale (a -0.5 or NaN factor times a zero row would not be).
    RoutedProblem fixed = p;
    fixed.T = p.T + 1;
    fixed.x.resize(p.x.size() + p.K * 2, 0);  // row T: zeros
    for (int64_t r : {int64_t(3), int64_t(150), int64_t(299)}) {
      fixed.index[r] = p.T;
      if (!fixed.scale.empty()) fixed.scale[r] = 1.0f;
    }
    const RoutedOutputs want = reference_routed(fixed, ScalingMode::kRceil, true, true);
    p.index[3] = p.T;
    p.index[150] = -1;
    p.index[299] = int64_t(1) << 40;
    DeviceRouted bad(p, ScalingMode::kRceil, true, true, IndexType::kInt64, IndexType::kInt32);
    EXPECT_TRUE(same_routed(bad.run(), want, p.Mp(), p.K));
    EXPECT_EQ(bad.read_status(), kIndexOutOfRange);
    EXPECT_TRUE(bad.guards_intact());
  }
}

TEST_F(GpuRoutedBadInput, Counts) {
  RoutedProblem p =
      make_routed_problem(DType::kFloat16, 40, 128, 200, 6, Routing::kRandom, false, test_seed());
  for (auto [change, bits] : {std::pair{0, int32_t(kCountsSumNotN)},  // sum N + 7
                              std::pair{1, int32_t(kCountsSumNotN)},  // sum N - 7
                              std::pair{2, int32_t(kCountsNegative | kCountsSumNotN)},
                              std::pair{3, int32_t(kCountsSumNotN)}}) {  // one count > N
    RoutedProblem q = p;
    if (change == 0) q.counts[2] += 7;
    if (change == 1) q.counts[0] = std::max<int64_t>(q.counts[0] - 7, 0), q.counts[1] = 0;
    if (change == 2) q.counts[4] = -5;
    if (change == 3) q.counts[1] = int64_t(1) << 40;
    DeviceRouted dev(q, ScalingMode::kRceil, true, true, IndexType::kInt32, IndexType::kInt64);
    const RoutedOutputs got = dev.run();
    EXPECT_EQ(dev.read_status(), bits) << "change " << change;
    EXPECT_TRUE(dev.guards_intact()) << "change " << change;
    // offs_p stays inside the padded rows and non-decreasing; dest is -1 or a padded row.
    int32_t prev = 0;
    for (int32_t e : got.offs_p) {
      EXPECT_GE(e, prev);
      EXPECT_LE(e, q.Mp());
      prev = e;
    }
    for (int32_t d : got.dest) EXPECT_TRUE(d == -1 || (d >= 0 && d < q.Mp())) << d;
  }
}

// Captured in a CUDA graph and replayed: the same bytes (no host sync inside the op).
TEST_F(GpuRoutedBadInput, GraphCapture) {
  const RoutedProblem p =
      make_routed_problem(DType::kBFloat16, 64, 256, 500, 16, Routing::kRandom, true, test_seed());
  const RoutedOutputs want = reference_routed(p, ScalingMode::kRceil, true, true);
  DeviceRouted dev(p, ScalingMode::kRceil, true, true, IndexType::kInt32, IndexType::kInt32);
  dev.poison();
  cudaGraph_t graph;
  MXQ_TEST_CUDA(cudaStreamBeginCapture(dev.stream.get(), cudaStreamCaptureModeGlobal));
  quantize_routed(dev.params);
  MXQ_TEST_CUDA(cudaStreamEndCapture(dev.stream.get(), &graph));
  cudaGraphExec_t exec;
  MXQ_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  MXQ_TEST_CUDA(cudaGraphLaunch(exec, dev.stream.get()));
  MXQ_TEST_CUDA(cudaStreamSynchronize(dev.stream.get()));
  RoutedOutputs got;
  got.q_row = dev.q_row.download(dev.stream.get());
  got.s_row = dev.s_row.download(dev.stream.get());
  got.q_col = dev.q_col.download(dev.stream.get());
  got.s_col = dev.s_col.download(dev.stream.get());
  got.offs_p.resize(p.E);
  got.dest.resize(p.N);
  const auto o = dev.offs_p.download(dev.stream.get());
  const auto d = dev.dest.download(dev.stream.get());
  std::memcpy(got.offs_p.data(), o.data(), o.size());
  std::memcpy(got.dest.data(), d.data(), d.size());
  EXPECT_TRUE(same_routed(got, want, p.Mp(), p.K));
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mxq::test
