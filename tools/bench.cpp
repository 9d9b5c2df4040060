// `mxq bench` (built only with CUDA). How a number is made (SPEC §10, STYLE "Benchmarks"):
//   - each op is captured into a CUDA graph of `calls` back-to-back calls that rotate over
//     `buffers` sets of input and output buffers; the inputs of all sets total >= 2x L2 (counted
//     at 1 byte per element, the smallest input of any op, so bf16 x and e4m3 q both rotate
//     through at least twice the L2);
//   - the graph must hold at least one kernel node per call (three for composed), or the run
//     aborts: a kernel that ignores the caller's stream captures nothing and would read as a win;
//   - ops: rowwise and colwise are mxq::quantize with one axis requested (colwise writes the
//     blocked or K-groups s_col itself), fused is mxq::quantize with both, composed is
//     mxq::quantize_composed, dequantize reads what composed wrote;
//   - per-call time = median over `replays` timed graph replays (after `warmup`) of replay time
//     divided by calls;
//   - bytes come from traffic.h; the roof is cudaMemcpyAsync device-to-device, bytes read +
//     written, measured at 256 MiB, 1 GiB and 4 GiB at the start and at the end of the run (the
//     higher of the two is used); each row is compared with the copy whose traffic is nearest its
//     own;
//   - before timing a (shape, groups) pair, fused and composed outputs are compared byte for byte
//     on the device (outputs poisoned with different patterns, so a byte neither path writes is
//     caught too).
#include "bench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// ---- device buffers of one shape ----

// Bytes of the largest s_col of the run: dense, or the K-groups allocation of the most groups.
int64_t s_col_capacity(const MatrixShape& s, int max_groups) {
  return std::max(s_col_shape(s.M, s.K, 0).bytes(), s_col_shape(s.M, s.K, max_groups).bytes());
}

// Input and outputs of one rotation slot; s_col is sized for the largest group count of the run.
// Each slot has its own composed workspace: the plain scales are traffic too and rotate with the
// rest.
struct BufferSet {
  DeviceBuffer x, q_row, s_row, q_col, s_col, workspace, out;
  BufferSet(const MatrixShape& s, int max_groups)
      : x(size_t(2 * s.elements())),
        q_row(size_t(q_row_shape(s.M, s.K).bytes())),
        s_row(size_t(s_row_shape(s.M, s.K).bytes())),
        q_col(size_t(q_col_shape(s.M, s.K).bytes())),
        s_col(size_t(s_col_capacity(s, max_groups))),
        workspace(size_t(composed_workspace_bytes(s.M, s.K))),
        out(size_t(2 * s.elements())) {}

  // What the constructor allocates, without allocating: x and out are bf16, 2 bytes an element.
  static double bytes(const MatrixShape& s, int max_groups) {
    return 2.0 * 2.0 * double(s.elements()) + double(q_row_shape(s.M, s.K).bytes()) +
           double(s_row_shape(s.M, s.K).bytes()) + double(q_col_shape(s.M, s.K).bytes()) +
           double(s_col_capacity(s, max_groups)) + double(composed_workspace_bytes(s.M, s.K));
  }
};

// Rotating sets for one shape: enough that their inputs total >= 2x L2 (at 1 byte per element).
int64_t rotating_sets(const MatrixShape& s, int64_t l2_bytes) {
  return std::max<int64_t>(2, ceil_div(2 * l2_bytes, s.elements()));
}

// Refuses a shape whose buffers cannot fit in the GPU's free memory, before allocating any.
void check_device_memory(const MatrixShape& s, int max_groups, int64_t l2_bytes) {
  size_t free = 0;
  size_t total = 0;
  MXQ_TOOL_CUDA(cudaMemGetInfo(&free, &total));
  const int64_t sets = rotating_sets(s, l2_bytes);
  const double needed = double(sets) * BufferSet::bytes(s, max_groups);
  if (needed <= double(free)) return;
  throw ToolError(s.str() + " needs about " + format_bytes(needed) + " of GPU memory (" +
                  std::to_string(sets) + " rotating buffer sets), but only " +
                  format_bytes(double(free)) + " is free; leave this shape out of --shapes");
}

class ShapeWorkspace {
 public:
  ShapeWorkspace(const MatrixShape& shape, const std::vector<int>& groups, int64_t l2_bytes,
                 uint64_t seed, cudaStream_t stream)
      : shape_(shape), status_(sizeof(int32_t)) {
    const int max_groups = groups.empty() ? 0 : *std::max_element(groups.begin(), groups.end());
    const int64_t sets = rotating_sets(shape, l2_bytes);
    sets_.reserve(size_t(sets));
    for (int64_t i = 0; i < sets; ++i) {
      sets_.emplace_back(shape, max_groups);
      fill_random_bf16(sets_.back().x.as<uint16_t>(), shape.elements(), shape.K, seed + uint64_t(i),
                       stream);
    }
    for (int g : groups) {
      offs_host_[g] = random_group_offsets(shape.M, g, seed + uint64_t(g));
      DeviceBuffer& d = offs_[g] = DeviceBuffer(size_t(g) * sizeof(int32_t));
      MXQ_TOOL_CUDA(cudaMemcpyAsync(d.get(), offs_host_[g].data(), d.bytes(),
                                    cudaMemcpyHostToDevice, stream));
    }
    MXQ_TOOL_CUDA(cudaStreamSynchronize(stream));
  }

  const MatrixShape& shape() const { return shape_; }
  const std::vector<BufferSet>& sets() const { return sets_; }
  const int32_t* offs(int groups) const {
    return groups == 0 ? nullptr : offs_.at(groups).as<int32_t>();
  }
  const std::vector<int32_t>& offs_host(int groups) const { return offs_host_.at(groups); }
  int32_t* status(int groups) const { return groups == 0 ? nullptr : status_.as<int32_t>(); }

 private:
  MatrixShape shape_;
  std::vector<BufferSet> sets_;
  std::map<int, DeviceBuffer> offs_;
  std::map<int, std::vector<int32_t>> offs_host_;
  DeviceBuffer status_;
};

// ---- one call of each op ----

struct RunContext {
  const ShapeWorkspace* ws;
  int groups;
  ScaleRounding rule;
  cudaStream_t stream;
};

// The params of one call reading set `in`'s x and writing set `out`'s outputs; `rowwise` and
// `colwise` pick the axes (a null data/scale pair skips that axis).
QuantizeParams quantize_params(const RunContext& c, const BufferSet& in, const BufferSet& out,
                               bool rowwise, bool colwise) {
  QuantizeParams p;
  p.x = in.x.get();
  p.M = c.ws->shape().M;
  p.K = c.ws->shape().K;
  p.rounding = c.rule;
  p.offs = c.ws->offs(c.groups);
  p.num_groups = c.groups;
  if (rowwise) {
    p.q_row = out.q_row.as();
    p.s_row = out.s_row.as();
  }
  if (colwise) {
    p.q_col = out.q_col.as();
    p.s_col = out.s_col.as();
  }
  p.status = c.ws->status(c.groups);
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
    case Op::kDequantize:
      // Dense: the forward operand (q_row, s_row). Grouped: the wgrad operand (q_col, K-groups
      // s_col).
      if (c.groups == 0)
        return dequantize(
            {b.q_row.as(), b.s_row.as(), M, K, nullptr, 0, b.out.get(), nullptr, c.stream});
      return dequantize({b.q_col.as(), b.s_col.as(), K, M, c.ws->offs(c.groups), c.groups,
                         b.out.get(), c.ws->status(c.groups), c.stream});
  }
}

int min_kernels_per_call(Op op) { return op == Op::kComposed ? 3 : 1; }

// ---- fused == composed on the device ----

struct VerifyResult {
  MatrixShape shape;
  int groups = 0;
  int64_t bytes = 0;  // bytes compared
  int64_t mismatches = 0;
  int32_t fused_status = 0;
  int32_t composed_status = 0;
  bool ok() const { return mismatches == 0 && fused_status == 0 && composed_status == 0; }
};

int32_t read_status(const RunContext& c) {
  if (c.groups == 0) return 0;
  int32_t status = 0;
  MXQ_TOOL_CUDA(cudaMemcpyAsync(&status, c.ws->status(c.groups), sizeof status,
                                cudaMemcpyDeviceToHost, c.stream));
  MXQ_TOOL_CUDA(cudaStreamSynchronize(c.stream));
  return status;
}

void reset_status(const RunContext& c) {
  if (c.groups != 0)
    MXQ_TOOL_CUDA(cudaMemsetAsync(c.ws->status(c.groups), 0xFF, sizeof(int32_t), c.stream));
}

void poison_outputs(const BufferSet& b, uint8_t pattern, cudaStream_t stream) {
  for (const DeviceBuffer* d : {&b.q_row, &b.s_row, &b.q_col, &b.s_col}) {
    MXQ_TOOL_CUDA(cudaMemsetAsync(d->get(), pattern, d->bytes(), stream));
  }
}

// Fused writes into set 0's outputs, composed (same input: set 0's x) into set 1's.
VerifyResult verify_fused_vs_composed(const RunContext& c) {
  const BufferSet& a = c.ws->sets()[0];
  const BufferSet& b = c.ws->sets()[1];
  const MatrixShape& s = c.ws->shape();
  VerifyResult v{s, c.groups};
  poison_outputs(a, kPoisonFused, c.stream);
  poison_outputs(b, kPoisonComposed, c.stream);
  reset_status(c);
  quantize(quantize_params(c, a, a, true, true));
  v.fused_status = read_status(c);
  reset_status(c);
  quantize_composed(quantize_params(c, a, b, true, true), b.workspace.get());
  v.composed_status = read_status(c);
  const std::pair<const DeviceBuffer*, const DeviceBuffer*> outputs[] = {
      {&a.q_row, &b.q_row}, {&a.s_row, &b.s_row}, {&a.q_col, &b.q_col}, {&a.s_col, &b.s_col}};
  const int64_t sizes[] = {q_row_shape(s.M, s.K).bytes(), s_row_shape(s.M, s.K).bytes(),
                           q_col_shape(s.M, s.K).bytes(), s_col_shape(s.M, s.K, c.groups).bytes()};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    v.bytes += sizes[i];
    v.mismatches +=
        count_mismatches(outputs[i].first->as(), outputs[i].second->as(), sizes[i], c.stream);
  }
  return v;
}

// Composed on every set: valid q and scales everywhere, so dequantize reads real data.
void prime_outputs(const RunContext& c) {
  for (const BufferSet& b : c.ws->sets())
    quantize_composed(quantize_params(c, b, b, true, true), b.workspace.get());
  MXQ_TOOL_CUDA(cudaStreamSynchronize(c.stream));
}

// ---- one timed case ----

struct BenchCase {
  Op op = Op::kFused;
  MatrixShape shape;
  int groups = 0;  // 0: dense
};

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

BenchRow time_case(const BenchCase& bc, const RunContext& c, const std::vector<RoofPoint>& roof,
                   const BenchOptions& o) {
  BenchRow row;
  row.c = bc;
  row.traffic = op_traffic(bc.op, bc.shape.M, bc.shape.K, bc.groups);
  row.effective = effective_bytes(bc.op, bc.shape.M, bc.shape.K, bc.groups);
  const auto& sets = c.ws->sets();
  row.buffers = int(sets.size());
  row.calls = calls_per_graph(row.traffic.total(), row.buffers);

  const Graph graph = Graph::capture(c.stream, [&] {
    for (int i = 0; i < row.calls; ++i) launch_op(bc.op, c, sets[size_t(i) % sets.size()]);
  });
  row.kernel_nodes = graph.count_nodes(cudaGraphNodeTypeKernel);
  const int expected = row.calls * min_kernels_per_call(bc.op);
  if (row.kernel_nodes < expected) {
    std::ostringstream os;
    os << "the CUDA graph of " << op_name(bc.op) << " " << bc.shape.str() << " G=" << bc.groups
       << " holds " << row.kernel_nodes << " kernel nodes, expected at least " << expected << " ("
       << row.calls
       << " calls): the op does not launch on the caller's stream; its timing would be meaningless";
    throw std::runtime_error(os.str());
  }
  std::vector<double> per_call = replay_ms(graph, o.warmup, o.replays, c.stream);
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

std::vector<BenchCase> plan_cases(const BenchOptions& o) {
  std::vector<MatrixShape> shapes = o.shapes;
  if (shapes.empty()) shapes = o.quick ? quick_bench_shapes() : default_bench_shapes();
  std::vector<Op> ops = o.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  std::vector<int> groupings;
  if (!o.no_dense) groupings.push_back(0);
  groupings.insert(groupings.end(), o.groups.begin(), o.groups.end());
  std::vector<BenchCase> cases;
  for (const MatrixShape& s : shapes) {
    for (int g : groupings) {
      for (Op op : ops) {
        if (g == 0 || op_supports_groups(op)) cases.push_back({op, s, g});
      }
    }
  }
  return cases;
}

// Every option checked before the GPU is touched, in the library's words where it has the rule.
void check_options(const BenchOptions& o, const std::vector<BenchCase>& cases) {
  if (o.replays < 1)
    throw ToolError("--replays must be at least 1, got " + std::to_string(o.replays));
  if (o.warmup < 0) throw ToolError("--warmup must be at least 0, got " + std::to_string(o.warmup));
  for (int g : o.groups) {
    if (g < 1 || g > kMaxGroups) {
      throw ToolError("--groups: each count must be in [1, " + std::to_string(kMaxGroups) +
                      "], got " + std::to_string(g));
    }
  }
  for (const BenchCase& c : cases) {
    for (const auto& [name, value] : {std::pair{"M", c.shape.M}, std::pair{"K", c.shape.K}}) {
      if (value == 0 || value % kGpuAlign != 0) {
        throw ToolError("--shapes " + c.shape.str() + ": " + name + " must be a " +
                        (value == 0 ? "positive " : "") + "multiple of " +
                        std::to_string(kGpuAlign) + " on the GPU, got " + std::to_string(value));
      }
    }
  }
  if (cases.empty()) throw ToolError("nothing to run: no shape/op/groups combination selected");
}

// ---- reporting ----

std::string groups_text(int g) { return g == 0 ? "dense" : "G=" + std::to_string(g); }

std::string progress_line(size_t index, size_t total, const BenchRow& r) {
  std::ostringstream os;
  os << "[" << std::setw(3) << index << "/" << total << "] " << std::left << std::setw(11)
     << op_name(r.c.op) << std::setw(13) << r.c.shape.str() << std::setw(6)
     << groups_text(r.c.groups) << std::right << std::setw(10) << fixed(r.us, 1) << " us "
     << std::setw(7) << fixed(r.tbps(), 3) << " TB/s " << std::setw(6) << fixed(r.pct_roof(), 1)
     << "% of roof  (" << r.buffers << " buffers, " << r.calls << " calls/graph, " << r.kernel_nodes
     << " kernel nodes)";
  return os.str();
}

std::string results_table(const std::vector<BenchRow>& rows) {
  Table t({"op", "shape", "groups", "us", "moved", "TB/s", "% roof", "eff. TB/s"});
  for (const BenchRow& r : rows) {
    t.add({op_name(r.c.op), r.c.shape.str(), groups_text(r.c.groups), fixed(r.us, 1),
           format_bytes(double(r.traffic.total())), fixed(r.tbps(), 3), fixed(r.pct_roof(), 1),
           op_is_dual(r.c.op) ? fixed(r.effective_tbps(), 3) : ""});
  }
  return t.str();
}

struct DualSummary {
  MatrixShape shape;
  int groups;
  const BenchRow* fused;
  const BenchRow* composed;
};

std::vector<DualSummary> pair_dual_rows(const std::vector<BenchRow>& rows) {
  std::vector<DualSummary> out;
  for (const BenchRow& f : rows) {
    if (f.c.op != Op::kFused) continue;
    DualSummary s{f.c.shape, f.c.groups, &f, nullptr};
    for (const BenchRow& r : rows) {
      if (r.c.op == Op::kComposed && r.c.shape.M == f.c.shape.M && r.c.shape.K == f.c.shape.K &&
          r.c.groups == f.c.groups) {
        s.composed = &r;
      }
    }
    out.push_back(s);
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
  Table t({"shape", "groups", "fused us", "composed us", "speedup", "fused eff. TB/s",
           "fused % roof", "composed eff. TB/s"});
  std::vector<double> pct;
  for (const DualSummary& s : pairs) {
    const BenchRow& f = *s.fused;
    if (is_bandwidth_shape(s.shape, l2_bytes)) pct.push_back(f.pct_roof());
    t.add({s.shape.str(), groups_text(s.groups), fixed(f.us, 1),
           s.composed ? fixed(s.composed->us, 1) : "-",
           s.composed ? fixed(s.composed->us / f.us, 2) + "x" : "-", fixed(f.effective_tbps(), 3),
           fixed(f.pct_roof(), 1), s.composed ? fixed(s.composed->effective_tbps(), 3) : "-"});
  }
  std::cout << "\nFused vs composed (effective TB/s = fused bytes / time, ~4.06 B/elem, comparable "
               "with the "
               "peers in shared/anchors):\n"
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

struct RunRecord {
  DeviceInfo device;
  BenchOptions options;
  std::vector<RoofPoint> roof;
  std::vector<BenchRow> rows;
  std::vector<VerifyResult> verifies;
  std::map<std::string, std::vector<int32_t>> offs;  // "MxK/G" -> offsets used
  std::string started;
};

void write_json(const std::string& path, const RunRecord& run) {
  std::ostringstream os;
  const DeviceInfo& d = run.device;
  os << "{\n  \"schema\": \"mxq-bench/1\",\n";
  os << "  \"date\": " << quote(run.started) << ",\n";
  os << "  \"commit\": " << quote(commit_id()) << ",\n";
  os << "  \"mxq\": " << quote(build_info()) << ",\n";
  os << "  \"gpu\": {\"name\": " << quote(d.name) << ", \"compute_capability\": \"" << d.cc_major
     << "." << d.cc_minor << "\", \"sm_count\": " << d.sm_count << ", \"l2_bytes\": " << d.l2_bytes
     << ", \"memory_bytes\": " << d.memory_bytes << ", \"driver\": " << quote(d.driver_text())
     << ", \"runtime\": " << quote(d.runtime_text()) << ", \"toolkit\": " << quote(d.toolkit_text())
     << "},\n";
  os << "  \"method\": {\"timing\": \"CUDA graph of `calls` calls over `buffers` rotating buffer "
        "sets (inputs >= 2x "
        "L2); per-call time = median over replays of replay time / calls\", \"replays\": "
     << run.options.replays << ", \"warmup\": " << run.options.warmup
     << ", \"rule\": " << quote(run.options.rule) << ", \"seed\": " << run.options.seed
     << ", \"bytes\": \"tools/traffic.h\", \"roof\": \"cudaMemcpyAsync D2D between events (not a "
        "graph), (read + written) / "
        "time, median of "
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
    os << "    {\"op\": " << quote(op_name(r.c.op)) << ", \"M\": " << r.c.shape.M
       << ", \"K\": " << r.c.shape.K << ", \"groups\": " << r.c.groups
       << ", \"us\": " << json_number(r.us) << ", \"us_min\": " << json_number(r.us_min)
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
    os << "    {\"M\": " << v.shape.M << ", \"K\": " << v.shape.K << ", \"groups\": " << v.groups
       << ", \"bytes\": " << v.bytes << ", \"mismatches\": " << v.mismatches
       << ", \"fused_status\": " << v.fused_status << ", \"composed_status\": " << v.composed_status
       << ", \"ok\": " << (v.ok() ? "true" : "false") << "}"
       << (i + 1 < run.verifies.size() ? ",\n" : "\n");
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
  const std::string no_gpu = usable_gpu_problem();
  if (!no_gpu.empty()) throw ToolError("no usable GPU: " + no_gpu, kExitUnavailable);
  if (o.replays < 20)
    std::cout << "note: --replays " << o.replays << " is below the SPEC §10 minimum of 20\n";

  RunRecord run;
  run.device = query_device();
  run.options = o;
  run.started = now_iso8601();
  print_device(run.device);
  const int max_groups = o.groups.empty() ? 0 : *std::max_element(o.groups.begin(), o.groups.end());
  for (const BenchCase& bc : cases) check_device_memory(bc.shape, max_groups, run.device.l2_bytes);
  Stream stream;
  measure_roof(run.roof, false, stream.get());
  print_roof(run.roof, "start");

  const ScaleRounding rule = parse_scale_rounding(o.rule);
  const bool verify = o.verify && std::any_of(cases.begin(), cases.end(),
                                              [](const BenchCase& c) { return op_is_dual(c.op); });
  std::unique_ptr<ShapeWorkspace> ws;
  int current_groups = -1;
  for (size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& bc = cases[i];
    if (!ws || ws->shape().M != bc.shape.M || ws->shape().K != bc.shape.K) {
      ws.reset();  // free the previous shape first
      ws = std::make_unique<ShapeWorkspace>(bc.shape, o.groups, run.device.l2_bytes, o.seed,
                                            stream.get());
      current_groups = -1;
      std::cout << "-- " << bc.shape.str() << ": " << ws->sets().size()
                << " rotating buffer sets of " << format_bytes(2.0 * double(bc.shape.elements()))
                << " input\n";
    }
    const RunContext ctx{ws.get(), bc.groups, rule, stream.get()};
    if (bc.groups != current_groups) {
      current_groups = bc.groups;
      if (bc.groups > 0) {
        run.offs[bc.shape.str() + "/" + std::to_string(bc.groups)] = ws->offs_host(bc.groups);
        std::cout << "   " << describe_groups(ws->offs_host(bc.groups), bc.shape.M) << "\n";
      }
      if (verify) {
        run.verifies.push_back(verify_fused_vs_composed(ctx));
        const VerifyResult& v = run.verifies.back();
        std::cout << "   verify fused == composed (" << groups_text(bc.groups) << ", "
                  << format_bytes(double(v.bytes)) << "): " << (v.ok() ? "ok" : "FAILED") << " ("
                  << v.mismatches << " mismatching bytes, status " << v.fused_status << "/"
                  << v.composed_status << ")\n";
      }
      prime_outputs(ctx);
    }
    run.rows.push_back(time_case(bc, ctx, run.roof, o));
    std::cout << progress_line(i + 1, cases.size(), run.rows.back()) << "\n" << std::flush;
  }
  ws.reset();

  measure_roof(run.roof, true, stream.get());
  print_roof(run.roof, "end");
  std::cout << "\n" << results_table(run.rows);
  print_summary(run.rows, run.device.l2_bytes);

  if (o.json_path != "-") {
    const std::string path = o.json_path.empty() ? default_json_path(run.device) : o.json_path;
    write_json(path, run);
    std::cout << "\nwrote " << path << "\n";
  }
  const bool ok = std::all_of(run.verifies.begin(), run.verifies.end(),
                              [](const VerifyResult& v) { return v.ok(); });
  if (!ok) std::cout << "FAILED: fused and composed outputs differ (see the verify lines)\n";
  return ok ? kExitOk : kExitFailure;
}

}  // namespace mxq::tools
