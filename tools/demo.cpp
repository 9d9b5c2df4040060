// `mxq demo`: one random tensor through the CPU reference and, where a GPU is present, the fused
// and composed GPU paths; every GPU output compared byte for byte with the reference (SPEC §8), a
// few values decoded.
#include "demo.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "traffic.h"

namespace mxq::tools {

DualOutputs DualOutputs::allocate(const MatrixShape& s, int64_t groups) {
  DualOutputs out;
  out.q_row.resize(static_cast<size_t>(q_row_shape(s.M, s.K).bytes()));
  out.s_row.resize(static_cast<size_t>(s_row_shape(s.M, s.K).bytes()));
  out.q_col.resize(static_cast<size_t>(q_col_shape(s.M, s.K).bytes()));
  out.s_col.resize(static_cast<size_t>(s_col_shape(s.M, s.K, groups).bytes()));
  return out;
}

std::vector<OutputView> views(const DualOutputs& out, const MatrixShape& s, int64_t groups) {
  return {{"q_row", q_row_shape(s.M, s.K), &out.q_row},
          {"s_row", s_row_shape(s.M, s.K), &out.s_row},
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

// ---- where a colwise scale byte lives ----
// Byte offset of S_col[k, i] (scale column i covers rows 32i..32i+31) in s_col, or nothing when
// those rows are in the uncovered tail of grouped mode (their colwise scales are zeroed, not
// placed; SPEC §6).
std::optional<int64_t> s_col_offset(int64_t k, int64_t i, const DualInput& in) {
  if (in.offs.empty()) return blocked_offset(k, i, in.shape.M / kBlock);
  KGroup group{};
  for (int32_t end : in.offs) {
    group = next_kgroup(group, end, in.shape.K);
    if (i >= group.col_begin && i < group.col_begin + group.cols) return group.offset(k, i);
  }
  return std::nullopt;
}

int64_t s_row_offset(int64_t m, int64_t j, const DualInput& in) {
  return blocked_offset(m, j, in.shape.K / kBlock);
}

// ---- the input and the reference ----
DualInput make_input(const DemoOptions& o) {
  DualInput in;
  in.shape = o.shape;
  in.rule = parse_scale_rounding(o.rule);
  in.x = random_bf16(o.shape, o.seed);
  if (o.groups > 0) in.offs = random_group_offsets(o.shape.M, o.groups, o.seed);
  return in;
}

struct CpuRun {
  DualOutputs out;
  double ms = 0;
};

CpuRun run_reference(const DualInput& in) {
  CpuRun run;
  run.out = DualOutputs::allocate(in.shape, in.groups());
  int32_t status = 0;
  DualParams p;
  p.x = in.x.data();
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
  ref::quantize_dual(p);
  run.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return run;
}

// Recomputes `blocks` random blocks of each axis straight from numerics.h (quantize_block) and
// looks their bytes up through layout.h: checks the reference's placement independently of its
// loops.
int64_t spot_check(const DualInput& in, const DualOutputs& out, int blocks, uint64_t seed) {
  const int64_t M = in.shape.M;
  const int64_t K = in.shape.K;
  Rng rng(seed ^ 0x5B07ull);
  int64_t bad = 0;
  uint8_t q[kBlock];
  for (int b = 0; b < blocks; ++b) {
    // Rowwise block: row m, scale column j.
    const int64_t m = rng.uniform(0, M - 1);
    const int64_t j = rng.uniform(0, K / kBlock - 1);
    const uint8_t s_row = quantize_block(&in.x[size_t(m * K + j * kBlock)], 1, in.rule, q);
    bad += out.s_row[size_t(s_row_offset(m, j, in))] != s_row;
    for (int t = 0; t < kBlock; ++t) bad += out.q_row[size_t(m * K + j * kBlock + t)] != q[t];
    // Colwise block: column k, scale column i (rows 32i..32i+31).
    const int64_t k = rng.uniform(0, K - 1);
    const int64_t i = rng.uniform(0, M / kBlock - 1);
    const uint8_t s_col =
        quantize_block(&in.x[size_t(i * kBlock * K + k)], static_cast<int>(K), in.rule, q);
    if (const auto at = s_col_offset(k, i, in)) bad += out.s_col[size_t(*at)] != s_col;
    for (int t = 0; t < kBlock; ++t) bad += out.q_col[size_t(k * M + i * kBlock + t)] != q[t];
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

// A few elements decoded on both axes: x, its scale byte as 2^e, its e4m3 byte and the dequantized
// value.
void print_samples(const DualInput& in, const DualOutputs& out) {
  const int64_t M = in.shape.M;
  const int64_t K = in.shape.K;
  const int64_t picks[][2] = {
      {0, 0}, {1, 33}, {M / 3, K / 2 + 5}, {M / 2 + 7, K - 40}, {M - 1, K - 1}};
  Table t({"element", "x", "axis", "scale byte", "scale", "q byte", "e4m3", "dequantized"});
  for (const auto& pick : picks) {
    const int64_t m = pick[0];
    const int64_t k = pick[1];
    const std::string where = "x[" + std::to_string(m) + ", " + std::to_string(k) + "]";
    const double x = bf16_to_f32(in.x[size_t(m * K + k)]);
    auto row = [&](const char* axis, std::optional<int64_t> s_at,
                   const std::vector<uint8_t>& scales, uint8_t q) {
      const double e4m3 = e4m3_to_f32(q);
      if (!s_at) {
        t.add({where, value_text(x), axis, "-", "tail: zeroed", hex(q), value_text(e4m3), "-"});
        return;
      }
      const uint8_t s = scales[size_t(*s_at)];
      const double deq = e4m3 * static_cast<double>(e8m0_to_f32(s));
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

void print_timings(const DualInput& in, const std::vector<PathTiming>& timings) {
  const double bytes =
      static_cast<double>(effective_bytes(Op::kFused, in.shape.M, in.shape.K, in.groups()));
  Table t({"path", "time", "GB/s (fused bytes)", "how"});
  for (const auto& p : timings) {
    t.add({p.path, time_text(p.ms), fixed(bytes / (p.ms * 1e-3) / 1e9, 1), p.how});
  }
  std::cout << "\nTime per call (" << format_bytes(bytes) << " moved by a fused call):\n"
            << t.str();
}

void print_header(const DemoOptions& o, const DualInput& in) {
  std::cout << "mxq demo: x bf16 " << in.shape.str() << " ("
            << format_bytes(2.0 * in.shape.elements()) << "), rule " << to_string(in.rule)
            << ", seed " << o.seed << ", "
            << (in.offs.empty() ? std::string("dense") : describe_groups(in.offs, in.shape.M))
            << "\n";
  if (!in.offs.empty()) {
    std::cout << "offs = [";
    for (size_t g = 0; g < in.offs.size(); ++g) std::cout << (g ? ", " : "") << in.offs[g];
    std::cout << "]\n";
  }
}

}  // namespace

int run_demo(const DemoOptions& o) {
  const DualInput in = make_input(o);
  print_header(o, in);
  const bool gpu_present = !o.cpu_only && gpu_available();
  const bool gpu_shape = in.shape.M % kGpuAlign == 0 && in.shape.K % kGpuAlign == 0;
  const bool use_gpu = gpu_present && gpu_shape;
  if (o.cpu_only) {
    std::cout << "--cpu: using the CPU reference only\n";
  } else if (!gpu_present) {
    std::cout << "no GPU: using the CPU reference\n";
  } else if (!gpu_shape) {
    std::cout << "M and K are not multiples of " << kGpuAlign
              << " (the GPU kernels' alignment): using the CPU reference only\n";
  }

  const CpuRun cpu = run_reference(in);
  const int64_t spot_bad = spot_check(in, cpu.out, 256, o.seed);
  std::vector<PathTiming> timings{{"CPU reference", cpu.ms, "wall clock, 1 run"}};
  bool ok = spot_bad == 0;

  std::vector<std::string> header{"output", "shape", "bytes"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& v : views(cpu.out, in.shape, in.groups())) {
    cells.push_back({v.name, std::to_string(v.shape.rows) + " x " + std::to_string(v.shape.cols),
                     format_bytes(double(v.shape.bytes()))});
  }
#if defined(MXQ_WITH_CUDA)
  if (use_gpu) {
    for (DualPath path : {DualPath::kFused, DualPath::kComposed}) {
      const GpuDualRun run = run_gpu_dual(in, path, o.repeats);
      header.push_back(std::string(path_name(path)) + " vs reference: mismatches");
      const auto got = views(run.out, in.shape, in.groups());
      const auto want = views(cpu.out, in.shape, in.groups());
      for (size_t i = 0; i < want.size(); ++i) {
        const Mismatch mm = compare_bytes(*want[i].bytes, *got[i].bytes);
        ok &= mm.count == 0;
        cells[i].push_back(describe(mm));
      }
      if (run.status != 0) {
        ok = false;
        std::cout << path_name(path) << ": status word " << describe_status(run.status) << "\n";
      }
      timings.push_back({std::string("GPU ") + path_name(path), median(run.times_ms),
                         "cudaEvent, median of " + std::to_string(run.times_ms.size())});
    }
  }
#endif
  Table outputs(header);
  for (auto& row : cells) outputs.add(row);
  std::cout << "\nOutputs"
            << (use_gpu ? " (GPU outputs poisoned with 0xA5 before the checked run)" : "") << ":\n"
            << outputs.str();
  std::cout
      << "Spot check of the reference (256 random blocks per axis recomputed from numerics.h): "
      << (spot_bad == 0 ? "ok" : std::to_string(spot_bad) + " mismatching bytes") << "\n";
  print_samples(in, cpu.out);
  print_timings(in, timings);
  if (!ok) {
    std::cout << "\nFAILED: byte mismatches (see above)\n";
  } else if (use_gpu) {
    std::cout << "\nOK: fused and composed GPU outputs byte-exact with the CPU reference\n";
  } else {
    std::cout << "\nOK: CPU reference spot check passed (no GPU outputs to compare)\n";
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace mxq::tools
