// `mxq demo`: one random tensor (bf16, fp16 or fp32, with a few special values) through the CPU
// reference and, where a GPU is present, the fused and composed GPU paths; every GPU output compared
// byte for byte with the reference (docs/numerics.md §7), a few values decoded.
#include "demo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "traffic.h"
#if defined(MXQ_WITH_CUDA)
#include "gpu.h"
#endif

namespace mxq::tools {

double QuantizeOutputs::bytes(const MatrixShape& s, int64_t groups) {
  return double(q_row_shape(s.M, s.K).bytes()) + double(s_row_shape(s.M, s.K, groups).bytes()) +
         double(q_col_shape(s.M, s.K).bytes()) + double(s_col_shape(s.M, s.K, groups).bytes());
}

QuantizeOutputs QuantizeOutputs::allocate(const MatrixShape& s, int64_t groups) {
  QuantizeOutputs out;
  out.q_row.resize(static_cast<size_t>(q_row_shape(s.M, s.K).bytes()));
  out.s_row.resize(static_cast<size_t>(s_row_shape(s.M, s.K, groups).bytes()));
  out.q_col.resize(static_cast<size_t>(q_col_shape(s.M, s.K).bytes()));
  out.s_col.resize(static_cast<size_t>(s_col_shape(s.M, s.K, groups).bytes()));
  return out;
}

std::vector<OutputView> views(const QuantizeOutputs& out, const MatrixShape& s, int64_t groups) {
  return {{"q_row", q_row_shape(s.M, s.K), &out.q_row},
          {"s_row", s_row_shape(s.M, s.K, groups), &out.s_row},
          {"q_col", q_col_shape(s.M, s.K), &out.q_col},
          {"s_col", s_col_shape(s.M, s.K, groups), &out.s_col}};
}

namespace {

// ---- byte-exact comparison ----
struct Mismatch {
  int64_t count = 0;
  int64_t first = -1;  // index of the first differing byte
  uint8_t expected = 0;
  uint8_t got = 0;
};

[[maybe_unused]] Mismatch compare_bytes(const std::vector<uint8_t>& expected,
                                        const std::vector<uint8_t>& got) {
  Mismatch m;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == got[i]) continue;
    if (m.count++ == 0) {
      m.first = static_cast<int64_t>(i);
      m.expected = expected[i];
      m.got = got[i];
    }
  }
  return m;
}

std::string hex(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

[[maybe_unused]] std::string describe(const Mismatch& m) {
  if (m.count == 0) return "0";
  std::ostringstream os;
  os << m.count << " (first at byte " << m.first << ": ref " << hex(m.expected) << ", got "
     << hex(m.got) << ")";
  return os.str();
}

// ---- where a scale byte lives (layout.h, docs/numerics.md §5-§6) ----
// Byte offset of S_col[k, i] (scale column i covers rows 32i..32i+31) in s_col, or nothing when
// those rows are in the uncovered tail of grouped mode (their colwise scales are zeroed, not
// placed).
std::optional<int64_t> s_col_offset(int64_t k, int64_t i, const DemoInput& in) {
  if (in.offs.empty()) return blocked_offset(k, i, in.shape.M / kBlock);
  KGroup group{};
  for (int32_t end : in.offs) {
    group = next_kgroup(group, end, in.shape.K);
    if (i >= group.col_begin && i < group.col_begin + group.cols) return group.offset(k, i);
  }
  return std::nullopt;
}

// Byte offset of S_row[m, j] in s_row: dense blocked, or the M-groups layout (each group's rows,
// then the uncovered tail's, blocked on their own from a 128-row boundary).
int64_t s_row_offset(int64_t m, int64_t j, const DemoInput& in) {
  const int64_t cols = in.shape.K / kBlock;
  if (in.offs.empty()) return blocked_offset(m, j, cols);
  MSegment segment{};
  for (size_t h = 0; h <= in.offs.size(); ++h) {  // h = G: the tail
    segment = next_msegment(segment, h < in.offs.size() ? in.offs[h] : in.shape.M);
    if (m >= segment.row_begin && m < segment.row_begin + segment.rows) {
      return segment.offset(m, j, cols);
    }
  }
  throw std::logic_error("row outside every M-groups segment");  // offs ends past M: not made here
}

// ---- the input and the reference ----
DemoInput make_input(const DemoOptions& o) {
  DemoInput in;
  in.shape = o.shape;
  in.rule = parse_scale_rounding(o.rule);
  in.dtype = o.dtype;
  in.x = random_input(o.shape, o.dtype, o.seed);
  in.specials = add_specials(in.x, o.shape, o.dtype, o.seed);
  if (o.groups > 0) in.offs = random_group_offsets(o.shape.M, o.groups, o.seed);
  return in;
}

struct CpuRun {
  QuantizeOutputs out;
  double ms = 0;
};

CpuRun run_reference(const DemoInput& in) {
  CpuRun run;
  run.out = QuantizeOutputs::allocate(in.shape, in.groups());
  int32_t status = 0;
  QuantizeParams p;
  p.x = in.x.data();
  p.dtype = in.dtype;
  p.M = in.shape.M;
  p.K = in.shape.K;
  p.rounding = in.rule;
  p.offs = in.offs.empty() ? nullptr : in.offs.data();
  p.num_groups = in.groups();
  p.q_row = run.out.q_row.data();
  p.s_row = run.out.s_row.data();
  p.q_col = run.out.q_col.data();
  p.s_col = run.out.s_col.data();
  p.status = in.offs.empty() ? nullptr : &status;
  const auto start = std::chrono::steady_clock::now();
  ref::quantize(p);
  run.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return run;
}

// Recomputes `blocks` random blocks of each axis straight from numerics.h (quantize_block_f32 on
// the widened values) and looks their bytes up through layout.h: checks the reference's placement
// independently of its loops. Blocks holding a special value are always among them.
int64_t spot_check(const DemoInput& in, const QuantizeOutputs& out, int blocks, uint64_t seed) {
  const int64_t M = in.shape.M;
  const int64_t K = in.shape.K;
  Rng rng(seed ^ 0x5B07ull);
  int64_t bad = 0;
  float v[kBlock];
  uint8_t q[kBlock];
  // Rowwise block: row m, scale column j (columns 32j..32j+31).
  auto row_block = [&](int64_t m, int64_t j) {
    for (int t = 0; t < kBlock; ++t) v[t] = in.value(m, j * kBlock + t);
    const uint8_t s = quantize_block_f32(v, in.rule, q);
    bad += out.s_row[size_t(s_row_offset(m, j, in))] != s;
    for (int t = 0; t < kBlock; ++t) bad += out.q_row[size_t(m * K + j * kBlock + t)] != q[t];
  };
  // Colwise block: column k, scale column i (rows 32i..32i+31).
  auto col_block = [&](int64_t k, int64_t i) {
    for (int t = 0; t < kBlock; ++t) v[t] = in.value(i * kBlock + t, k);
    const uint8_t s = quantize_block_f32(v, in.rule, q);
    if (const auto at = s_col_offset(k, i, in)) bad += out.s_col[size_t(*at)] != s;
    for (int t = 0; t < kBlock; ++t) bad += out.q_col[size_t(k * M + i * kBlock + t)] != q[t];
  };
  for (const Special& sp : in.specials) {
    row_block(sp.index / K, sp.index % K / kBlock);
    col_block(sp.index % K, sp.index / K / kBlock);
  }
  for (int b = 0; b < blocks; ++b) {
    row_block(rng.uniform(0, M - 1), rng.uniform(0, K / kBlock - 1));
    col_block(rng.uniform(0, K - 1), rng.uniform(0, M / kBlock - 1));
  }
  return bad;
}

// ---- printing ----
std::string scale_text(uint8_t s) {
  if (s == kE8m0Nan) return "NaN";
  return "2^" + std::to_string(int(s) - 127);
}

std::string value_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The elements print_samples shows: corners and a few interior points, clamped into the tensor
// (a 32x32 input has no column 33), then the special values, without repeats (on a small tensor
// several picks coincide).
std::vector<std::pair<int64_t, int64_t>> sample_points(const DemoInput& in) {
  const int64_t M = in.shape.M;
  const int64_t K = in.shape.K;
  std::vector<std::pair<int64_t, int64_t>> wanted = {
      {0, 0}, {1, 33}, {M / 3, K / 2 + 5}, {M / 2 + 7, K - 40}, {M - 1, K - 1}};
  for (const Special& sp : in.specials) wanted.push_back({sp.index / K, sp.index % K});
  std::vector<std::pair<int64_t, int64_t>> points;
  for (const auto& [m, k] : wanted) {
    const std::pair<int64_t, int64_t> p{std::clamp<int64_t>(m, 0, M - 1),
                                        std::clamp<int64_t>(k, 0, K - 1)};
    if (std::find(points.begin(), points.end(), p) == points.end()) points.push_back(p);
  }
  return points;
}

// A few elements decoded on both axes: x, its scale byte as 2^e, its e4m3 byte and the dequantized
// value (what mxq::dequantize returns for it).
void print_samples(const DemoInput& in, const QuantizeOutputs& out) {
  const int64_t M = in.shape.M;
  const int64_t K = in.shape.K;
  Table t({"element", "x", "axis", "scale byte", "scale", "q byte", "e4m3", "dequantized"});
  for (const auto& [m, k] : sample_points(in)) {
    const std::string where = "x[" + std::to_string(m) + ", " + std::to_string(k) + "]";
    const double x = in.value(m, k);
    auto row = [&](const char* axis, std::optional<int64_t> s_at,
                   const std::vector<uint8_t>& scales, uint8_t q) {
      const double e4m3 = e4m3_to_f32(q);
      if (!s_at) {
        t.add({where, value_text(x), axis, "-", "tail: zeroed", hex(q), value_text(e4m3), "-"});
        return;
      }
      const uint8_t s = scales[size_t(*s_at)];
      const double deq = bf16_to_f32(dequantize_element(q, s));
      t.add({where, value_text(x), axis, std::to_string(s), scale_text(s), hex(q), value_text(e4m3),
             value_text(deq)});
    };
    row("row 1x32", s_row_offset(m, k / kBlock, in), out.s_row, out.q_row[size_t(m * K + k)]);
    row("col 32x1", s_col_offset(k, m / kBlock, in), out.s_col, out.q_col[size_t(k * M + m)]);
  }
  std::cout << "\nSample values (dequantized = e4m3 x scale; |x - dequantized| is the quantization "
               "error):\n"
            << t.str();
}

std::string time_text(double ms) {
  return ms >= 1.0 ? fixed(ms, 2) + " ms" : fixed(ms * 1e3, 1) + " us";
}

struct PathTiming {
  std::string path;
  double ms;
  std::string how;
};

void print_timings(const DemoInput& in, const std::vector<PathTiming>& timings) {
  const double bytes = static_cast<double>(
      effective_bytes(Op::kFused, in.shape.M, in.shape.K, in.groups(), in.dtype));
  Table t({"path", "time", "GB/s (fused bytes)", "how"});
  for (const auto& p : timings) {
    t.add({p.path, time_text(p.ms), fixed(bytes / (p.ms * 1e-3) / 1e9, 1), p.how});
  }
  std::cout << "\nTime per call (" << format_bytes(bytes) << " moved by a fused call):\n"
            << t.str();
}

void print_header(const DemoOptions& o, const DemoInput& in) {
  std::cout << "mxq demo: x " << to_string(in.dtype) << " " << in.shape.str() << " ("
            << format_bytes(double(dtype_bytes(in.dtype)) * double(in.shape.elements()))
            << "), rule " << to_string(in.rule) << ", seed " << o.seed << ", "
            << (in.offs.empty() ? std::string("dense") : describe_groups(in.offs, in.shape.M))
            << "\n";
  std::cout << "specials in x (" << to_string(in.dtype) << "):";
  for (size_t i = 0; i < in.specials.size(); ++i) {
    const Special& sp = in.specials[i];
    std::cout << (i ? ", " : " ") << sp.name << " at x[" << sp.index / in.shape.K << ", "
              << sp.index % in.shape.K << "]";
  }
  std::cout << "\n";
  if (!in.offs.empty()) {
    std::cout << "offs = [";
    for (size_t g = 0; g < in.offs.size(); ++g) std::cout << (g ? ", " : "") << in.offs[g];
    std::cout << "]\n";
  }
}

// ---- what runs, decided (and every input checked) before anything is allocated ----

constexpr const char* kPrefix = "mxq demo: ";
// Ends the messages of option values refused after parsing, as the parse-time ones end.
constexpr const char* kSeeHelp = " (see `mxq demo --help`)";
// From about this size the CPU reference takes seconds: each step then reports its time on stderr.
constexpr int64_t kProgressElements = int64_t(1) << 24;

// Why the GPU paths cannot run on this machine, or "" when they can.
std::string gpu_problem() {
#if defined(MXQ_WITH_CUDA)
  return usable_gpu_problem();
#else
  return "this build has no CUDA";
#endif
}

// M and K against the one rule of every path (CPU reference and GPU alike), in the library's words
// after the option ("--shape: M must be a multiple of 32, got 100"). Zero is legal for the library
// (empty outputs) but leaves the demo nothing to show.
void check_dims(const MatrixShape& s) {
  for (const auto& [name, value] : {std::pair{"M", s.M}, std::pair{"K", s.K}}) {
    if (value == 0) {
      throw ToolError("--shape: " + std::string(name) + " must be at least " +
                      std::to_string(kDimAlign) +
                      " (an empty tensor leaves the demo nothing to show), got 0" + kSeeHelp);
    }
    if (value % kDimAlign != 0) {
      throw ToolError("--shape: " + std::string(name) + " must be a multiple of " +
                      std::to_string(kDimAlign) + ", got " + std::to_string(value) + kSeeHelp);
    }
  }
}

// Group sizes are whole multiples of kGroupAlign rows, so M holds at most M / kGroupAlign non-empty
// groups. More groups than that would be mostly empty: legal for the library, but almost certainly
// not what was meant, so the demo refuses and says how many fit.
void check_groups(const DemoOptions& o) {
  if (o.groups == 0) return;
  const int64_t M = o.shape.M;
  const int64_t fit = M / kGroupAlign;
  const std::string rule = "group sizes are multiples of " + std::to_string(kGroupAlign) +
                           " rows, so M=" + std::to_string(M) + " holds ";
  if (fit == 0) {
    throw ToolError("--groups needs M of at least " + std::to_string(kGroupAlign) + ": " + rule +
                    "no group" + kSeeHelp);
  }
  if (o.groups > fit) {
    throw ToolError("--groups " + std::to_string(o.groups) +
                    " is too many for M=" + std::to_string(M) + ": " + rule + "at most " +
                    std::to_string(fit) + "; pass --groups " + std::to_string(fit) +
                    " or fewer, or a larger M" + kSeeHelp);
  }
}

// The host memory the run needs, against what the machine has free: a shape that cannot fit is
// refused with the numbers instead of failing inside an allocation.
void check_host_memory(const DemoOptions& o, bool use_gpu) {
  const double input = double(dtype_bytes(o.dtype)) * double(o.shape.elements());
  const double outputs = QuantizeOutputs::bytes(o.shape, o.groups);
  // The reference's outputs, plus one GPU path's copy while it is compared.
  const double needed = input + outputs * (use_gpu ? 2 : 1);
  const int64_t available = available_host_bytes();
  if (available <= 0 || needed <= double(available)) return;
  throw ToolError(o.shape.str() + " needs about " + format_bytes(needed) +
                  " of host memory (input " + format_bytes(input) + ", outputs " +
                  format_bytes(outputs) +
                  (use_gpu ? " twice: the reference's and a GPU copy" : "") + "), but only " +
                  format_bytes(double(available)) + " is available; use a smaller shape");
}

#if defined(MXQ_WITH_CUDA)
void check_gpu_memory(const DemoOptions& o) {
  const double needed = gpu_bytes_needed(o.shape, o.groups, o.dtype);
  const double free = gpu_bytes_free();
  if (needed <= free) return;
  throw ToolError(o.shape.str() + " needs about " + format_bytes(needed) +
                  " of GPU memory (input, outputs and the composed workspace), but only " +
                  format_bytes(free) + " is free on the GPU; use a smaller shape, or --cpu");
}
#endif

struct DemoPlan {
  bool use_gpu = false;
  std::string note;  // which paths run and why, printed under the header
};

DemoPlan plan_demo(const DemoOptions& o) {
  DemoPlan plan;
  // One shape rule for every path: a shape is refused (or taken) the same with or without a GPU.
  check_dims(o.shape);
  const std::string no_gpu = o.cpu_only ? "" : gpu_problem();
  plan.use_gpu = !o.cpu_only && no_gpu.empty();
  if (o.cpu_only) {
    plan.note = "--cpu: running the CPU reference only";
  } else if (!plan.use_gpu) {
    plan.note = "no usable GPU (" + no_gpu +
                "): running the CPU reference only, the GPU paths are not checked";
  }
  check_groups(o);
  check_host_memory(o, plan.use_gpu);
#if defined(MXQ_WITH_CUDA)
  if (plan.use_gpu) check_gpu_memory(o);
#endif
  return plan;
}

// Runs `step` and, for large inputs, reports it on stderr: "mxq demo: reference ... 3.1 s".
template <typename Step>
auto timed_step(bool progress, const std::string& what, Step&& step) {
  Phase phase(progress, kPrefix, what);
  auto result = step();
  phase.done();
  return result;
}

// ---- the comparison table ----

struct Report {
  std::vector<std::string> header{"output", "shape", "bytes"};
  std::vector<std::vector<std::string>> rows;  // one per output
  std::vector<PathTiming> timings;
  bool ok = true;
};

#if defined(MXQ_WITH_CUDA)
// One GPU path: run it, compare its four outputs byte for byte with the reference's.
void check_gpu_path(GpuPath path, const DemoInput& in, const QuantizeOutputs& want, int repeats,
                    bool progress, Report& report) {
  const GpuRun run = timed_step(progress, std::string("GPU ") + path_name(path),
                                [&] { return run_gpu(in, path, repeats); });
  report.header.push_back(std::string(path_name(path)) + " vs reference: mismatches");
  const auto got = views(run.out, in.shape, in.groups());
  const auto expected = views(want, in.shape, in.groups());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Mismatch mm = compare_bytes(*expected[i].bytes, *got[i].bytes);
    report.ok &= mm.count == 0;
    report.rows[i].push_back(describe(mm));
  }
  if (run.status != 0) {
    report.ok = false;
    std::cout << path_name(path) << ": status word " << describe_status(run.status) << "\n";
  }
  report.timings.push_back({std::string("GPU ") + path_name(path), median(run.times_ms),
                            "cudaEvent, median of " + std::to_string(run.times_ms.size())});
}
#endif

}  // namespace

int run_demo(const DemoOptions& o) {
  const DemoPlan plan = plan_demo(o);
  const bool progress = o.shape.elements() >= kProgressElements;
  const DemoInput in =
      timed_step(progress, "random input " + o.shape.str(), [&] { return make_input(o); });
  print_header(o, in);
  if (!plan.note.empty()) std::cout << plan.note << "\n";

  const CpuRun cpu = timed_step(progress, "CPU reference", [&] { return run_reference(in); });
  const int64_t spot_bad = spot_check(in, cpu.out, 256, o.seed);
  Report report;
  report.timings.push_back({"CPU reference", cpu.ms, "wall clock, 1 run"});
  report.ok = spot_bad == 0;
  for (const auto& v : views(cpu.out, in.shape, in.groups())) {
    report.rows.push_back({v.name,
                           std::to_string(v.shape.rows) + " x " + std::to_string(v.shape.cols),
                           format_bytes(double(v.shape.bytes()))});
  }
#if defined(MXQ_WITH_CUDA)
  if (plan.use_gpu) {
    for (GpuPath path : {GpuPath::kFused, GpuPath::kComposed}) {
      check_gpu_path(path, in, cpu.out, o.repeats, progress, report);
    }
  }
#endif
  Table outputs(report.header);
  for (auto& row : report.rows) outputs.add(row);
  std::cout << "\nOutputs"
            << (plan.use_gpu ? " (GPU outputs poisoned with 0xA5 before the checked run)" : "")
            << ":\n"
            << outputs.str();
  std::cout
      << "Spot check of the reference (256 random blocks per axis recomputed from numerics.h): "
      << (spot_bad == 0 ? "ok" : std::to_string(spot_bad) + " mismatching bytes") << "\n";
  print_samples(in, cpu.out);
  print_timings(in, report.timings);
  if (!report.ok) {
    std::cout << "\nFAILED: byte mismatches (see above)\n";
  } else if (plan.use_gpu) {
    std::cout << "\nOK: fused and composed GPU outputs byte-exact with the CPU reference\n";
  } else {
    std::cout << "\nOK: CPU reference spot check passed (no GPU outputs to compare)\n";
  }
  return report.ok ? kExitOk : kExitFailure;
}

}  // namespace mxq::tools
