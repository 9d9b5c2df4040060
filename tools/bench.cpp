// `mxq bench` (built only with CUDA). How a number is made (STYLE "Benchmarks"):
//   - each case is captured into a CUDA graph of `calls` back-to-back calls that rotate over
//     `buffers` sets of input and output buffers; the inputs of all sets total >= 2x L2 (counted
//     at 1 byte per element, the smallest input of any op, so x of any dtype and e4m3 q both rotate
//     through at least twice the L2);
//   - the graph must hold at least one kernel node per call (three for composed), or the run
//     aborts: a kernel that ignores the caller's stream captures nothing and would read as a win;
//   - ops: rowwise and colwise are mxq::quantize with one axis requested, fused is mxq::quantize
//     with both, composed is mxq::quantize_composed, dequantize reads what composed wrote, weight is
//     mxq::quantize_weight on W (G, N, K); grouped cases pass offs (M-groups s_row, K-groups s_col);
//     probe is mxq::bench::quantize_probe, the fused kernel's bytes with a stand-in for the math
//     (the design's ceiling beside the kernel), and copy a plain copy kernel of x's bytes (the
//     shape's own ceiling: at a latency-bound size even a copy is far below the roof), both in the
//     main set only, dense bf16, right after fused;
//   - per-call time = median over `replays` timed graph replays (after `warmup`) of replay time
//     divided by calls;
//   - bytes come from traffic.h; the roof is cudaMemcpyAsync device-to-device, bytes read +
//     written, measured at 256 MiB, 1 GiB and 4 GiB at the start and at the end of the run (the
//     higher of the two is used); each row is compared with the copy whose traffic is nearest its
//     own;
//   - before timing a (shape, dtype, groups) block, fused and composed outputs are compared byte for
//     byte on the device (outputs poisoned with different patterns, so a byte neither path writes
//     is caught too; the probe writes other bytes by design and is not compared); expert weights,
//     which have no second path, run twice into differently poisoned outputs and must agree (every
//     byte written, deterministic).
// Cases come in sets (bench.h), each printed as its own table; one JSON holds every row.
#include "bench.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "common.h"
#include "gpu.h"
#include "mxq/mxq.h"

#ifndef MXQ_GIT_COMMIT
#define MXQ_GIT_COMMIT "unknown"
#endif

namespace mxq::tools {

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kRoofCopyBytes[] = {256 * kMiB, 1024 * kMiB, 4096 * kMiB};
constexpr int kRoofReplays = 30;
// A replay lasts at least kTargetGraphUs, so event resolution and the graph launch are moot; the
// two estimates below only size the graph and are never reported.
constexpr double kTargetGraphUs = 1000.0;
constexpr double kMinCallUs = 2.0;  // launch floor of one call
constexpr double kEstimateTBps = 3.0;
constexpr uint8_t kPoisonFused = 0xA5;
constexpr uint8_t kPoisonComposed = 0x5A;

// ---- CUDA graphs ----

class Graph {
 public:
  // Captures what `body` enqueues on `stream`. Global capture mode: a synchronizing or otherwise
  // unsafe call inside mxq fails the capture instead of passing unnoticed.
  template <typename Body>
  static Graph capture(cudaStream_t stream, Body&& body) {
    Graph g;
    MXQ_TOOL_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      body();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(stream, &broken);
      if (broken != nullptr) cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      throw;
    }
    MXQ_TOOL_CUDA(cudaStreamEndCapture(stream, &g.graph_));
    MXQ_TOOL_CUDA(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
    return g;
  }
  Graph(Graph&& o) noexcept
      : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }

  int count_nodes(cudaGraphNodeType type) const {
    size_t n = 0;
    MXQ_TOOL_CUDA(cudaGraphGetNodes(graph_, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0) MXQ_TOOL_CUDA(cudaGraphGetNodes(graph_, nodes.data(), &n));
    int count = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType t{};
      MXQ_TOOL_CUDA(cudaGraphNodeGetType(node, &t));
      count += t == type;
    }
    return count;
  }

  void launch(cudaStream_t stream) const { MXQ_TOOL_CUDA(cudaGraphLaunch(exec_, stream)); }

 private:
  Graph() = default;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Milliseconds of each of `replays` timed replays, after `warmup` untimed ones.
std::vector<double> replay_ms(const Graph& graph, int warmup, int replays, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) graph.launch(stream);
  std::vector<Event> starts(static_cast<size_t>(replays));
  std::vector<Event> stops(static_cast<size_t>(replays));
  for (size_t r = 0; r < starts.size(); ++r) {
    MXQ_TOOL_CUDA(cudaEventRecord(starts[r].get(), stream));
    graph.launch(stream);
    MXQ_TOOL_CUDA(cudaEventRecord(stops[r].get(), stream));
  }
  std::vector<double> ms;
  for (size_t r = 0; r < starts.size(); ++r) ms.push_back(elapsed_ms(starts[r], stops[r]));
  return ms;
}

// ---- the copy roof ----

struct RoofPoint {
  int64_t copy_bytes = 0;  // bytes copied; the traffic is twice that (read + written)
  double start_tbps = 0;
  double end_tbps = 0;
  double tbps() const { return std::max(start_tbps, end_tbps); }
};

// Timed as plain stream work between events, not as a graph: a 1-4 GiB memcpy node replayed from a
// graph ran at 2.7 TB/s on the H200 against 4.2 for the same cudaMemcpyAsync issued directly
// (2026-12-02), and the roof is the best copy the machine does.
double measure_copy_tbps(const DeviceBuffer& src, const DeviceBuffer& dst, int64_t bytes,
                         cudaStream_t stream) {
  auto copy = [&] {
    MXQ_TOOL_CUDA(
        cudaMemcpyAsync(dst.get(), src.get(), size_t(bytes), cudaMemcpyDeviceToDevice, stream));
  };
  for (int i = 0; i < 3; ++i) copy();
  std::vector<Event> starts(kRoofReplays);
  std::vector<Event> stops(kRoofReplays);
  for (size_t r = 0; r < starts.size(); ++r) {
    MXQ_TOOL_CUDA(cudaEventRecord(starts[r].get(), stream));
    copy();
    MXQ_TOOL_CUDA(cudaEventRecord(stops[r].get(), stream));
  }
  std::vector<double> ms;
  for (size_t r = 0; r < starts.size(); ++r) ms.push_back(elapsed_ms(starts[r], stops[r]));
  return 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e12;
}

// Measures every roof point; `at_end` selects which of the two passes is filled in.
void measure_roof(std::vector<RoofPoint>& roof, bool at_end, cudaStream_t stream) {
  const int64_t largest = kRoofCopyBytes[std::size(kRoofCopyBytes) - 1];
  const DeviceBuffer src(static_cast<size_t>(largest));
  const DeviceBuffer dst(static_cast<size_t>(largest));
  MXQ_TOOL_CUDA(cudaMemsetAsync(src.get(), 0x3C, src.bytes(), stream));
  // Wake the GPU up (clocks, TLBs) before the first timed copy: ~0.3 s of copying.
  for (int i = 0; i < 150; ++i) {
    MXQ_TOOL_CUDA(
        cudaMemcpyAsync(dst.get(), src.get(), dst.bytes(), cudaMemcpyDeviceToDevice, stream));
  }
  MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  if (roof.empty()) {
    for (int64_t bytes : kRoofCopyBytes) roof.push_back({bytes});
  }
  for (RoofPoint& p : roof) {
    (at_end ? p.end_tbps : p.start_tbps) = measure_copy_tbps(src, dst, p.copy_bytes, stream);
  }
}

// The roof point whose traffic (2x the copy) is nearest to `traffic`, on a log scale.
const RoofPoint& pick_roof(const std::vector<RoofPoint>& roof, int64_t traffic) {
  auto distance = [&](const RoofPoint& p) {
    return std::abs(std::log(2.0 * double(p.copy_bytes) / double(traffic)));
  };
  return *std::min_element(roof.begin(), roof.end(), [&](const RoofPoint& a, const RoofPoint& b) {
    return distance(a) < distance(b);
  });
}

// ---- the cases ----

// How the rows of a grouped case are split (dense: no offs).
enum class GroupsKind { kDense, kRandom, kEven, kSkewed };
constexpr double kSkewShare = 0.9;  // the skewed split's big group: 90% of the rows

const char* kind_name(GroupsKind kind) {
  switch (kind) {
    case GroupsKind::kDense:
      return "dense";
    case GroupsKind::kRandom:
      return "random";
    case GroupsKind::kEven:
      return "even";
    case GroupsKind::kSkewed:
      return "skewed";
  }
  return "?";
}

struct Grouping {
  GroupsKind kind = GroupsKind::kDense;
  int groups = 0;  // G; 0 when dense
  bool operator==(const Grouping& o) const { return kind == o.kind && groups == o.groups; }
  bool operator!=(const Grouping& o) const { return !(*this == o); }
  bool operator<(const Grouping& o) const {
    return std::pair(int(kind), groups) < std::pair(int(o.kind), o.groups);
  }
};
constexpr Grouping kDense{};

// "dense", "G=8" (random sizes), "G=8 even", "G=8 skew90".
std::string grouping_text(const Grouping& g) {
  switch (g.kind) {
    case GroupsKind::kDense:
      return "dense";
    case GroupsKind::kRandom:
      return "G=" + std::to_string(g.groups);
    case GroupsKind::kEven:
      return "G=" + std::to_string(g.groups) + " even";
    case GroupsKind::kSkewed:
      return "G=" + std::to_string(g.groups) + " skew" + std::to_string(int(kSkewShare * 100));
  }
  return "?";
}

// The JSON "offs" key suffix: "8" for random groups (as in the first schema), "8-even", "8-skewed".
std::string grouping_key(const Grouping& g) {
  const std::string n = std::to_string(g.groups);
  return g.kind == GroupsKind::kRandom ? n : n + "-" + kind_name(g.kind);
}

std::vector<int32_t> make_offsets(const Grouping& g, int64_t M, uint64_t seed) {
  switch (g.kind) {
    case GroupsKind::kRandom:
      return random_group_offsets(M, g.groups, seed + uint64_t(g.groups));
    case GroupsKind::kEven:
      return even_group_offsets(M, g.groups);
    case GroupsKind::kSkewed:
      return skewed_group_offsets(M, g.groups, kSkewShare, seed + uint64_t(g.groups));
    case GroupsKind::kDense:
      break;
  }
  return {};
}

// The largest of 128, 64, 32 dividing both M and K: 128 is the aligned case (whole scale atoms).
int alignment(const MatrixShape& s) {
  for (int a : {128, 64}) {
    if (s.M % a == 0 && s.K % a == 0) return a;
  }
  return kDimAlign;
}

struct BenchCase {
  BenchSet set = BenchSet::kMain;
  Op op = Op::kFused;
  MatrixShape shape;  // x (M, K); weights: one expert's (N, K)
  DType dtype = DType::kBFloat16;
  Grouping grouping;
  int64_t experts = 0;                            // weights: G
  WeightScaling scaling = WeightScaling::k32x32;  // weights
  std::optional<MatrixShape> neighbour;           // ragged: the aligned shape next to it

  bool weight() const { return op == Op::kWeight; }
  int groups() const { return grouping.groups; }
  int64_t elements() const { return weight() ? experts * shape.elements() : shape.elements(); }
  std::string shape_text() const {
    return weight() ? std::to_string(experts) + "x" + std::to_string(shape.M) + "x" +
                          std::to_string(shape.K)
                    : shape.str();
  }
  Traffic traffic() const {
    return weight() ? weight_traffic(experts, shape.M, shape.K, dtype)
                    : op_traffic(op, shape.M, shape.K, groups(), dtype);
  }
  int64_t effective() const {
    return weight() ? traffic().total() : effective_bytes(op, shape.M, shape.K, groups(), dtype);
  }
};

// The buffers a case runs on: cases with the same key share one workspace.
struct WorkspaceKey {
  bool weight = false;
  int64_t experts = 0;
  int64_t M = 0;
  int64_t K = 0;
  DType dtype = DType::kBFloat16;
  bool operator==(const WorkspaceKey& o) const {
    return weight == o.weight && experts == o.experts && M == o.M && K == o.K && dtype == o.dtype;
  }
  bool operator!=(const WorkspaceKey& o) const { return !(*this == o); }
};
WorkspaceKey workspace_key(const BenchCase& c) {
  return {c.weight(), c.experts, c.shape.M, c.shape.K, c.dtype};
}

// ---- the fixed sets (bench.h) ----

struct RaggedPair {
  MatrixShape ragged;   // multiples of 32, not of 128
  MatrixShape aligned;  // its neighbour, multiples of 128
};
const RaggedPair kRaggedPairs[] = {{{8160, 2880}, {8192, 3072}}, {{32736, 5120}, {32768, 5120}}};
const MatrixShape kGroupedShape{32768, 7168};
constexpr int kGroupedRandom[] = {8, 64, 256};
constexpr int kGroupedSplit = 8;  // G of the even and skewed splits
const MatrixShape kDtypeShape{32768, 7168};
constexpr Op kDtypeOps[] = {Op::kFused, Op::kRowwise, Op::kColwise};
constexpr DType kDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
struct WeightShape {
  int64_t G, N, K;
};
constexpr WeightShape kWeightShapes[] = {
    {8, 4096, 7168}, {64, 1536, 5120}, {128, 768, 2048}, {1, 7168, 2048}};
constexpr Op kActivationOps[] = {Op::kRowwise, Op::kColwise, Op::kFused, Op::kComposed,
                                 Op::kDequantize};
// The main set's dense bf16 cases add the probe and the copy right after fused, so their rows sit
// beside fused's.
constexpr Op kMainDenseBf16Ops[] = {Op::kRowwise, Op::kColwise,  Op::kFused,     Op::kProbe,
                                    Op::kCopy,    Op::kComposed, Op::kDequantize};

// ---- device buffers of one activation workspace (shape, dtype) ----

// Scale allocations of the largest group count the workspace's cases use (grouped ones are the
// larger: M-groups and K-groups allocations hold 128G and 4G more).
int64_t s_row_capacity(const MatrixShape& s, int max_groups) {
  return std::max(s_row_shape(s.M, s.K).bytes(), s_row_shape(s.M, s.K, max_groups).bytes());
}
int64_t s_col_capacity(const MatrixShape& s, int max_groups) {
  return std::max(s_col_shape(s.M, s.K, 0).bytes(), s_col_shape(s.M, s.K, max_groups).bytes());
}

// Input and outputs of one rotation slot. Each slot has its own composed workspace: the plain
// scales are traffic too and rotate with the rest. `out` is dequantize's bf16 output.
struct BufferSet {
  DeviceBuffer x, q_row, s_row, q_col, s_col, workspace, out;
  BufferSet(const MatrixShape& s, DType dtype, int max_groups)
      : x(size_t(dtype_bytes(dtype) * s.elements())),
        q_row(size_t(q_row_shape(s.M, s.K).bytes())),
        s_row(size_t(s_row_capacity(s, max_groups))),
        q_col(size_t(q_col_shape(s.M, s.K).bytes())),
        s_col(size_t(s_col_capacity(s, max_groups))),
        workspace(size_t(composed_workspace_bytes(s.M, s.K))),
        out(size_t(2 * s.elements())) {}

  // What the constructor allocates, without allocating.
  static double bytes(const MatrixShape& s, DType dtype, int max_groups) {
    return double(dtype_bytes(dtype)) * double(s.elements()) + 2.0 * double(s.elements()) +
           double(q_row_shape(s.M, s.K).bytes()) + double(s_row_capacity(s, max_groups)) +
           double(q_col_shape(s.M, s.K).bytes()) + double(s_col_capacity(s, max_groups)) +
           double(composed_workspace_bytes(s.M, s.K));
  }
};

// Input and outputs of one rotation slot of expert weights W (G, N, K).
struct WeightBufferSet {
  DeviceBuffer w, q_row, s_row, q_col, s_col;
  WeightBufferSet(int64_t G, int64_t N, int64_t K, DType dtype)
      : w(size_t(dtype_bytes(dtype) * G * N * K)),
        q_row(size_t(G * N * K)),
        s_row(size_t(weight_s_row_shape(G, N, K).bytes())),
        q_col(size_t(G * N * K)),
        s_col(size_t(weight_s_col_shape(G, N, K).bytes())) {}
  static double bytes(int64_t G, int64_t N, int64_t K, DType dtype) {
    return double(dtype_bytes(dtype) + 2) * double(G * N * K) +
           double(weight_s_row_shape(G, N, K).bytes()) +
           double(weight_s_col_shape(G, N, K).bytes());
  }
};

// Rotating sets: enough that their inputs total >= 2x L2 (at 1 byte per element).
int64_t rotating_sets(int64_t elements, int64_t l2_bytes) {
  return std::max<int64_t>(2, ceil_div(2 * l2_bytes, std::max<int64_t>(elements, 1)));
}

// Device memory of one workspace: its rotating sets.
double workspace_bytes(const BenchCase& c, int max_groups, int64_t l2_bytes) {
  const double sets = double(rotating_sets(c.elements(), l2_bytes));
  return sets * (c.weight() ? WeightBufferSet::bytes(c.experts, c.shape.M, c.shape.K, c.dtype)
                            : BufferSet::bytes(c.shape, c.dtype, max_groups));
}

// Refuses a workspace whose buffers cannot fit in the GPU's free memory, before allocating any.
void check_device_memory(const BenchCase& c, int max_groups, int64_t l2_bytes) {
  size_t free = 0;
  size_t total = 0;
  MXQ_TOOL_CUDA(cudaMemGetInfo(&free, &total));
  const double needed = workspace_bytes(c, max_groups, l2_bytes);
  if (needed <= double(free)) return;
  throw ToolError(c.shape_text() + " " + to_string(c.dtype) + " needs about " +
                  format_bytes(needed) + " of GPU memory (" +
                  std::to_string(rotating_sets(c.elements(), l2_bytes)) +
                  " rotating buffer sets), but only " + format_bytes(double(free)) +
                  " is free; leave it out (--shapes, --sets)");
}

// The rotating sets of one (shape, dtype), filled with random input (no NaN or Inf), and the group
// offsets of every grouping its cases use (made on first use).
class ShapeWorkspace {
 public:
  ShapeWorkspace(const MatrixShape& shape, DType dtype, int max_groups, int64_t l2_bytes,
                 uint64_t seed, cudaStream_t stream)
      : shape_(shape), dtype_(dtype), seed_(seed), status_(sizeof(int32_t)) {
    const int64_t sets = rotating_sets(shape.elements(), l2_bytes);
    sets_.reserve(size_t(sets));
    for (int64_t i = 0; i < sets; ++i) {
      sets_.emplace_back(shape, dtype, max_groups);
      fill_random(sets_.back().x.get(), dtype, shape.elements(), shape.K, seed + uint64_t(i),
                  stream);
    }
    MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  }

  const MatrixShape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  const std::vector<BufferSet>& sets() const { return sets_; }

  // Makes the offsets of `g` (host and device) if not made yet.
  void prepare(const Grouping& g, cudaStream_t stream) {
    if (g.kind == GroupsKind::kDense || offs_host_.count(g) > 0) return;
    const std::vector<int32_t>& host = offs_host_[g] = make_offsets(g, shape_.M, seed_);
    DeviceBuffer& d = offs_[g] = DeviceBuffer(host.size() * sizeof(int32_t));
    MXQ_TOOL_CUDA(cudaMemcpyAsync(d.get(), host.data(), d.bytes(), cudaMemcpyHostToDevice, stream));
    MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  }
  const int32_t* offs(const Grouping& g) const {
    return g.kind == GroupsKind::kDense ? nullptr : offs_.at(g).as<int32_t>();
  }
  const std::vector<int32_t>& offs_host(const Grouping& g) const { return offs_host_.at(g); }
  int32_t* status(const Grouping& g) const {
    return g.kind == GroupsKind::kDense ? nullptr : status_.as<int32_t>();
  }

 private:
  MatrixShape shape_;
  DType dtype_;
  uint64_t seed_;
  std::vector<BufferSet> sets_;
  std::map<Grouping, DeviceBuffer> offs_;
  std::map<Grouping, std::vector<int32_t>> offs_host_;
  DeviceBuffer status_;
};

// The rotating sets of one expert-weight shape (G, N, K), filled with random input.
class WeightWorkspace {
 public:
  WeightWorkspace(int64_t G, int64_t N, int64_t K, DType dtype, int64_t l2_bytes, uint64_t seed,
                  cudaStream_t stream)
      : G_(G), N_(N), K_(K), dtype_(dtype) {
    const int64_t sets = rotating_sets(G * N * K, l2_bytes);
    sets_.reserve(size_t(sets));
    for (int64_t i = 0; i < sets; ++i) {
      sets_.emplace_back(G, N, K, dtype);
      // Row-major (G*N, K): the 32x32 tiles of every expert get their own exponents.
      fill_random(sets_.back().w.get(), dtype, G * N * K, K, seed + uint64_t(i), stream);
    }
    MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  }
  const std::vector<WeightBufferSet>& sets() const { return sets_; }

  QuantizeWeightParams params(const WeightBufferSet& b, WeightScaling scaling, ScaleRounding rule,
                              cudaStream_t stream) const {
    QuantizeWeightParams p;
    p.w = b.w.get();
    p.dtype = dtype_;
    p.G = G_;
    p.N = N_;
    p.K = K_;
    p.rounding = rule;
    p.scaling = scaling;
    p.q_row = b.q_row.as();
    p.s_row = b.s_row.as();
    p.q_col = b.q_col.as();
    p.s_col = b.s_col.as();
    p.stream = stream;
    return p;
  }

 private:
  int64_t G_, N_, K_;
  DType dtype_;
  std::vector<WeightBufferSet> sets_;
};

// ---- one call of each op ----

struct RunContext {
  const ShapeWorkspace* ws;
  Grouping grouping;
  ScaleRounding rule;
  cudaStream_t stream;
  int groups() const { return grouping.groups; }
};

// The params of one call reading set `in`'s x and writing set `out`'s outputs; `rowwise` and
// `colwise` pick the axes (a null data/scale pair skips that axis).
QuantizeParams quantize_params(const RunContext& c, const BufferSet& in, const BufferSet& out,
                               bool rowwise, bool colwise) {
  QuantizeParams p;
  p.x = in.x.get();
  p.dtype = c.ws->dtype();
  p.M = c.ws->shape().M;
  p.K = c.ws->shape().K;
  p.rounding = c.rule;
  p.offs = c.ws->offs(c.grouping);
  p.num_groups = c.groups();
  if (rowwise) {
    p.q_row = out.q_row.as();
    p.s_row = out.s_row.as();
  }
  if (colwise) {
    p.q_col = out.q_col.as();
    p.s_col = out.s_col.as();
  }
  p.status = c.ws->status(c.grouping);
  p.stream = c.stream;
  return p;
}

// One call of `op` reading set `b`'s inputs and writing set `b`'s outputs.
void launch_op(Op op, const RunContext& c, const BufferSet& b) {
  const int64_t M = c.ws->shape().M;
  const int64_t K = c.ws->shape().K;
  switch (op) {
    case Op::kRowwise:
      return quantize(quantize_params(c, b, b, true, false));
    case Op::kColwise:
      return quantize(quantize_params(c, b, b, false, true));
    case Op::kFused:
      return quantize(quantize_params(c, b, b, true, true));
    case Op::kComposed:
      return quantize_composed(quantize_params(c, b, b, true, true), b.workspace.get());
    case Op::kProbe:
      return bench::quantize_probe(quantize_params(c, b, b, true, true));
    case Op::kCopy:
      // x's bytes are q_row's and q_col's together for bf16, the only dtype the cases give it.
      if (c.ws->dtype() != DType::kBFloat16) throw std::logic_error("launch_op: copy is bf16 only");
      return copy_halves(b.x.get(), b.q_row.get(), b.q_col.get(), 2 * M * K, c.stream);
    case Op::kDequantize: {
      // Dense: the forward operand (q_row, blocked s_row). Grouped: the wgrad operand (q_col,
      // K-groups s_col).
      DequantizeParams p;
      if (c.groups() == 0) {
        p.q = b.q_row.as();
        p.scales = b.s_row.as();
        p.rows = M;
        p.cols = K;
      } else {
        p.q = b.q_col.as();
        p.scales = b.s_col.as();
        p.rows = K;
        p.cols = M;
        p.layout = ScaleLayout::kKGroups;
        p.offs = c.ws->offs(c.grouping);
        p.num_groups = c.groups();
        p.status = c.ws->status(c.grouping);
      }
      p.out = b.out.get();
      p.stream = c.stream;
      return dequantize(p);
    }
    case Op::kWeight:
      break;
  }
  throw std::logic_error("launch_op: not an activation op");
}

int min_kernels_per_call(Op op) { return op == Op::kComposed ? 3 : 1; }

// ---- checks on the device before timing ----

struct VerifyResult {
  BenchSet set = BenchSet::kMain;
  std::string check;  // "fused == composed", "copy == x", or "repeat" (weights: two runs agree)
  std::string shape;  // shape_text()
  DType dtype = DType::kBFloat16;
  Grouping grouping;
  std::string scaling;  // weights
  int64_t bytes = 0;    // bytes compared
  int64_t mismatches = 0;
  int32_t fused_status = 0;
  int32_t composed_status = 0;
  bool ok() const { return mismatches == 0 && fused_status == 0 && composed_status == 0; }
};

int32_t read_status(const RunContext& c) {
  if (c.groups() == 0) return 0;
  int32_t status = 0;
  MXQ_TOOL_CUDA(cudaMemcpyAsync(&status, c.ws->status(c.grouping), sizeof status,
                                cudaMemcpyDeviceToHost, c.stream));
  MXQ_TOOL_CUDA(cudaStreamSynchronize(c.stream));
  return status;
}

void reset_status(const RunContext& c) {
  if (c.groups() != 0)
    MXQ_TOOL_CUDA(cudaMemsetAsync(c.ws->status(c.grouping), 0xFF, sizeof(int32_t), c.stream));
}

void poison(std::initializer_list<const DeviceBuffer*> buffers, uint8_t pattern,
            cudaStream_t stream) {
  for (const DeviceBuffer* d : buffers) {
    MXQ_TOOL_CUDA(cudaMemsetAsync(d->get(), pattern, d->bytes(), stream));
  }
}

// A check of case `bc` on workspace `c`, its fields but the counts filled in.
VerifyResult new_verify(const BenchCase& bc, const RunContext& c, const char* check) {
  VerifyResult v;
  v.set = bc.set;
  v.check = check;
  v.shape = c.ws->shape().str();
  v.dtype = c.ws->dtype();
  v.grouping = c.grouping;
  return v;
}

// Fused writes into set 0's outputs, composed (same input: set 0's x) into set 1's. Only the bytes
// of this grouping's allocations are compared (the buffers hold the largest of the workspace).
VerifyResult verify_fused_vs_composed(const BenchCase& bc, const RunContext& c) {
  const BufferSet& a = c.ws->sets()[0];
  const BufferSet& b = c.ws->sets()[1];
  const MatrixShape& s = c.ws->shape();
  VerifyResult v = new_verify(bc, c, "fused == composed");
  poison({&a.q_row, &a.s_row, &a.q_col, &a.s_col}, kPoisonFused, c.stream);
  poison({&b.q_row, &b.s_row, &b.q_col, &b.s_col}, kPoisonComposed, c.stream);
  reset_status(c);
  quantize(quantize_params(c, a, a, true, true));
  v.fused_status = read_status(c);
  reset_status(c);
  quantize_composed(quantize_params(c, a, b, true, true), b.workspace.get());
  v.composed_status = read_status(c);
  const std::pair<const DeviceBuffer*, const DeviceBuffer*> outputs[] = {
      {&a.q_row, &b.q_row}, {&a.s_row, &b.s_row}, {&a.q_col, &b.q_col}, {&a.s_col, &b.s_col}};
  const int64_t sizes[] = {q_row_shape(s.M, s.K).bytes(), s_row_shape(s.M, s.K, c.groups()).bytes(),
                           q_col_shape(s.M, s.K).bytes(),
                           s_col_shape(s.M, s.K, c.groups()).bytes()};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    v.bytes += sizes[i];
    v.mismatches +=
        count_mismatches(outputs[i].first->as(), outputs[i].second->as(), sizes[i], c.stream);
  }
  return v;
}

// The copy op moves x's bytes, all of them: q_row and q_col (poisoned first) must hold x's two halves.
VerifyResult verify_copy(const BenchCase& bc, const RunContext& c) {
  const BufferSet& a = c.ws->sets()[0];
  const int64_t half = c.ws->shape().M * c.ws->shape().K;  // bytes: x is bf16
  VerifyResult v = new_verify(bc, c, "copy == x");
  poison({&a.q_row, &a.q_col}, kPoisonFused, c.stream);
  launch_op(Op::kCopy, c, a);
  v.bytes = 2 * half;
  v.mismatches = count_mismatches(a.x.as(), a.q_row.as(), half, c.stream) +
                 count_mismatches(a.x.as() + half, a.q_col.as(), half, c.stream);
  return v;
}

// Composed on every set: valid q and scales everywhere, so dequantize reads real data.
void prime_outputs(const RunContext& c) {
  for (const BufferSet& b : c.ws->sets())
    quantize_composed(quantize_params(c, b, b, true, true), b.workspace.get());
  MXQ_TOOL_CUDA(cudaStreamSynchronize(c.stream));
}

// ---- one timed case ----

struct BenchRow {
  BenchCase c;
  Traffic traffic;
  int64_t effective = 0;  // fused bytes for dual ops (traffic.h)
  double us = 0;          // median per call
  double us_min = 0;
  double us_max = 0;
  double roof_tbps = 0;
  int64_t roof_copy_bytes = 0;
  int buffers = 0;
  int calls = 0;  // calls per graph
  int kernel_nodes = 0;

  double tbps() const { return double(traffic.total()) / (us * 1e-6) / 1e12; }
  double effective_tbps() const { return double(effective) / (us * 1e-6) / 1e12; }
  double pct_roof() const { return 100.0 * tbps() / roof_tbps; }
};

// Calls per graph: a multiple of the buffer count, and enough calls for the replay to last
// kTargetGraphUs.
int calls_per_graph(int64_t bytes, int buffers) {
  const double estimate_us = std::max(kMinCallUs, double(bytes) / (kEstimateTBps * 1e6));
  const int wanted = std::clamp(int(std::ceil(kTargetGraphUs / estimate_us)), 1, 256);
  return buffers * int(ceil_div(wanted, buffers));
}

// Times `bc`: `launch(i)` enqueues one call on rotation set i (of `buffers`).
BenchRow time_case(const BenchCase& bc, int buffers, const std::function<void(int)>& launch,
                   const std::vector<RoofPoint>& roof, const BenchOptions& o, cudaStream_t stream) {
  BenchRow row;
  row.c = bc;
  row.traffic = bc.traffic();
  row.effective = bc.effective();
  row.buffers = buffers;
  row.calls = calls_per_graph(row.traffic.total(), row.buffers);

  const Graph graph = Graph::capture(stream, [&] {
    for (int i = 0; i < row.calls; ++i) launch(i % buffers);
  });
  row.kernel_nodes = graph.count_nodes(cudaGraphNodeTypeKernel);
  const int expected = row.calls * min_kernels_per_call(bc.op);
  if (row.kernel_nodes < expected) {
    std::ostringstream os;
    os << "the CUDA graph of " << op_name(bc.op) << " " << bc.shape_text() << " "
       << grouping_text(bc.grouping) << " holds " << row.kernel_nodes
       << " kernel nodes, expected at least " << expected << " (" << row.calls
       << " calls): the op does not launch on the caller's stream; its timing would be meaningless";
    throw std::runtime_error(os.str());
  }
  std::vector<double> per_call = replay_ms(graph, o.warmup, o.replays, stream);
  for (double& ms : per_call) ms = ms * 1e3 / row.calls;
  row.us = median(per_call);
  row.us_min = *std::min_element(per_call.begin(), per_call.end());
  row.us_max = *std::max_element(per_call.begin(), per_call.end());
  const RoofPoint& r = pick_roof(roof, row.traffic.total());
  row.roof_tbps = r.tbps();
  row.roof_copy_bytes = r.copy_bytes;
  return row;
}

// ---- the plan ----

bool op_selected(const BenchOptions& o, Op op) {
  return o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
}

std::vector<BenchSet> chosen_sets(const BenchOptions& o) {
  if (!o.sets.empty()) return o.sets;
  if (!o.shapes.empty()) return {BenchSet::kMain};
  if (o.quick) return {BenchSet::kMain, BenchSet::kRagged};
  return {std::begin(kAllSets), std::end(kAllSets)};
}

// Every case of the run, set after set (in kAllSets order), the cases of one (shape, dtype)
// together so that each workspace is made once per set.
std::vector<BenchCase> plan_cases(const BenchOptions& o) {
  const std::vector<BenchSet> sets = chosen_sets(o);
  auto wanted = [&](BenchSet s) { return std::find(sets.begin(), sets.end(), s) != sets.end(); };
  std::vector<BenchCase> cases;
  auto add_activation = [&](BenchSet set, const MatrixShape& shape, DType dtype,
                            const std::vector<Grouping>& groupings, const std::vector<Op>& ops,
                            std::optional<MatrixShape> neighbour = std::nullopt) {
    for (const Grouping& g : groupings) {
      for (Op op : ops) {
        if (!op_selected(o, op)) continue;
        BenchCase c;
        c.set = set;
        c.op = op;
        c.shape = shape;
        c.dtype = dtype;
        c.grouping = g;
        c.neighbour = neighbour;
        cases.push_back(c);
      }
    }
  };
  const std::vector<Op> activation_ops(std::begin(kActivationOps), std::end(kActivationOps));
  if (wanted(BenchSet::kMain)) {
    std::vector<MatrixShape> shapes = o.shapes;
    if (shapes.empty()) shapes = o.quick ? quick_bench_shapes() : default_bench_shapes();
    std::vector<Grouping> groupings;
    if (!o.no_dense) groupings.push_back(kDense);
    for (int g : o.groups) groupings.push_back({GroupsKind::kRandom, g});
    const std::vector<Op> dense_bf16_ops(std::begin(kMainDenseBf16Ops),
                                         std::end(kMainDenseBf16Ops));
    for (const MatrixShape& s : shapes) {
      for (const Grouping& g : groupings) {
        const bool probe = g == kDense && o.dtype == DType::kBFloat16;
        add_activation(BenchSet::kMain, s, o.dtype, {g}, probe ? dense_bf16_ops : activation_ops);
      }
    }
  }
  if (wanted(BenchSet::kRagged)) {
    const size_t pairs = o.quick ? 1 : std::size(kRaggedPairs);
    for (size_t i = 0; i < pairs; ++i) {
      add_activation(BenchSet::kRagged, kRaggedPairs[i].ragged, o.dtype, {kDense}, activation_ops,
                     kRaggedPairs[i].aligned);
      add_activation(BenchSet::kRagged, kRaggedPairs[i].aligned, o.dtype, {kDense}, activation_ops);
    }
  }
  if (wanted(BenchSet::kGrouped)) {
    std::vector<Grouping> groupings;
    if (!o.no_dense) groupings.push_back(kDense);
    for (int g : kGroupedRandom) groupings.push_back({GroupsKind::kRandom, g});
    groupings.push_back({GroupsKind::kEven, kGroupedSplit});
    groupings.push_back({GroupsKind::kSkewed, kGroupedSplit});
    add_activation(BenchSet::kGrouped, kGroupedShape, o.dtype, groupings, activation_ops);
  }
  if (wanted(BenchSet::kDtypes)) {
    for (DType t : kDtypes) {
      add_activation(BenchSet::kDtypes, kDtypeShape, t, {kDense},
                     std::vector<Op>(std::begin(kDtypeOps), std::end(kDtypeOps)));
    }
  }
  if (wanted(BenchSet::kWeights) && op_selected(o, Op::kWeight)) {
    for (const WeightShape& w : kWeightShapes) {
      for (WeightScaling scaling : {WeightScaling::k1x32, WeightScaling::k32x32}) {
        BenchCase c;
        c.set = BenchSet::kWeights;
        c.op = Op::kWeight;
        c.shape = {w.N, w.K};
        c.dtype = DType::kBFloat16;
        c.experts = w.G;
        c.scaling = scaling;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// Ends the messages of option values refused after parsing, as the parse-time ones end.
constexpr const char* kSeeHelp = " (see `mxq bench --help`)";

// Every option checked before the GPU is touched, in the library's words where it has the rule.
void check_options(const BenchOptions& o, const std::vector<BenchCase>& cases) {
  if (o.replays < 1)
    throw ToolError("--replays must be at least 1, got " + std::to_string(o.replays) + kSeeHelp);
  if (o.warmup < 0)
    throw ToolError("--warmup must be at least 0, got " + std::to_string(o.warmup) + kSeeHelp);
  for (int g : o.groups) {
    if (g < 1 || g > kMaxGroups) {
      throw ToolError("--groups: each count must be in [1, " + std::to_string(kMaxGroups) +
                      "], got " + std::to_string(g) + kSeeHelp);
    }
  }
  for (const MatrixShape& s : o.shapes) {
    for (const auto& [name, value] : {std::pair{"M", s.M}, std::pair{"K", s.K}}) {
      if (value == 0 || value % kDimAlign != 0) {
        throw ToolError("--shapes " + s.str() + ": " + name + " must be a " +
                        (value == 0 ? "positive " : "") + "multiple of " +
                        std::to_string(kDimAlign) + ", got " + std::to_string(value) + kSeeHelp);
      }
    }
    // Larger shapes would overflow traffic.h's 64-bit byte counts (--list prints them).
    if (s.elements() > kMaxTrafficElements) {
      throw ToolError("--shapes " + s.str() + ": M*K must be at most 2^56 (" +
                      std::to_string(kMaxTrafficElements) + ") elements, got " +
                      std::to_string(s.elements()) + kSeeHelp);
    }
  }
  if (cases.empty()) {
    const bool ceiling = std::any_of(o.ops.begin(), o.ops.end(),
                                     [](Op op) { return op == Op::kProbe || op == Op::kCopy; });
    throw ToolError(
        std::string(
            "nothing to run: no case of the chosen sets (--sets) uses the chosen ops (--ops)") +
        (ceiling ? "; probe and copy run in the main set only, dense, bf16" : "") + kSeeHelp);
  }
}

// The largest G among the cases [first, end of its workspace block).
int block_max_groups(const std::vector<BenchCase>& cases, size_t first) {
  int g = 0;
  for (size_t i = first; i < cases.size() && workspace_key(cases[i]) == workspace_key(cases[first]);
       ++i) {
    g = std::max(g, cases[i].groups());
  }
  return g;
}

// ---- reporting ----

// "main    fused      8192x2048     bf16 G=8        " (fixed widths: progress lines line up).
std::string case_text(const BenchCase& c) {
  std::ostringstream os;
  os << std::left << std::setw(8) << set_name(c.set) << std::setw(11) << op_name(c.op)
     << std::setw(14) << c.shape_text() << std::setw(5) << to_string(c.dtype) << std::setw(12)
     << (c.weight() ? to_string(c.scaling) : grouping_text(c.grouping));
  return os.str();
}

std::string progress_line(size_t index, size_t total, const BenchRow& r) {
  std::ostringstream os;
  os << "[" << std::setw(3) << index << "/" << total << "] " << case_text(r.c) << std::right
     << std::setw(10) << fixed(r.us, 1) << " us " << std::setw(7) << fixed(r.tbps(), 3) << " TB/s "
     << std::setw(6) << fixed(r.pct_roof(), 1) << "% of roof  (" << r.buffers << " buffers, "
     << r.calls << " calls/graph, " << r.kernel_nodes << " kernel nodes)";
  return os.str();
}

// The row of the same set and op at `shape` (and dtype, grouping), or null.
const BenchRow* find_row(const std::vector<BenchRow>& rows, BenchSet set, Op op,
                         const MatrixShape& shape, DType dtype, const Grouping& g) {
  for (const BenchRow& r : rows) {
    if (r.c.set == set && r.c.op == op && r.c.shape.M == shape.M && r.c.shape.K == shape.K &&
        r.c.dtype == dtype && r.c.grouping == g && !r.c.weight()) {
      return &r;
    }
  }
  return nullptr;
}

std::string ratio_text(double value) { return fixed(value, 2) + "x"; }

std::vector<const BenchRow*> rows_of(const std::vector<BenchRow>& rows, BenchSet set) {
  std::vector<const BenchRow*> out;
  for (const BenchRow& r : rows) {
    if (r.c.set == set) out.push_back(&r);
  }
  return out;
}

// One table per set; the columns after the common ones say what that set compares. Outside the
// main set the rows are listed op by op (stable), so each comparison reads down consecutive lines.
std::string set_table(const std::vector<BenchRow>& all, BenchSet set) {
  std::vector<const BenchRow*> rows = rows_of(all, set);
  if (set != BenchSet::kMain) {
    std::stable_sort(rows.begin(), rows.end(), [](const BenchRow* a, const BenchRow* b) {
      return int(a->c.op) < int(b->c.op);
    });
  }
  std::vector<std::string> header{"op", "shape"};
  switch (set) {
    case BenchSet::kMain:
      header.insert(header.end(), {"dtype", "groups"});
      break;
    case BenchSet::kRagged:
      header.push_back("align");
      break;
    case BenchSet::kGrouped:
      header.push_back("groups");
      break;
    case BenchSet::kDtypes:
      header.push_back("dtype");
      break;
    case BenchSet::kWeights:
      header.push_back("scaling");
      break;
  }
  header.insert(header.end(), {"us", "moved", "TB/s", "% roof", "eff. TB/s"});
  if (set == BenchSet::kRagged) header.push_back("TB/s vs aligned");
  if (set == BenchSet::kGrouped) header.insert(header.end(), {"TB/s vs dense", "skew vs even"});
  if (set == BenchSet::kDtypes) header.push_back("time vs bf16");
  Table t(header);
  for (const BenchRow* r : rows) {
    std::vector<std::string> cells{op_name(r->c.op), r->c.shape_text()};
    switch (set) {
      case BenchSet::kMain:
        cells.insert(cells.end(), {to_string(r->c.dtype), grouping_text(r->c.grouping)});
        break;
      case BenchSet::kRagged:
        cells.push_back(std::to_string(alignment(r->c.shape)));
        break;
      case BenchSet::kGrouped:
        cells.push_back(grouping_text(r->c.grouping));
        break;
      case BenchSet::kDtypes:
        cells.push_back(to_string(r->c.dtype));
        break;
      case BenchSet::kWeights:
        cells.push_back(to_string(r->c.scaling));
        break;
    }
    cells.insert(cells.end(), {fixed(r->us, 1), format_bytes(double(r->traffic.total())),
                               fixed(r->tbps(), 3), fixed(r->pct_roof(), 1),
                               op_is_dual(r->c.op) ? fixed(r->effective_tbps(), 3) : ""});
    if (set == BenchSet::kRagged) {
      const BenchRow* n =
          r->c.neighbour ? find_row(all, set, r->c.op, *r->c.neighbour, r->c.dtype, r->c.grouping)
                         : nullptr;
      cells.push_back(n ? ratio_text(r->tbps() / n->tbps()) + " (" + n->c.shape.str() + ")" : "");
    }
    if (set == BenchSet::kGrouped) {
      const BenchRow* d = find_row(all, set, r->c.op, r->c.shape, r->c.dtype, kDense);
      cells.push_back(d && r->c.groups() > 0 ? ratio_text(r->tbps() / d->tbps()) : "");
      const BenchRow* even = r->c.grouping.kind == GroupsKind::kSkewed
                                 ? find_row(all, set, r->c.op, r->c.shape, r->c.dtype,
                                            {GroupsKind::kEven, r->c.groups()})
                                 : nullptr;
      cells.push_back(even ? ratio_text(r->tbps() / even->tbps()) : "");
    }
    if (set == BenchSet::kDtypes) {
      const BenchRow* b = find_row(all, set, r->c.op, r->c.shape, DType::kBFloat16, r->c.grouping);
      cells.push_back(b && r->c.dtype != DType::kBFloat16 ? ratio_text(r->us / b->us) : "");
    }
    t.add(cells);
  }
  return t.str();
}

const char* set_title(BenchSet set) {
  switch (set) {
    case BenchSet::kMain:
      return "main: the benchmark shapes, dense and random groups";
    case BenchSet::kRagged:
      return "ragged: 32-multiple shapes next to 128-aligned neighbours (TB/s ratio, same op)";
    case BenchSet::kGrouped:
      return "grouped: 32-multiple group sizes; random (an empty group, a tail), even and skewed "
             "(one group holds 90% of the rows) splits";
    case BenchSet::kDtypes:
      return "dtypes: input type (fp32 reads 4 bytes an element; time ratio against bf16)";
    case BenchSet::kWeights:
      return "weights: mxq::quantize_weight on W (G, N, K), bf16, both scalings (G x N x K)";
  }
  return "?";
}

struct DualSummary {
  const BenchRow* fused;
  const BenchRow* composed;
  const BenchRow* probe;
  const BenchRow* copy;
};

// Fused rows of the main set with their composed, probe and copy partners.
std::vector<DualSummary> pair_dual_rows(const std::vector<BenchRow>& rows) {
  std::vector<DualSummary> out;
  for (const BenchRow& f : rows) {
    if (f.c.op != Op::kFused || f.c.set != BenchSet::kMain) continue;
    out.push_back({&f, find_row(rows, f.c.set, Op::kComposed, f.c.shape, f.c.dtype, f.c.grouping),
                   find_row(rows, f.c.set, Op::kProbe, f.c.shape, f.c.dtype, f.c.grouping),
                   find_row(rows, f.c.set, Op::kCopy, f.c.shape, f.c.dtype, f.c.grouping)});
  }
  return out;
}

// Shapes whose fused traffic is under 2x L2 are latency-bound (512x4096): left out of the roof
// statistics.
bool is_bandwidth_shape(const MatrixShape& s, int64_t l2_bytes) {
  return op_traffic(Op::kFused, s.M, s.K, 0).total() >= 2 * l2_bytes;
}

void print_summary(const std::vector<BenchRow>& rows, int64_t l2_bytes) {
  const auto pairs = pair_dual_rows(rows);
  if (pairs.empty()) return;
  // The probe's columns when the run has probe rows: fused against its own design's ceiling.
  const bool probes = std::any_of(pairs.begin(), pairs.end(),
                                  [](const DualSummary& s) { return s.probe != nullptr; });
  std::vector<std::string> header{
      "shape",   "groups",          "fused us",     "composed us",
      "speedup", "fused eff. TB/s", "fused % roof", "composed eff. TB/s"};
  // The copy's column when the run has copy rows: the shape's own ceiling on the same roof.
  const bool copies = std::any_of(pairs.begin(), pairs.end(),
                                  [](const DualSummary& s) { return s.copy != nullptr; });
  if (probes) header.insert(header.end(), {"probe eff. TB/s", "fused % of probe"});
  if (copies) header.push_back("copy % roof");
  Table t(header);
  std::vector<double> pct;
  for (const DualSummary& s : pairs) {
    const BenchRow& f = *s.fused;
    if (is_bandwidth_shape(f.c.shape, l2_bytes)) pct.push_back(f.pct_roof());
    std::vector<std::string> cells{f.c.shape.str(),
                                   grouping_text(f.c.grouping),
                                   fixed(f.us, 1),
                                   s.composed ? fixed(s.composed->us, 1) : "-",
                                   s.composed ? fixed(s.composed->us / f.us, 2) + "x" : "-",
                                   fixed(f.effective_tbps(), 3),
                                   fixed(f.pct_roof(), 1),
                                   s.composed ? fixed(s.composed->effective_tbps(), 3) : "-"};
    if (probes) {
      cells.insert(cells.end(), {s.probe ? fixed(s.probe->effective_tbps(), 3) : "-",
                                 s.probe ? fixed(100.0 * s.probe->us / f.us, 1) : "-"});
    }
    if (copies) cells.push_back(s.copy ? fixed(s.copy->pct_roof(), 1) : "-");
    t.add(cells);
  }
  std::cout << "\nFused vs composed, main set (effective TB/s = fused bytes / time, ~4.06 B/elem "
               "for bf16, comparable with the peers in benchmarks/README.md"
            << (probes ? "; probe: the fused kernel's data movement without the math, its design's "
                         "ceiling"
                       : "")
            << (copies ? "; copy: a plain copy kernel of x's bytes, the shape's own ceiling" : "")
            << "):\n"
            << t.str();
  if (!pct.empty()) {
    std::sort(pct.begin(), pct.end());
    std::cout << "fused % of copy roof over " << pct.size()
              << " bandwidth cases (fused traffic >= 2x L2): min " << fixed(pct.front(), 1)
              << "%, median " << fixed(median(pct), 1) << "%, max " << fixed(pct.back(), 1)
              << "%\n";
  }
}

// ---- JSON ----

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? fixed(v, 4) : "null"; }

std::string commit_id() {
  const char* env = std::getenv("MXQ_COMMIT");
  return env != nullptr && env[0] != '\0' ? env : MXQ_GIT_COMMIT;
}

std::string default_json_path(const DeviceInfo& d) {
  const std::string stem = "benchmarks/results/" + slug(d.name) + "_" + today();
  std::string path = stem + ".json";
  for (int i = 2; std::filesystem::exists(path); ++i)
    path = stem + "_" + std::to_string(i) + ".json";
  return path;
}

// Opens the results file once before the run (making its directories), so a path that cannot be
// written fails in a second rather than after the whole benchmark. A file made only for this test
// is removed again; what the run writes at the end replaces an existing one.
void check_json_writable(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) {
    throw ToolError(option + " " + path + ": cannot create its directory " +
                    p.parent_path().string() + ": " + ec.message() + kSeeHelp);
  }
  const bool existed = fs::exists(p, ec);
  std::ofstream f(path, std::ios::app);  // append: an existing file keeps its contents for now
  if (!f) {
    throw ToolError(option + " " + path + ": cannot open it for writing: " + std::strerror(errno) +
                    kSeeHelp);
  }
  f.close();
  if (!existed) fs::remove(p, ec);
}

// A case that raised instead of giving a row.
struct CaseError {
  BenchCase c;
  std::string message;
};

struct RunRecord {
  DeviceInfo device;
  BenchOptions options;
  std::vector<BenchSet> sets;
  std::vector<RoofPoint> roof;
  std::vector<BenchRow> rows;
  std::vector<VerifyResult> verifies;
  std::vector<CaseError> errors;
  std::map<std::string, std::vector<int32_t>> offs;  // "MxK/G" ("MxK/8-even", ...) -> offsets
  std::string started;
};

std::string bool_text(bool b) { return b ? "true" : "false"; }

void write_json(const std::string& path, const RunRecord& run) {
  std::ostringstream os;
  const DeviceInfo& d = run.device;
  os << "{\n  \"schema\": \"mxq-bench/2\",\n";
  os << "  \"date\": " << quote(run.started) << ",\n";
  os << "  \"commit\": " << quote(commit_id()) << ",\n";
  os << "  \"mxq\": " << quote(build_info()) << ",\n";
  os << "  \"gpu\": {\"name\": " << quote(d.name) << ", \"compute_capability\": \"" << d.cc_major
     << "." << d.cc_minor << "\", \"sm_count\": " << d.sm_count << ", \"l2_bytes\": " << d.l2_bytes
     << ", \"memory_bytes\": " << d.memory_bytes << ", \"driver\": " << quote(d.driver_text())
     << ", \"runtime\": " << quote(d.runtime_text()) << ", \"toolkit\": " << quote(d.toolkit_text())
     << "},\n";
  os << "  \"sets\": [";
  for (size_t i = 0; i < run.sets.size(); ++i)
    os << (i ? ", " : "") << quote(set_name(run.sets[i]));
  os << "],\n";
  os << "  \"method\": {\"timing\": \"CUDA graph of `calls` calls over `buffers` rotating buffer "
        "sets (inputs >= 2x L2); per-call time = median over replays of replay time / calls\", "
        "\"replays\": "
     << run.options.replays << ", \"warmup\": " << run.options.warmup
     << ", \"rule\": " << quote(run.options.rule) << ", \"seed\": " << run.options.seed
     << ", \"tile_rows\": " << run.options.tile_rows
     << ", \"dtype\": " << quote(to_string(run.options.dtype))
     << ", \"bytes\": \"tools/traffic.h\", \"roof\": \"cudaMemcpyAsync D2D between events (not a "
        "graph), (read + written) / time, median of "
     << kRoofReplays
     << " copies, max of a pass at the start and one at the end; each row uses the copy "
        "whose traffic is nearest its own\"},\n";
  os << "  \"roof\": [\n";
  for (size_t i = 0; i < run.roof.size(); ++i) {
    const RoofPoint& r = run.roof[i];
    os << "    {\"copy_bytes\": " << r.copy_bytes << ", \"TBps\": " << json_number(r.tbps())
       << ", \"TBps_start\": " << json_number(r.start_tbps)
       << ", \"TBps_end\": " << json_number(r.end_tbps) << "}"
       << (i + 1 < run.roof.size() ? ",\n" : "\n");
  }
  os << "  ],\n  \"rows\": [\n";
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const BenchRow& r = run.rows[i];
    const BenchCase& c = r.c;
    // Weights: M is the rows of W viewed as (G*N, K), so (M, K) keys never collide with x's.
    const int64_t M = c.weight() ? c.experts * c.shape.M : c.shape.M;
    os << "    {\"set\": " << quote(set_name(c.set)) << ", \"op\": " << quote(op_name(c.op))
       << ", \"M\": " << M << ", \"K\": " << c.shape.K
       << ", \"dtype\": " << quote(to_string(c.dtype)) << ", \"groups\": " << c.groups()
       << ", \"groups_kind\": " << quote(kind_name(c.grouping.kind))
       << ", \"align\": " << alignment({M, c.shape.K})
       << ", \"aligned128\": " << bool_text(alignment({M, c.shape.K}) == 128);
    if (c.neighbour) {
      os << ", \"neighbour\": {\"M\": " << c.neighbour->M << ", \"K\": " << c.neighbour->K << "}";
    }
    if (c.weight()) {
      os << ", \"experts\": " << c.experts << ", \"N\": " << c.shape.M
         << ", \"scaling\": " << quote(to_string(c.scaling));
    }
    os << ", \"us\": " << json_number(r.us) << ", \"us_min\": " << json_number(r.us_min)
       << ", \"us_max\": " << json_number(r.us_max) << ", \"bytes_read\": " << r.traffic.read
       << ", \"bytes_written\": " << r.traffic.written << ", \"bytes\": " << r.traffic.total()
       << ", \"TBps\": " << json_number(r.tbps()) << ", \"effective_bytes\": " << r.effective
       << ", \"effective_TBps\": " << json_number(r.effective_tbps())
       << ", \"roof_TBps\": " << json_number(r.roof_tbps)
       << ", \"roof_copy_bytes\": " << r.roof_copy_bytes
       << ", \"pct_roof\": " << json_number(r.pct_roof()) << ", \"buffers\": " << r.buffers
       << ", \"calls_per_graph\": " << r.calls << ", \"kernel_nodes\": " << r.kernel_nodes << "}"
       << (i + 1 < run.rows.size() ? ",\n" : "\n");
  }
  os << "  ],\n  \"verify\": [\n";
  for (size_t i = 0; i < run.verifies.size(); ++i) {
    const VerifyResult& v = run.verifies[i];
    os << "    {\"set\": " << quote(set_name(v.set)) << ", \"check\": " << quote(v.check)
       << ", \"shape\": " << quote(v.shape) << ", \"dtype\": " << quote(to_string(v.dtype))
       << ", \"groups\": " << v.grouping.groups
       << ", \"groups_kind\": " << quote(kind_name(v.grouping.kind));
    if (!v.scaling.empty()) os << ", \"scaling\": " << quote(v.scaling);
    os << ", \"bytes\": " << v.bytes << ", \"mismatches\": " << v.mismatches
       << ", \"fused_status\": " << v.fused_status << ", \"composed_status\": " << v.composed_status
       << ", \"ok\": " << bool_text(v.ok()) << "}" << (i + 1 < run.verifies.size() ? ",\n" : "\n");
  }
  os << "  ],\n  \"errors\": [\n";
  for (size_t i = 0; i < run.errors.size(); ++i) {
    const CaseError& e = run.errors[i];
    os << "    {\"set\": " << quote(set_name(e.c.set)) << ", \"op\": " << quote(op_name(e.c.op))
       << ", \"shape\": " << quote(e.c.shape_text())
       << ", \"dtype\": " << quote(to_string(e.c.dtype)) << ", \"groups\": " << e.c.groups()
       << ", \"groups_kind\": " << quote(kind_name(e.c.grouping.kind))
       << ", \"message\": " << quote(e.message) << "}"
       << (i + 1 < run.errors.size() ? ",\n" : "\n");
  }
  os << "  ],\n  \"offs\": {";
  size_t n = 0;
  for (const auto& [key, offs] : run.offs) {
    os << (n++ ? ",\n    " : "\n    ") << quote(key) << ": [";
    for (size_t g = 0; g < offs.size(); ++g) os << (g ? ", " : "") << offs[g];
    os << "]";
  }
  os << (run.offs.empty() ? "}\n" : "\n  }\n") << "}\n";

  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  f << os.str();
  if (!f) throw ToolError("could not write " + path);
}

// ---- expert weights ----

// Weights have no second path to compare with: set 0's W quantized into set 0's outputs and again
// into set 1's, poisoned differently, must agree byte for byte (every byte written, deterministic).
VerifyResult verify_weight_repeat(const BenchCase& bc, const WeightWorkspace& w, ScaleRounding rule,
                                  cudaStream_t stream) {
  const WeightBufferSet& a = w.sets()[0];
  const WeightBufferSet& b = w.sets()[1];
  VerifyResult v;
  v.set = bc.set;
  v.check = "repeat";
  v.shape = bc.shape_text();
  v.dtype = bc.dtype;
  v.scaling = to_string(bc.scaling);
  poison({&a.q_row, &a.s_row, &a.q_col, &a.s_col}, kPoisonFused, stream);
  poison({&b.q_row, &b.s_row, &b.q_col, &b.s_col}, kPoisonComposed, stream);
  quantize_weight(w.params(a, bc.scaling, rule, stream));
  QuantizeWeightParams again = w.params(b, bc.scaling, rule, stream);
  again.w = a.w.get();
  quantize_weight(again);
  const std::pair<const DeviceBuffer*, const DeviceBuffer*> outputs[] = {
      {&a.q_row, &b.q_row}, {&a.s_row, &b.s_row}, {&a.q_col, &b.q_col}, {&a.s_col, &b.s_col}};
  for (const auto& [x, y] : outputs) {
    v.bytes += int64_t(x->bytes());
    v.mismatches += count_mismatches(x->as(), y->as(), int64_t(x->bytes()), stream);
  }
  return v;
}

BenchRow time_weight_case(const BenchCase& bc, const WeightWorkspace& w, bool new_block,
                          ScaleRounding rule, RunRecord& run, const BenchOptions& o,
                          cudaStream_t stream) {
  if (new_block) {
    if (o.verify) {
      run.verifies.push_back(verify_weight_repeat(bc, w, rule, stream));
      const VerifyResult& v = run.verifies.back();
      std::cout << "   verify weight " << v.scaling << " repeat (" << format_bytes(double(v.bytes))
                << "): " << (v.ok() ? "ok" : "FAILED") << " (" << v.mismatches
                << " mismatching bytes)\n";
    } else {
      quantize_weight(w.params(w.sets()[0], bc.scaling, rule, stream));  // first call off the graph
      MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
    }
  }
  const auto& sets = w.sets();
  return time_case(
      bc, int(sets.size()),
      [&](int s) { quantize_weight(w.params(sets[size_t(s)], bc.scaling, rule, stream)); },
      run.roof, o, stream);
}

void print_device(const DeviceInfo& d) {
  std::cout << "mxq bench on " << d.name << " (sm_" << d.cc_major << d.cc_minor << ", "
            << d.sm_count << " SMs, L2 " << format_bytes(double(d.l2_bytes)) << ", "
            << format_bytes(double(d.memory_bytes)) << "), driver " << d.driver_text()
            << ", runtime " << d.runtime_text() << ", built with CUDA " << d.toolkit_text()
            << ", commit " << commit_id() << "\n"
            << build_info() << "\n";
}

void print_roof(const std::vector<RoofPoint>& roof, const char* when) {
  std::cout << "copy roof (" << when << "): ";
  for (const RoofPoint& r : roof) {
    std::cout << format_bytes(double(r.copy_bytes)) << " "
              << fixed(when[0] == 's' ? r.start_tbps : r.end_tbps, 3) << " TB/s   ";
  }
  std::cout << "\n" << std::flush;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  const std::vector<BenchCase> cases = plan_cases(o);
  check_options(o, cases);
  if (o.list) {
    // The plan only: no GPU needed.
    for (size_t i = 0; i < cases.size(); ++i) {
      std::cout << "[" << std::setw(3) << i + 1 << "/" << cases.size() << "] "
                << case_text(cases[i]) << std::right << std::setw(12)
                << format_bytes(double(cases[i].traffic().total())) << "\n";
    }
    std::cout << cases.size() << " cases\n";
    return kExitOk;
  }
  // A --json path is an option like the others: refused before the GPU check. The default path
  // needs the device's name, so it is checked once the device is known.
  if (!o.json_path.empty() && o.json_path != "-") check_json_writable(o.json_path, "--json");
  const std::string no_gpu = usable_gpu_problem();
  if (!no_gpu.empty()) throw ToolError("no usable GPU: " + no_gpu, kExitUnavailable);
  if (o.replays < 20)
    std::cout << "note: --replays " << o.replays << " is below the minimum of 20 for results\n";

  bench::force_tile_rows(o.tile_rows);
  RunRecord run;
  run.device = query_device();
  run.options = o;
  run.started = now_iso8601();
  std::string json_path = o.json_path;
  if (json_path.empty()) {
    json_path = default_json_path(run.device);
    check_json_writable(json_path, "--json (default)");
  }
  for (BenchSet s : kAllSets) {
    if (std::any_of(cases.begin(), cases.end(), [&](const BenchCase& c) { return c.set == s; }))
      run.sets.push_back(s);
  }
  print_device(run.device);
  const int64_t l2 = run.device.l2_bytes;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i == 0 || workspace_key(cases[i]) != workspace_key(cases[i - 1]))
      check_device_memory(cases[i], block_max_groups(cases, i), l2);
  }
  std::cout << cases.size() << " cases in " << run.sets.size() << " sets:";
  for (BenchSet s : run.sets) std::cout << " " << set_name(s);
  std::cout << "\n";
  Stream stream;
  measure_roof(run.roof, false, stream.get());
  print_roof(run.roof, "start");

  const ScaleRounding rule = parse_scale_rounding(o.rule);
  const bool verify = o.verify && std::any_of(cases.begin(), cases.end(), [](const BenchCase& c) {
                        return c.op == Op::kFused || c.op == Op::kComposed;
                      });
  std::unique_ptr<ShapeWorkspace> ws;
  std::unique_ptr<WeightWorkspace> wws;
  const BenchCase* previous = nullptr;
  bool block_ready = false;  // offsets made, device checks done, outputs primed for this block
  // A case that raises (a library error, a failed capture) is reported and recorded, and the run goes
  // on: one bad case must not cost the others' numbers. The exit status is 1 then.
  for (size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& bc = cases[i];
    if (previous == nullptr || previous->set != bc.set) {
      std::cout << "== " << set_title(bc.set) << "\n";
    }
    const bool new_workspace = previous == nullptr || workspace_key(*previous) != workspace_key(bc);
    const bool new_block = new_workspace || previous->set != bc.set ||
                           previous->grouping != bc.grouping || previous->scaling != bc.scaling;
    if (new_block) block_ready = false;
    previous = &bc;
    try {
      if (new_workspace) {
        ws.reset();  // free the previous buffers first
        wws.reset();
        if (bc.weight()) {
          wws = std::make_unique<WeightWorkspace>(bc.experts, bc.shape.M, bc.shape.K, bc.dtype, l2,
                                                  o.seed, stream.get());
        } else {
          ws = std::make_unique<ShapeWorkspace>(bc.shape, bc.dtype, block_max_groups(cases, i), l2,
                                                o.seed, stream.get());
        }
        std::cout << "-- " << bc.shape_text() << " " << to_string(bc.dtype) << ": "
                  << rotating_sets(bc.elements(), l2) << " rotating buffer sets of "
                  << format_bytes(double(dtype_bytes(bc.dtype)) * double(bc.elements()))
                  << " input\n";
      }
      if (bc.weight() ? !wws : !ws) {
        throw ToolError("no buffers: making them failed (see the first error of this shape)");
      }
      BenchRow row;
      if (bc.weight()) {
        row = time_weight_case(bc, *wws, !block_ready, rule, run, o, stream.get());
        block_ready = true;
      } else {
        const RunContext ctx{ws.get(), bc.grouping, rule, stream.get()};
        if (!block_ready) {
          ws->prepare(bc.grouping, stream.get());
          if (bc.groups() > 0) {
            run.offs[bc.shape.str() + "/" + grouping_key(bc.grouping)] = ws->offs_host(bc.grouping);
            std::cout << "   " << grouping_text(bc.grouping) << ": "
                      << describe_groups(ws->offs_host(bc.grouping), bc.shape.M) << "\n";
          }
          if (verify) {
            run.verifies.push_back(verify_fused_vs_composed(bc, ctx));
            const VerifyResult& v = run.verifies.back();
            std::cout << "   verify fused == composed (" << to_string(bc.dtype) << ", "
                      << grouping_text(bc.grouping) << ", " << format_bytes(double(v.bytes))
                      << "): " << (v.ok() ? "ok" : "FAILED") << " (" << v.mismatches
                      << " mismatching bytes, status " << v.fused_status << "/" << v.composed_status
                      << ")\n";
          }
          prime_outputs(ctx);
          block_ready = true;
        }
        if (bc.op == Op::kCopy && o.verify) {
          run.verifies.push_back(verify_copy(bc, ctx));
          const VerifyResult& v = run.verifies.back();
          std::cout << "   verify copy == x (" << format_bytes(double(v.bytes))
                    << "): " << (v.ok() ? "ok" : "FAILED") << " (" << v.mismatches
                    << " mismatching bytes)\n";
        }
        const auto& sets = ws->sets();
        row = time_case(
            bc, int(sets.size()), [&](int s) { launch_op(bc.op, ctx, sets[size_t(s)]); }, run.roof,
            o, stream.get());
        // The probe and the copy leave other bytes than MXFP8 in the outputs, which dequantize
        // reads: valid ones again for the cases after them.
        if (bc.op == Op::kProbe || bc.op == Op::kCopy) prime_outputs(ctx);
      }
      run.rows.push_back(row);
      std::cout << progress_line(i + 1, cases.size(), run.rows.back()) << "\n" << std::flush;
    } catch (const std::exception& e) {
      run.errors.push_back({bc, e.what()});
      std::cout << "[" << std::setw(3) << i + 1 << "/" << cases.size() << "] " << case_text(bc)
                << "  FAILED: " << e.what() << "\n"
                << std::flush;
      (void)cudaGetLastError();  // clear a non-sticky error so the next case starts clean
    }
  }
  ws.reset();
  wws.reset();

  try {
    measure_roof(run.roof, true, stream.get());
    print_roof(run.roof, "end");
  } catch (const std::exception& e) {
    std::cout << "copy roof (end): FAILED: " << e.what() << " (the start pass is used)\n";
  }
  // Every row against the higher of the two passes (rows were timed before the end pass existed).
  for (BenchRow& r : run.rows) {
    const RoofPoint& p = pick_roof(run.roof, r.traffic.total());
    r.roof_tbps = p.tbps();
    r.roof_copy_bytes = p.copy_bytes;
  }
  for (BenchSet s : run.sets) {
    std::cout << "\n== " << set_title(s) << "\n" << set_table(run.rows, s);
  }
  print_summary(run.rows, l2);

  if (json_path != "-") {
    write_json(json_path, run);
    std::cout << "\nwrote " << json_path << "\n";
  }
  const bool verified = std::all_of(run.verifies.begin(), run.verifies.end(),
                                    [](const VerifyResult& v) { return v.ok(); });
  if (!verified) std::cout << "FAILED: a device check failed (see the verify lines)\n";
  if (!run.errors.empty()) {
    std::cout << "FAILED: " << run.errors.size() << " of " << cases.size()
              << " cases raised an error:\n";
    for (const CaseError& e : run.errors)
      std::cout << "  " << case_text(e.c) << ": " << e.message << "\n";
  }
  return verified && run.errors.empty() ? kExitOk : kExitFailure;
}

}  // namespace mxq::tools
