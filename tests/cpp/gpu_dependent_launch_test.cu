// Programmatic dependent launch (src/kernels/common.cuh launch_dependent): every mxq kernel may be
// scheduled while the kernel before it on the stream still runs, and must not touch memory before
// that kernel has finished. The kernel before is late_copy_kernel below, which lets its dependents
// be scheduled at its start and then does its one copy only after a long wait, so an mxq kernel
// that read or wrote before its griddepcontrol.wait would see or clobber the old bytes.
//   GpuDependentLaunch.ReadsAfterTheKernelBefore   late_copy writes the call's input; the call's
//                                                  output equals a run on an input written long ago
//   GpuDependentLaunch.WritesAfterTheKernelBefore  late_copy reads the call's output buffer; it sees
//                                                  the bytes from before the call
//   GpuDependentLaunch.GraphEdgeIsProgrammatic     captured after late_copy, the call's first kernel
//                                                  hangs on a programmatic edge, and replays right
// Every kernel family: the 16-bit and fp32 activation kernels (dense and grouped), the composed
// path's three kernels, dequantize (blocked and grouped) and the expert-weight kernel.
#include <functional>
#include <memory>

#include "../../src/kernels/ptx.cuh"
#include "gpu_util.h"

namespace mxq::test {
namespace {

// late_copy's wait before it copies: 2^20 SM cycles, 0.5 ms at the H200's 1.98 GHz.
constexpr long long kLateCycles = 1 << 20;

// Lets the next launch on the stream be scheduled at once, waits, then copies n 16-byte words.
__global__ void late_copy_kernel(const uint4* src, uint4* dst, int64_t n) {
  ptx::griddepcontrol_launch_dependents();
  const long long start = clock64();
  while (clock64() - start < kLateCycles) {
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

void late_copy(const GuardedBuffer& src, const GuardedBuffer& dst, cudaStream_t stream) {
  ASSERT_EQ(src.bytes(), dst.bytes());
  ASSERT_EQ(src.bytes() % 16, 0u);
  // One CTA, so the dependent kernel's CTAs find room on every other SM.
  late_copy_kernel<<<1, 256, 0, stream>>>(src.as<uint4>(), dst.as<uint4>(),
                                          int64_t(src.bytes() / 16));
  MXQ_TEST_CUDA(cudaGetLastError());
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  std::mt19937_64 rng(seed);
  for (auto& v : b) v = uint8_t(rng() >> 56);
  return b;
}

// One public-API call on device buffers: `in` is what it reads (x, q or w; its other inputs are
// written once at setup), `out` one of the outputs it writes.
struct Call {
  std::string name;
  std::vector<std::unique_ptr<GuardedBuffer>> buffers;  // every buffer the call touches
  GuardedBuffer* in = nullptr;
  GuardedBuffer* out = nullptr;
  std::vector<uint8_t> input;  // the bytes `in` holds for the call
  std::function<void(cudaStream_t)> enqueue;

  GuardedBuffer* add(const std::string& buffer, size_t bytes) {
    buffers.push_back(std::make_unique<GuardedBuffer>(buffer, bytes));
    return buffers.back().get();
  }
  template <typename T>
  GuardedBuffer* add_input(const std::string& buffer, const std::vector<T>& host, cudaStream_t s) {
    GuardedBuffer* b = add(buffer, host.size() * sizeof(T));
    b->upload(host.data(), s);
    return b;
  }
};

// quantize (or quantize_composed) of an (M, K) input of `dtype`: all four outputs; grouped with 8
// random groups when `grouped`. `out` is q_row (the first kernel of the composed path writes it).
Call quantize_call(DType dtype, bool grouped, bool composed, cudaStream_t s) {
  constexpr int64_t M = 1024, K = 1024;
  Call c;
  c.name = std::string(composed ? "quantize_composed" : "quantize") +
           (dtype == DType::kFloat32 ? " fp32" : " bf16") + (grouped ? " grouped" : " dense");
  const std::vector<int32_t> offs =
      grouped ? make_offs(M, 8, GroupFill::kTail, 11) : std::vector<int32_t>{};
  const int64_t G = int64_t(offs.size());
  // 16-bit: the special-value input of the other suites; fp32: random bit patterns.
  c.input = dtype == DType::kFloat32 ? random_bytes(size_t(M * K * 4), 12)
                                     : as_bytes(make_input(M, K, Dist::kSpecial, 13));
  c.in = c.add_input("x", c.input, s);
  GuardedBuffer* d_offs = c.add_input("offs", offs, s);
  c.out = c.add("q_row", size_t(q_row_shape(M, K).bytes()));
  GuardedBuffer* s_row = c.add("s_row", size_t(s_row_shape(M, K, G).bytes()));
  GuardedBuffer* q_col = c.add("q_col", size_t(q_col_shape(M, K).bytes()));
  GuardedBuffer* s_col = c.add("s_col", size_t(s_col_shape(M, K, G).bytes()));
  GuardedBuffer* status = c.add("status", sizeof(int32_t));
  GuardedBuffer* workspace = c.add("workspace", size_t(composed_workspace_bytes(M, K)));
  QuantizeParams p;
  p.x = c.in->data();
  p.dtype = dtype;
  p.M = M;
  p.K = K;
  p.offs = grouped ? d_offs->as<int32_t>() : nullptr;
  p.num_groups = G;
  p.q_row = c.out->data();
  p.s_row = s_row->data();
  p.q_col = q_col->data();
  p.s_col = s_col->data();
  p.status = grouped ? status->as<int32_t>() : nullptr;
  c.enqueue = [p, composed, workspace](cudaStream_t stream) {
    QuantizeParams q = p;
    q.stream = stream;
    if (composed) {
      quantize_composed(q, workspace->data());
    } else {
      quantize(q);
    }
  };
  return c;
}

// dequantize of random e4m3 bytes and scales, rowwise blocked or colwise K-groups.
Call dequantize_call(bool grouped, cudaStream_t s) {
  constexpr int64_t rows = 1024, cols = 1024;
  Call c;
  c.name = grouped ? "dequantize K-groups" : "dequantize blocked";
  // K-groups: the colwise layout, rows = K and cols = M (the tokens the groups split).
  const std::vector<int32_t> offs =
      grouped ? make_offs(cols, 8, GroupFill::kTail, 21) : std::vector<int32_t>{};
  const int64_t G = int64_t(offs.size());
  const int64_t scale_bytes =
      grouped ? s_col_shape(cols, rows, G).bytes() : s_row_shape(rows, cols).bytes();
  c.input = random_bytes(size_t(rows * cols), 22);
  c.in = c.add_input("q", c.input, s);
  GuardedBuffer* scales = c.add_input("scales", random_bytes(size_t(scale_bytes), 23), s);
  GuardedBuffer* d_offs = c.add_input("offs", offs, s);
  GuardedBuffer* status = c.add("status", sizeof(int32_t));
  c.out = c.add("out", size_t(rows * cols * 2));
  DequantizeParams p;
  p.q = c.in->data();
  p.scales = scales->data();
  p.rows = rows;
  p.cols = cols;
  p.layout = grouped ? ScaleLayout::kKGroups : ScaleLayout::kBlocked;
  p.offs = grouped ? d_offs->as<int32_t>() : nullptr;
  p.num_groups = G;
  p.status = grouped ? status->as<int32_t>() : nullptr;
  p.out = c.out->data();
  c.enqueue = [p](cudaStream_t stream) {
    DequantizeParams q = p;
    q.stream = stream;
    dequantize(q);
  };
  return c;
}

// quantize_weight of 4 bf16 experts (256 x 512) with the 32x32 policy, both axes.
Call weight_call(cudaStream_t s) {
  constexpr int64_t G = 4, N = 256, K = 512;
  Call c;
  c.name = "quantize_weight";
  c.input = as_bytes(make_input(G * N, K, Dist::kSpecial, 31));
  c.in = c.add_input("w", c.input, s);
  c.out = c.add("q_row", size_t(G * N * K));
  GuardedBuffer* s_row = c.add("s_row", size_t(weight_s_row_shape(G, N, K).bytes()));
  GuardedBuffer* q_col = c.add("q_col", size_t(G * N * K));
  GuardedBuffer* s_col = c.add("s_col", size_t(weight_s_col_shape(G, N, K).bytes()));
  QuantizeWeightParams p;
  p.w = c.in->data();
  p.G = G;
  p.N = N;
  p.K = K;
  p.scaling = WeightScaling::k32x32;
  p.q_row = c.out->data();
  p.s_row = s_row->data();
  p.q_col = q_col->data();
  p.s_col = s_col->data();
  c.enqueue = [p](cudaStream_t stream) {
    QuantizeWeightParams q = p;
    q.stream = stream;
    quantize_weight(q);
  };
  return c;
}

enum class Family {
  kBf16Dense,
  kBf16Grouped,
  kFp32Dense,
  kFp32Grouped,
  kComposed,
  kDequantize,
  kDequantizeGrouped,
  kWeight
};
constexpr Family kFamilies[] = {
    Family::kBf16Dense, Family::kBf16Grouped, Family::kFp32Dense,         Family::kFp32Grouped,
    Family::kComposed,  Family::kDequantize,  Family::kDequantizeGrouped, Family::kWeight};

Call make_call(Family f, cudaStream_t s) {
  switch (f) {
    case Family::kBf16Dense:
      return quantize_call(DType::kBFloat16, false, false, s);
    case Family::kBf16Grouped:
      return quantize_call(DType::kBFloat16, true, false, s);
    case Family::kFp32Dense:
      return quantize_call(DType::kFloat32, false, false, s);
    case Family::kFp32Grouped:
      return quantize_call(DType::kFloat32, true, false, s);
    case Family::kComposed:
      return quantize_call(DType::kBFloat16, true, true, s);
    case Family::kDequantize:
      return dequantize_call(false, s);
    case Family::kDequantizeGrouped:
      return dequantize_call(true, s);
    case Family::kWeight:
      return weight_call(s);
  }
  throw std::logic_error("unknown family");
}

std::string family_name(const ::testing::TestParamInfo<Family>& info) {
  const char* names[] = {"Bf16Dense", "Bf16Grouped", "Fp32Dense",         "Fp32Grouped",
                         "Composed",  "Dequantize",  "DequantizeKGroups", "Weight"};
  return names[int(info.param)];
}

// `out` after a call whose input was written (and synchronized) long before it.
std::vector<uint8_t> settled_output(const Call& c, cudaStream_t s) {
  c.in->upload(c.input.data(), s);
  c.out->fill(kPoison, s);
  c.enqueue(s);
  MXQ_TEST_CUDA(cudaStreamSynchronize(s));
  MXQ_TEST_CUDA(cudaGetLastError());
  return c.out->download(s);
}

// Each test: the call, its output when its input was written long before, and a stream (made after
// the skip check, so that nothing touches CUDA without a device).
class GpuDependentLaunch : public GpuTestWithParam<Family> {
 protected:
  void SetUp() override {
    GpuTestWithParam<Family>::SetUp();
    if (IsSkipped()) return;
    stream_ = std::make_unique<Stream>();
    call_ = make_call(GetParam(), s());
    want_ = settled_output(call_, s());
  }
  void TearDown() override {
    if (stream_ == nullptr) return;
    for (const auto& b : call_.buffers) EXPECT_TRUE(b->guards_intact(s())) << call_.name;
  }
  cudaStream_t s() const { return stream_->get(); }

  // The call's input in a separate buffer, for late_copy to write into the call's input buffer.
  GuardedBuffer staged_input() const {
    GuardedBuffer staged("staged input", call_.in->bytes());
    staged.upload(call_.input.data(), s());
    return staged;
  }
  ::testing::AssertionResult output_as_settled(const std::string& when) const {
    return same_bytes(call_.out->download(s()), want_, int64_t(want_.size()),
                      call_.name + ": " + call_.out->name() + " " + when);
  }

  std::unique_ptr<Stream> stream_;
  Call call_;
  std::vector<uint8_t> want_;
};

TEST_P(GpuDependentLaunch, ReadsAfterTheKernelBefore) {
  // The input buffer holds zeros until late_copy writes the input into it.
  const GuardedBuffer staged = staged_input();
  call_.in->fill(0, s());
  call_.out->fill(kPoison, s());
  late_copy(staged, *call_.in, s());
  call_.enqueue(s());
  MXQ_TEST_CUDA(cudaStreamSynchronize(s()));
  MXQ_TEST_CUDA(cudaGetLastError());
  EXPECT_TRUE(call_.in->holds(call_.input, s())) << call_.name;
  EXPECT_TRUE(output_as_settled("after an input written by the kernel before"));
}

TEST_P(GpuDependentLaunch, WritesAfterTheKernelBefore) {
  // late_copy snapshots the output buffer, which holds the poison until the call writes it.
  GuardedBuffer snapshot("snapshot", call_.out->bytes());
  snapshot.fill(0x5A, s());
  call_.out->fill(kPoison, s());
  late_copy(*call_.out, snapshot, s());
  call_.enqueue(s());
  MXQ_TEST_CUDA(cudaStreamSynchronize(s()));
  MXQ_TEST_CUDA(cudaGetLastError());
  EXPECT_TRUE(snapshot.all_bytes_are(kPoison, s()))
      << call_.name << ": the kernel before read " << call_.out->name()
      << " after the call wrote it";
  EXPECT_TRUE(output_as_settled("after a kernel before that read it"));
}

TEST_P(GpuDependentLaunch, GraphEdgeIsProgrammatic) {
  const GuardedBuffer staged = staged_input();
  cudaGraph_t graph = nullptr;
  MXQ_TEST_CUDA(cudaStreamBeginCapture(s(), cudaStreamCaptureModeGlobal));
  late_copy(staged, *call_.in, s());
  call_.enqueue(s());
  MXQ_TEST_CUDA(cudaStreamEndCapture(s(), &graph));
  const std::unique_ptr<CUgraph_st, cudaError_t (*)(cudaGraph_t)> owned(graph, cudaGraphDestroy);

  // The edge out of late_copy's node leads to the call's first kernel and is programmatic.
  size_t n = 0;
  MXQ_TEST_CUDA(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n > 0) MXQ_TEST_CUDA(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  size_t roots = 0;
  MXQ_TEST_CUDA(cudaGraphGetRootNodes(graph, nullptr, &roots));
  ASSERT_EQ(roots, 1u) << call_.name << ": late_copy's node should be the graph's only root";
  cudaGraphNode_t root = nullptr;
  MXQ_TEST_CUDA(cudaGraphGetRootNodes(graph, &root, &roots));
  int out_of_root = 0;
  for (size_t i = 0; i < n; ++i) {
    if (from[i] != root) continue;
    ++out_of_root;
    EXPECT_EQ(int(data[i].type), int(cudaGraphDependencyTypeProgrammatic))
        << call_.name << ": the call's first kernel waits for the whole kernel before it";
  }
  EXPECT_EQ(out_of_root, 1) << call_.name;

  cudaGraphExec_t exec = nullptr;
  MXQ_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const std::unique_ptr<CUgraphExec_st, cudaError_t (*)(cudaGraphExec_t)> owned_exec(
      exec, cudaGraphExecDestroy);
  for (int replay = 0; replay < 2; ++replay) {
    call_.in->fill(0, s());
    call_.out->fill(kPoison, s());
    MXQ_TEST_CUDA(cudaGraphLaunch(exec, s()));
    MXQ_TEST_CUDA(cudaStreamSynchronize(s()));
    EXPECT_TRUE(output_as_settled("in graph replay " + std::to_string(replay)));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GpuDependentLaunch, ::testing::ValuesIn(kFamilies), family_name);

}  // namespace
}  // namespace mxq::test
