// mxq_fuzz: random cases through every GPU path, each output byte compared with the CPU reference.
//
//   mxq_fuzz [--cases N] [--seed S] [--case I] [--max-dim D] [--verbose] [--16-bit] [--skip-code C]
//
// Case i of seed S is drawn from splitmix64(S, i) alone, so `--seed S --case I` replays exactly the
// case a failure names. Each case picks a path (fused, rowwise only, colwise only, composed,
// dequantize of rowwise or K-groups colwise data, and quantize_weight), an input type (bf16, fp16,
// fp32), a scaling mode (RCEIL, FLOOR), a shape (M, K multiples of 32 from 32 to --max-dim,
// log-uniform), dense or grouped (G from 1 to 256, random 32-multiple group sizes, empty groups, a
// tail or none), and an input of random bit patterns around a per-row magnitude with special values
// (NaN, +-Inf, +-0, subnormals, the largest finite values) planted at random positions. A weight
// case quantizes W (G, N = M, K) with G log-uniform from 1 to 16 (G*N*K at most --max-dim^2),
// policy 1x32 or 32x32, and rowwise, colwise or both axes. A quantize case also picks the 16-bit
// kernels' tile height: the launch's own choice, or 64 or 128 rows forced (src/host/testing.h;
// fp32 tiles always hold 64 rows). Outputs are poisoned with a random byte first and followed by a
// guard band; every byte must equal the reference's and every guard byte must be intact. Exit code
// 0 only when no case mismatched.
//
// One case in 4 is then made FP8 blockwise (drawn after every older field, so the other cases keep
// their draws): M and K rounded up to multiples of 128, scaling mode fp32 (for FLOOR) or rceil,
// group ends rounded down to multiples of 128, weights in 128x128 tiles, routed groups padded to
// 128; its composed cases run the fused kernel (the composed path is MXFP8's baseline) and its
// colwise dequantize cases take the dense factor layout (grouped factors are a dense slice).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../src/common/parallel.h"
#include "../../src/host/testing.h"
#include "mxq/mxq.h"

namespace {

using mxq::DType;
using mxq::Format;
using mxq::ScalingMode;
using mxq::WeightScaling;

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_++ * 0x2545F4914F6CDD1Dull); }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return double(next() >> 11) * 0x1.0p-53 < p; }
  // Log-uniform integer in [lo, hi].
  int64_t log_uniform(int64_t lo, int64_t hi) {
    const double u = double(next() >> 11) * 0x1.0p-53;
    const double v =
        std::exp(std::log(double(lo)) + u * (std::log(double(hi) + 1) - std::log(double(lo))));
    return std::clamp<int64_t>(static_cast<int64_t>(v), lo, hi);
  }

 private:
  uint64_t state_;
};

#define FUZZ_CUDA(call)                                                                     \
  do {                                                                                      \
    const cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "mxq_fuzz: CUDA error %s in %s\n", cudaGetErrorName(e_), #call); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

enum class Path { kFused, kRowwise, kColwise, kComposed, kDequantRow, kDequantCol, kWeight };
constexpr int kPaths = 7;
const char* path_name(Path p) {
  switch (p) {
    case Path::kFused:
      return "fused";
    case Path::kRowwise:
      return "rowwise";
    case Path::kColwise:
      return "colwise";
    case Path::kComposed:
      return "composed";
    case Path::kDequantRow:
      return "dequantize-rowwise";
    case Path::kDequantCol:
      return "dequantize-colwise";
    case Path::kWeight:
      return "weight";
  }
  return "?";
}

struct Case {
  uint64_t seed = 0;
  int64_t index = 0;
  Path path = Path::kFused;
  DType dtype = DType::kBFloat16;
  ScalingMode mode = ScalingMode::kRceil;
  int64_t M = 0, K = 0;
  std::vector<int32_t> offs;    // empty: dense
  bool row = true, col = true;  // the axes written (fixed by the path, drawn for kWeight)
  // kWeight: W is (experts, M, K), each expert's (N = M, K) matrix quantized on its own.
  int64_t experts = 1;
  WeightScaling scaling = WeightScaling::k32x32;
  uint8_t poison = 0;
  int tile_rows = 0;  // quantize paths: 0 (the launch chooses), 64 or 128 (forced)
  // Routed cases (quantize_routed, docs/numerics.md §12.1): x (M, K) is the tokens (T = M); N routed
  // rows over E experts; the axes of row / col.
  bool routed = false;
  int64_t N = 0, E = 0;
  bool scaled = false, index64 = false, counts64 = false;
  Format format = Format::kMxfp8;

  bool blockwise() const { return format == Format::kFp8Blockwise; }
  int64_t rows() const { return experts * M; }  // of the input, K elements each
  std::string describe() const { return (blockwise() ? "fp8_blockwise " : "") + describe_case(); }
  std::string describe_case() const {
    if (routed) {
      const char* axes = row && col ? "both" : row ? "rowwise" : "colwise";
      return std::string("routed ") + to_string(dtype) + " " + mxq::to_string(mode) + " " + axes +
             " T=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
             " E=" + std::to_string(E) + (scaled ? " scaled" : "") + (index64 ? " index64" : "") +
             (counts64 ? " counts64" : "") + " tile rows " + std::to_string(tile_rows);
    }
    if (path == Path::kWeight) {
      const char* axes = row && col ? "both" : row ? "rowwise" : "colwise";
      return std::string(path_name(path)) + " " + to_string(dtype) + " " + mxq::to_string(mode) +
             " " + mxq::to_string(scaling) + " " + axes + " G=" + std::to_string(experts) +
             " N=" + std::to_string(M) + " K=" + std::to_string(K);
    }
    std::string s = std::string(path_name(path)) + " " + to_string(dtype) + " " +
                    mxq::to_string(mode) + " " + std::to_string(M) + "x" + std::to_string(K);
    if (tile_rows != 0) s += " tile rows " + std::to_string(tile_rows);
    if (!offs.empty()) {
      s += " G=" + std::to_string(offs.size()) + " offs=[";
      for (size_t g = 0; g < offs.size() && g < 8; ++g)
        s += (g ? "," : "") + std::to_string(offs[g]);
      s += offs.size() > 8 ? ",...]" : "]";
    }
    return s;
  }
};

Case draw_case(uint64_t seed, int64_t index, int64_t max_dim, const std::vector<DType>& dtypes) {
  Rng rng(splitmix64(seed) ^ splitmix64(uint64_t(index) + 0x51ED27ull));
  Case c;
  c.seed = seed;
  c.index = index;
  c.path = static_cast<Path>(rng.uniform(0, kPaths - 1));
  c.dtype = dtypes[size_t(rng.uniform(0, int64_t(dtypes.size()) - 1))];
  c.mode = rng.chance(0.5) ? ScalingMode::kRceil : ScalingMode::kFloor;
  c.M = 32 * rng.log_uniform(1, max_dim / 32);
  c.K = 32 * rng.log_uniform(1, max_dim / 32);
  c.poison = static_cast<uint8_t>(rng.next());
  c.row = c.path != Path::kColwise && c.path != Path::kDequantCol;
  c.col = c.path != Path::kRowwise && c.path != Path::kDequantRow;
  if (c.path == Path::kWeight) {
    // G bounded so that W holds at most max_dim^2 elements, like the largest 2-D case.
    c.experts = rng.log_uniform(1, std::min<int64_t>(16, max_dim * max_dim / (c.M * c.K)));
    c.scaling = rng.chance(0.5) ? WeightScaling::k1x32 : WeightScaling::k32x32;
    const int64_t axes = rng.uniform(0, 3);  // both twice as often as either alone
    c.row = axes != 0;
    c.col = axes != 1;
  } else if (c.path != Path::kDequantRow && rng.chance(0.5)) {
    const int64_t G = rng.log_uniform(1, 256);
    const int64_t blocks = c.M / 32;
    const int64_t covered = rng.chance(0.3) ? blocks : rng.uniform(0, blocks);
    std::vector<int64_t> ends(static_cast<size_t>(G));
    for (auto& e : ends) e = rng.uniform(0, covered);
    std::sort(ends.begin(), ends.end());
    ends.back() = covered;
    for (int64_t e : ends) c.offs.push_back(static_cast<int32_t>(32 * e));
  }
  // Drawn last, so the fields above are those the same (seed, case) drew before this one existed;
  // kept by the quantize paths only.
  const int tile_rows = static_cast<int>(64 * rng.uniform(0, 2));
  const bool quantize = c.path == Path::kFused || c.path == Path::kRowwise ||
                        c.path == Path::kColwise || c.path == Path::kComposed;
  c.tile_rows = quantize ? tile_rows : 0;
  // One case in 8 becomes a routed case, drawn after every older field (the other cases keep the
  // draws they had before routed cases existed).
  if (rng.chance(0.125)) {
    c.routed = true;
    c.offs.clear();
    c.experts = 1;
    c.N = rng.uniform(0, 2 * c.M);
    c.E = rng.log_uniform(1, 256);
    c.scaled = rng.chance(0.5);
    c.index64 = rng.chance(0.5);
    c.counts64 = rng.chance(0.5);
    const int64_t axes = rng.uniform(0, 3);
    c.row = axes != 0;
    c.col = axes != 1;
    c.tile_rows = tile_rows;
  }
  // One case in 4 becomes FP8 blockwise (the header says how).
  if (rng.chance(0.25)) {
    c.format = Format::kFp8Blockwise;
    c.M = (c.M + 127) / 128 * 128;
    c.K = (c.K + 127) / 128 * 128;
    c.mode = c.mode == ScalingMode::kFloor ? ScalingMode::kFp32 : ScalingMode::kRceil;
    for (auto& e : c.offs) e = std::min<int32_t>(e / 128 * 128, int32_t(c.M));
    if (c.path == Path::kComposed) c.path = Path::kFused;
    if (c.path == Path::kWeight) {
      c.scaling = WeightScaling::k128x128;
      c.experts =
          std::max<int64_t>(1, std::min<int64_t>(c.experts, max_dim * max_dim / (c.M * c.K)));
    }
  }
  return c;
}

// Random bit patterns of the input type around a per-row exponent, with specials planted. Each row
// draws from its own generator (seeded by the case and the row), so rows fill in parallel and the
// input depends only on the case.
std::vector<uint8_t> make_input(const Case& c, uint64_t seed) {
  const int bits = c.dtype == DType::kFloat32 ? 32 : 16;
  const int man_bits = c.dtype == DType::kFloat32 ? 23 : c.dtype == DType::kBFloat16 ? 7 : 10;
  const int exp_max = c.dtype == DType::kFloat16 ? 31 : 255;
  const int bias = c.dtype == DType::kFloat16 ? 15 : 127;
  std::vector<uint8_t> x(static_cast<size_t>(c.rows() * c.K * bits / 8));
  const uint32_t inf = uint32_t(exp_max) << man_bits;
  const uint32_t man_mask = (1u << man_bits) - 1;
  const uint32_t specials[] = {inf | 1,
                               inf | man_mask,
                               inf,
                               0,
                               1,
                               man_mask,
                               1u << man_bits,
                               inf - 1,
                               inf - 1 - man_mask,
                               uint32_t(bias + 8)
                                   << man_bits};  // NaNs, Inf, 0, subnormals, max, 256
  mxq::detail::parallel_for(c.rows(), [&](int64_t m_begin, int64_t m_end) {
    for (int64_t m = m_begin; m < m_end; ++m) {
      Rng rng(splitmix64(seed ^ splitmix64(uint64_t(m))));
      const int row_exp = static_cast<int>(rng.uniform(1, exp_max - 1));
      for (int64_t k = 0; k < c.K; ++k) {
        const uint64_t r = rng.next();
        uint32_t v;
        if ((r & 0x3FF) == 0) {
          v = specials[(r >> 10) % (sizeof specials / sizeof specials[0])];
        } else {
          const int e =
              std::clamp<int>(row_exp + static_cast<int>((r >> 10) % 9) - 6, 0, exp_max - 1);
          v = (uint32_t(e) << man_bits) | (uint32_t(r >> 20) & man_mask);
        }
        v |= uint32_t((r >> 63) & 1) << (bits - 1);
        const size_t i = size_t(m * c.K + k);
        if (bits == 32) {
          std::memcpy(&x[i * 4], &v, 4);
        } else {
          const uint16_t h = static_cast<uint16_t>(v);
          std::memcpy(&x[i * 2], &h, 2);
        }
      }
    }
  });
  return x;
}

// A device arena: one allocation, carved per case; every buffer is followed by a guard band.
class Arena {
 public:
  static constexpr size_t kGuard = 256;
  explicit Arena(size_t bytes) : bytes_(bytes) { FUZZ_CUDA(cudaMalloc(&base_, bytes)); }
  ~Arena() { cudaFree(base_); }
  void reset() { used_ = 0; }
  uint8_t* take(size_t bytes) {
    const size_t at = (used_ + 255) / 256 * 256;
    if (at + bytes + kGuard > bytes_) {
      std::fprintf(stderr, "mxq_fuzz: arena too small\n");
      std::exit(2);
    }
    used_ = at + bytes + kGuard;
    return static_cast<uint8_t*>(base_) + at;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  size_t used_ = 0;
};

// One output on the device: poisoned payload, guard band after it.
struct Out {
  std::string name;
  uint8_t* device = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> want;
};

constexpr uint8_t kGuardByte = 0x5C;

// Appends an output that must come back as `want`; returns its device pointer.
uint8_t* expect_out(Arena& arena, std::vector<Out>& outs, const char* name,
                    std::vector<uint8_t> want, uint8_t poison) {
  const size_t bytes = want.size();
  outs.push_back(Out{name, arena.take(bytes), bytes, std::move(want)});
  FUZZ_CUDA(cudaMemset(outs.back().device, poison, bytes));
  FUZZ_CUDA(cudaMemset(outs.back().device + bytes, kGuardByte, Arena::kGuard));
  return outs.back().device;
}

uint8_t* upload(Arena& arena, const void* host, size_t bytes) {
  uint8_t* d = arena.take(bytes);
  if (bytes > 0) FUZZ_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

// Compares one output; prints the first difference.
bool check(const Case& c, const Out& o) {
  std::vector<uint8_t> got(o.bytes + Arena::kGuard);
  FUZZ_CUDA(cudaMemcpy(got.data(), o.device, got.size(), cudaMemcpyDeviceToHost));
  int64_t mismatches = 0, first = -1;
  if (o.bytes > 0 && std::memcmp(got.data(), o.want.data(), o.bytes) != 0) {
    for (size_t i = 0; i < o.bytes; ++i) {
      if (got[i] != o.want[i] && mismatches++ == 0) first = int64_t(i);
    }
  }
  int64_t guard = 0;
  for (size_t i = o.bytes; i < got.size(); ++i) guard += got[i] != kGuardByte;
  if (mismatches == 0 && guard == 0) return true;
  std::printf("MISMATCH case %lld (--seed %llu --case %lld): %s: %s: %lld bytes differ",
              (long long)c.index, (unsigned long long)c.seed, (long long)c.index,
              c.describe().c_str(), o.name.c_str(), (long long)mismatches);
  if (first >= 0) {
    std::printf(", first at byte %lld: got 0x%02X, want 0x%02X", (long long)first,
                got[size_t(first)], o.want[size_t(first)]);
  }
  if (guard) std::printf(", %lld guard bytes overwritten", (long long)guard);
  std::printf("\n");
  return false;
}

// An mxq::Error from a call the case expects to succeed: reported like a mismatch.
// Runs the GPU call `f`; a throw is a mismatch of the case (printed), so the case returns false.
template <typename F>
bool ran(const Case& c, F&& f) {
  try {
    f();
    return true;
  } catch (const mxq::Error& e) {
    std::printf("MISMATCH case %lld (--seed %llu --case %lld): %s: threw: %s\n", (long long)c.index,
                (unsigned long long)c.seed, (long long)c.index, c.describe().c_str(), e.what());
    return false;
  }
}

// quantize_weight of W = x (experts, M, K) with the case's axes; the reference on the host.
bool launch_weight(const Case& c, const std::vector<uint8_t>& x, Arena& arena,
                   std::vector<Out>& outs) {
  mxq::QuantizeWeightParams ref;
  ref.w = x.data();
  ref.dtype = c.dtype;
  ref.G = c.experts;
  ref.N = c.M;
  ref.K = c.K;
  ref.format = c.format;
  ref.scaling_mode = c.mode;
  ref.scaling = c.scaling;
  const size_t q_bytes = size_t(c.experts * c.M * c.K);
  // Scale bytes per axis: E8M0 bytes, or fp32 factors of the 128x128 tiles.
  const size_t s_row_bytes =
      size_t(c.blockwise() ? mxq::weight_factor_shape(c.experts, c.M, c.K).bytes() * 4
                           : mxq::weight_s_row_shape(c.experts, c.M, c.K).bytes());
  const size_t s_col_bytes =
      size_t(c.blockwise() ? mxq::weight_factor_shape(c.experts, c.K, c.M).bytes() * 4
                           : mxq::weight_s_col_shape(c.experts, c.M, c.K).bytes());
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  if (c.row) {
    q_row.resize(q_bytes);
    s_row.resize(s_row_bytes);
    ref.q_row = q_row.data();
    ref.s_row = s_row.data();
  }
  if (c.col) {
    q_col.resize(q_bytes);
    s_col.resize(s_col_bytes);
    ref.q_col = q_col.data();
    ref.s_col = s_col.data();
  }
  mxq::ref::quantize_weight(ref);

  mxq::QuantizeWeightParams p = ref;
  p.w = upload(arena, x.data(), x.size());
  if (c.row) {
    p.q_row = expect_out(arena, outs, "q_row", std::move(q_row), c.poison);
    p.s_row = expect_out(arena, outs, "s_row", std::move(s_row), c.poison);
  }
  if (c.col) {
    p.q_col = expect_out(arena, outs, "q_col", std::move(q_col), c.poison);
    p.s_col = expect_out(arena, outs, "s_col", std::move(s_col), c.poison);
  }
  return ran(c, [&] { mxq::quantize_weight(p); });
}

// The other paths: quantize of x (M, K) on the case's axes, or dequantize of its reference.
bool launch(const Case& c, const std::vector<uint8_t>& x, Arena& arena, std::vector<Out>& outs) {
  const int64_t G = int64_t(c.offs.size());
  const bool grouped = G > 0;
  const int32_t* offs_host = grouped ? c.offs.data() : nullptr;
  int32_t* offs_dev = grouped ? reinterpret_cast<int32_t*>(
                                    upload(arena, c.offs.data(), c.offs.size() * sizeof(int32_t)))
                              : nullptr;
  const bool dequant = c.path == Path::kDequantRow || c.path == Path::kDequantCol;
  const bool row = c.row, col = c.col;

  // The reference of the quantization (all requested axes), on the host.
  mxq::QuantizeParams ref;
  ref.x = x.data();
  ref.dtype = c.dtype;
  ref.M = c.M;
  ref.K = c.K;
  ref.format = c.format;
  ref.scaling_mode = c.mode;
  ref.offs = offs_host;
  ref.num_groups = G;
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  if (row) {
    q_row.resize(size_t(mxq::q_row_shape(c.M, c.K).bytes()));
    s_row.resize(size_t(c.blockwise() ? mxq::factor_shape(c.M, c.K).bytes() * 4
                                      : mxq::s_row_shape(c.M, c.K, G).bytes()));
    ref.q_row = q_row.data();
    ref.s_row = s_row.data();
  }
  if (col) {
    q_col.resize(size_t(mxq::q_col_shape(c.M, c.K).bytes()));
    s_col.resize(size_t(c.blockwise() ? mxq::factor_shape(c.K, c.M).bytes() * 4
                                      : mxq::s_col_shape(c.M, c.K, G).bytes()));
    ref.q_col = q_col.data();
    ref.s_col = s_col.data();
  }
  mxq::ref::quantize(ref);

  if (!dequant) {
    mxq::QuantizeParams p = ref;
    p.x = upload(arena, x.data(), x.size());
    p.offs = offs_dev;
    if (row) {
      p.q_row = expect_out(arena, outs, "q_row", q_row, c.poison);
      p.s_row = expect_out(arena, outs, "s_row", s_row, c.poison);
    }
    if (col) {
      p.q_col = expect_out(arena, outs, "q_col", q_col, c.poison);
      p.s_col = expect_out(arena, outs, "s_col", s_col, c.poison);
    }
    if (grouped) {
      p.status = reinterpret_cast<int32_t*>(
          expect_out(arena, outs, "status", std::vector<uint8_t>(sizeof(int32_t), 0), c.poison));
    }
    if (c.path == Path::kComposed) {
      uint8_t* ws = arena.take(size_t(mxq::composed_workspace_bytes(c.M, c.K)));
      return ran(c, [&] { mxq::detail::quantize_composed_with_tile_rows(p, ws, c.tile_rows); });
    }
    return ran(c, [&] { mxq::detail::quantize_with_tile_rows(p, c.tile_rows); });
  } else {
    // Dequantize the reference's data and scales on both sides.
    const bool rowwise = c.path == Path::kDequantRow;
    mxq::DequantizeParams d;
    d.q =
        upload(arena, rowwise ? q_row.data() : q_col.data(), rowwise ? q_row.size() : q_col.size());
    d.scales =
        upload(arena, rowwise ? s_row.data() : s_col.data(), rowwise ? s_row.size() : s_col.size());
    d.rows = rowwise ? c.M : c.K;
    d.cols = rowwise ? c.K : c.M;
    d.format = c.format;
    const bool dense = rowwise || !grouped || c.blockwise();
    d.layout = dense ? mxq::ScaleLayout::kBlocked : mxq::ScaleLayout::kKGroups;
    d.offs = dense ? nullptr : offs_dev;
    d.num_groups = dense ? 0 : G;
    std::vector<uint8_t> want(size_t(d.rows * d.cols * 2));
    mxq::DequantizeParams h = d;
    h.q = rowwise ? q_row.data() : q_col.data();
    h.scales = rowwise ? s_row.data() : s_col.data();
    h.offs = dense ? nullptr : offs_host;
    h.out = want.data();
    mxq::ref::dequantize(h);
    d.out = expect_out(arena, outs, "out", std::move(want), c.poison);
    return ran(c, [&] { mxq::dequantize(d); });
  }
}

// quantize_routed of x (M = T, K): random routes (empty experts, duplicates, rows never routed),
// scale with specials; the reference on the host.
bool launch_routed(const Case& c, const std::vector<uint8_t>& x, Arena& arena,
                   std::vector<Out>& outs) {
  Rng rng(splitmix64(c.seed * 131 + uint64_t(c.index)));
  std::vector<int64_t> counts(size_t(c.E), 0), index;
  const int64_t hot = rng.uniform(0, c.E - 1);  // an expert that gets a share of every case
  for (int64_t r = 0; r < c.N; ++r)
    ++counts[size_t(rng.chance(0.3) ? hot : rng.uniform(0, c.E - 1))];
  for (int64_t r = 0; r < c.N; ++r) {
    index.push_back(r > 0 && rng.chance(0.1) ? index.back() : rng.uniform(0, c.M - 1));
  }
  std::vector<float> scale;
  const float special[] = {0.f, -0.f, -1.f, NAN, INFINITY, 1e30f, 1e-30f};
  if (c.scaled) {
    for (int64_t r = 0; r < c.N; ++r) {
      scale.push_back(rng.chance(0.1) ? special[rng.uniform(0, 6)]
                                      : float(rng.uniform(-1000, 1000)) / 256.f);
    }
  }
  const auto as_bytes = [](const std::vector<int64_t>& v, bool wide) {
    std::vector<uint8_t> b(v.size() * (wide ? 8 : 4));
    for (size_t i = 0; i < v.size(); ++i) {
      const int32_t n = int32_t(v[i]);
      std::memcpy(b.data() + i * (wide ? 8 : 4), wide ? static_cast<const void*>(&v[i]) : &n,
                  wide ? 8 : 4);
    }
    return b;
  };
  const std::vector<uint8_t> index_bytes = as_bytes(index, c.index64);
  const std::vector<uint8_t> counts_bytes = as_bytes(counts, c.counts64);
  const int64_t Mp = c.blockwise() ? mxq::padded_rows<int64_t, mxq::Fp8Blockwise>(c.N, c.E)
                                   : mxq::padded_rows(c.N, c.E);

  mxq::QuantizeRoutedParams ref;
  ref.x = x.data();
  ref.dtype = c.dtype;
  ref.T = c.M;
  ref.K = c.K;
  ref.index = index_bytes.data();
  ref.index_type = c.index64 ? mxq::IndexType::kInt64 : mxq::IndexType::kInt32;
  ref.N = c.N;
  ref.counts = counts_bytes.data();
  ref.counts_type = c.counts64 ? mxq::IndexType::kInt64 : mxq::IndexType::kInt32;
  ref.num_experts = c.E;
  ref.scale = c.scaled ? scale.data() : nullptr;
  ref.format = c.format;
  ref.scaling_mode = c.mode;
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  std::vector<uint8_t> offs_p(size_t(c.E) * 4), dest(size_t(c.N) * 4);
  if (c.row) {
    q_row.resize(size_t(mxq::q_row_shape(Mp, c.K).bytes()));
    s_row.resize(size_t(c.blockwise() ? mxq::factor_shape(Mp, c.K).bytes() * 4
                                      : mxq::s_row_shape(Mp, c.K, c.E).bytes()));
    ref.q_row = q_row.data();
    ref.s_row = s_row.data();
  }
  if (c.col) {
    q_col.resize(size_t(mxq::q_col_shape(Mp, c.K).bytes()));
    s_col.resize(size_t(c.blockwise() ? mxq::factor_shape(c.K, Mp).bytes() * 4
                                      : mxq::s_col_shape(Mp, c.K, c.E).bytes()));
    ref.q_col = q_col.data();
    ref.s_col = s_col.data();
  }
  ref.offs_p = reinterpret_cast<int32_t*>(offs_p.data());
  ref.dest = reinterpret_cast<int32_t*>(dest.data());
  mxq::ref::quantize_routed(ref);

  mxq::QuantizeRoutedParams p = ref;
  p.x = upload(arena, x.data(), x.size());
  p.index = upload(arena, index_bytes.data(), index_bytes.size());
  p.counts = upload(arena, counts_bytes.data(), counts_bytes.size());
  if (c.scaled) p.scale = reinterpret_cast<float*>(upload(arena, scale.data(), scale.size() * 4));
  if (c.row) {
    p.q_row = expect_out(arena, outs, "q_row", std::move(q_row), c.poison);
    p.s_row = expect_out(arena, outs, "s_row", std::move(s_row), c.poison);
  }
  if (c.col) {
    p.q_col = expect_out(arena, outs, "q_col", std::move(q_col), c.poison);
    p.s_col = expect_out(arena, outs, "s_col", std::move(s_col), c.poison);
  }
  p.offs_p = reinterpret_cast<int32_t*>(expect_out(arena, outs, "offs_p", offs_p, c.poison));
  p.dest = reinterpret_cast<int32_t*>(expect_out(arena, outs, "dest", dest, c.poison));
  p.status = reinterpret_cast<int32_t*>(
      expect_out(arena, outs, "status", std::vector<uint8_t>(sizeof(int32_t), 0), c.poison));
  p.workspace = arena.take(size_t(mxq::quantize_routed_workspace_bytes(c.N, c.E, c.format)));
  return ran(c, [&] { mxq::detail::quantize_routed_with_tile_rows(p, c.tile_rows); });
}

// Runs one case; returns true when every byte matched.
bool run_case(const Case& c, Arena& arena, bool verbose) {
  arena.reset();
  const std::vector<uint8_t> x = make_input(c, splitmix64(c.seed * 31 + uint64_t(c.index)));
  std::vector<Out> outs;
  const bool launched = c.routed                  ? launch_routed(c, x, arena, outs)
                        : c.path == Path::kWeight ? launch_weight(c, x, arena, outs)
                                                  : launch(c, x, arena, outs);
  if (!launched) return false;
  FUZZ_CUDA(cudaDeviceSynchronize());
  bool ok = true;
  for (const Out& o : outs) ok = check(c, o) && ok;
  if (verbose)
    std::printf("case %lld: %s: %s\n", (long long)c.index, c.describe().c_str(),
                ok ? "ok" : "MISMATCH");
  return ok;
}

int64_t arg_int(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoll(argv[i + 1], nullptr, 10);
  }
  return fallback;
}
bool arg_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (arg_flag(argc, argv, "--help")) {
    std::printf(
        "usage: mxq_fuzz [--cases N] [--seed S] [--case I] [--max-dim D] [--verbose] [--16-bit]\n");
    return 0;
  }
  const int64_t cases = arg_int(argc, argv, "--cases", 10000);
  const uint64_t seed = static_cast<uint64_t>(arg_int(argc, argv, "--seed", 1));
  const int64_t only = arg_int(argc, argv, "--case", -1);
  const int64_t max_dim = arg_int(argc, argv, "--max-dim", 8192);
  const bool verbose = arg_flag(argc, argv, "--verbose");
  std::vector<DType> dtypes = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
  if (arg_flag(argc, argv, "--16-bit")) dtypes.pop_back();  // the 16-bit inputs only
  if (max_dim < 32 || max_dim % 32 != 0) {
    std::fprintf(stderr, "mxq_fuzz: --max-dim must be a positive multiple of 32, got %lld\n",
                 (long long)max_dim);
    return 2;
  }
  if (!mxq::gpu_available()) {
    std::printf("mxq_fuzz: skipped: no usable GPU (%s)\n", mxq::build_info().c_str());
    return static_cast<int>(arg_int(argc, argv, "--skip-code", 0));
  }
  // x at fp32 plus every output and its copy, for the largest shape.
  Arena arena(size_t(max_dim) * size_t(max_dim) * 16 + (size_t(64) << 20));
  const auto start = std::chrono::steady_clock::now();
  int64_t failed = 0, ran = 0;
  int64_t per_path[kPaths] = {}, routed = 0;
  for (int64_t i = only >= 0 ? only : 0; i < (only >= 0 ? only + 1 : cases); ++i) {
    const Case c = draw_case(seed, i, max_dim, dtypes);
    failed += run_case(c, arena, verbose || only >= 0) ? 0 : 1;
    ++(c.routed ? routed : per_path[int(c.path)]);
    ++ran;
    if (ran % 1000 == 0) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "mxq_fuzz: %lld/%lld cases, %lld mismatched, %.0f s\n", (long long)ran,
                   (long long)cases, (long long)failed, s);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "mxq_fuzz: seed %llu: %lld cases (fused %lld, rowwise %lld, colwise %lld, composed %lld, "
      "dequantize %lld + %lld, weight %lld, routed %lld) in %.1f s\n",
      (unsigned long long)seed, (long long)ran, (long long)per_path[0], (long long)per_path[1],
      (long long)per_path[2], (long long)per_path[3], (long long)per_path[4],
      (long long)per_path[5], (long long)per_path[6], (long long)routed, s);
  std::printf("%lld passed, %lld failed\n", (long long)(ran - failed), (long long)failed);
  return failed == 0 ? 0 : 1;
}
