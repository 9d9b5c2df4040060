// Shared helpers of the expert-weight suites (test_weight_reference.cpp, gpu_weight_test.cpp):
// W tensors of every input dtype built from raw bits, input families aimed at the contract's edges,
// output buffers, and running mxq::ref::quantize_weight.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"
#include "test_util.h"

namespace mxq::test {

constexpr DType kWeightDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
constexpr WeightScaling kWeightScalings[] = {WeightScaling::k1x32, WeightScaling::k32x32};
constexpr ScalingMode kModes[] = {ScalingMode::kRceil, ScalingMode::kFloor};

inline int dtype_index(DType d) { return static_cast<int>(d); }

struct WeightShape {
  int64_t G, N, K;
  int64_t elems() const { return G * N * K; }
};
inline std::string weight_shape_name(const WeightShape& s) {
  return "G" + std::to_string(s.G) + "_N" + std::to_string(s.N) + "_K" + std::to_string(s.K);
}
inline void PrintTo(const WeightShape& s, std::ostream* os) { *os << weight_shape_name(s); }

// ---- encoding values into each dtype (inputs only: any bit pattern is a valid input) ----

// fp16 bits of x, round to nearest even, overflow to Inf.
inline uint16_t f16_bits_from_double(double x) {
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= 65520.0) return uint16_t(sign | 0x7C00);
  if (a < std::ldexp(1.0, -14)) {  // subnormal: multiples of 2^-24 (1024 rounds up to 2^-14)
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(a, 24))));
  }
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int exponent = e - 1;
  double mant = std::nearbyint((std::ldexp(a, -exponent) - 1.0) * 1024.0);
  if (mant >= 1024.0) {
    mant = 0;
    ++exponent;
  }
  if (exponent > 15) return uint16_t(sign | 0x7C00);
  return uint16_t(sign | uint16_t((exponent + 15) << 10) | uint16_t(mant));
}

inline uint32_t bits_from_double(DType d, double x) {
  switch (d) {
    case DType::kBFloat16:
      return bf16_from_f32(float(x));
    case DType::kFloat16:
      return f16_bits_from_double(x);
    case DType::kFloat32:
      return f32_bits(float(x));
  }
  return 0;
}

// Per-dtype bit patterns.
struct DtypeBits {
  uint32_t sign, inf, nan, max_finite, min_subnormal, max_subnormal, min_normal, one;
  int mantissa_bits, exponent_bias, max_exponent;  // of the largest finite value
};
inline DtypeBits dtype_bits(DType d) {
  switch (d) {
    case DType::kBFloat16:
      return {0x8000, 0x7F80, 0x7FC0, 0x7F7F, 0x0001, 0x007F, 0x0080, 0x3F80, 7, 127, 127};
    case DType::kFloat16:
      return {0x8000, 0x7C00, 0x7E00, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x3C00, 10, 15, 15};
    case DType::kFloat32:
      return {0x80000000u, 0x7F800000u, 0x7FC00000u, 0x7F7FFFFFu, 0x00000001u, 0x007FFFFFu,
              0x00800000u, 0x3F800000u, 23,          127,         127};
  }
  return {};
}

// W (G, N, K) as raw bytes of its dtype.
struct WeightTensor {
  DType dtype = DType::kBFloat16;
  WeightShape shape{};
  std::vector<uint8_t> bytes;

  WeightTensor() = default;
  WeightTensor(DType d, WeightShape s)
      : dtype(d), shape(s), bytes(size_t(s.elems() * dtype_bytes(d)), 0) {}
  int64_t index(int64_t g, int64_t n, int64_t k) const { return (g * shape.N + n) * shape.K + k; }
  uint32_t bits(int64_t i) const {
    if (dtype == DType::kFloat32) {
      uint32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * i, 2);
    return v;
  }
  void set_bits(int64_t i, uint32_t b) {
    if (dtype == DType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &b, 4);
    } else {
      const uint16_t h = uint16_t(b);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  const void* data() const { return bytes.data(); }
};

// ---- input families ----
enum class WDist {
  kNormal,   // normal values, each 32x32 tile its own magnitude 2^[-24, 24]
  kWide,     // random finite bit patterns, each tile a 12-binade window anywhere in the range
  kSpecial,  // tiles of §4 specials, NaN / Inf footprints, subnormal tiles, special row and column
             // blocks, raw random bits (all NaN payloads), "1s + X" tiles
  kBoundary,  // one element per row and column block at a scale boundary (448*2^k or 2^k, +-1
              // ulp), the rest at e4m3 rounding ties (+-1 ulp) for that scale
};
inline const char* wdist_name(WDist d) {
  switch (d) {
    case WDist::kNormal:
      return "normal";
    case WDist::kWide:
      return "wide";
    case WDist::kSpecial:
      return "special";
    case WDist::kBoundary:
      return "boundary";
  }
  return "?";
}
constexpr WDist kWDists[] = {WDist::kNormal, WDist::kWide, WDist::kSpecial, WDist::kBoundary};

// Special values of a dtype (bits): zeros, subnormal and normal extremes, the §4 values, Inf, NaN.
inline std::vector<uint32_t> special_values(DType d) {
  const DtypeBits b = dtype_bits(d);
  std::vector<uint32_t> v = {0,
                             b.sign,
                             b.min_subnormal,
                             b.min_subnormal | b.sign,
                             b.max_subnormal,
                             b.min_normal,
                             b.max_finite,
                             b.max_finite | b.sign,
                             b.one,
                             bits_from_double(d, 448.0),
                             bits_from_double(d, -480.0),
                             bits_from_double(d, 3.5),
                             bits_from_double(d, 512.0),
                             b.inf,
                             b.inf | b.sign,
                             b.nan,
                             b.nan | b.sign};
  if (d == DType::kFloat32) {
    v.push_back(0x40600001u);
    v.push_back(0x43FFFFFFu);
    v.push_back(0x7F800001u);  // signalling NaN pattern
  } else {
    v.push_back(b.inf | 1u);  // another NaN payload
  }
  return v;
}

// The magnitude of bits b plus `ulps` units in the last place, sign kept (stays finite).
inline uint32_t add_ulps(DType d, uint32_t b, int ulps) {
  const DtypeBits db = dtype_bits(d);
  const uint32_t mag = b & ~db.sign;
  int64_t m = int64_t(mag) + ulps;
  m = std::clamp<int64_t>(m, 0, db.max_finite);
  return uint32_t(m) | (b & db.sign);
}

// Exact values of the e4m3 codes 0x00..0x7E.
inline double e4m3_value(int code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
}

inline WeightTensor make_weight(DType d, WeightShape s, WDist dist, uint64_t seed) {
  WeightTensor w(d, s);
  const DtypeBits db = dtype_bits(d);
  const int max_exp_field = d == DType::kFloat16 ? 30 : 254;  // largest finite exponent field
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<uint32_t> specials = special_values(d);
  auto pick_special = [&] { return specials[rng() % specials.size()]; };
  auto random_bits = [&](int exp_lo, int exp_hi) {  // finite, exponent field in [lo, hi]
    const uint32_t field = uint32_t(std::uniform_int_distribution<int>(exp_lo, exp_hi)(rng));
    const uint32_t mant = uint32_t(rng()) & ((1u << db.mantissa_bits) - 1);
    return (field << db.mantissa_bits) | mant | ((rng() & 1) ? db.sign : 0);
  };
  for (int64_t g = 0; g < s.G; ++g) {
    for (int64_t tb = 0; tb < s.N / kBlock; ++tb) {
      for (int64_t tc = 0; tc < s.K / kBlock; ++tc) {
        auto set = [&](int i, int e, uint32_t bits) {
          w.set_bits(w.index(g, tb * kBlock + i, tc * kBlock + e), bits);
        };
        auto fill = [&](auto value) {
          for (int i = 0; i < kBlock; ++i) {
            for (int e = 0; e < kBlock; ++e) set(i, e, value(i, e));
          }
        };
        const double scale = std::ldexp(1.0, int(rng() % 49) - 24);
        auto normal_value = [&](int, int) { return bits_from_double(d, normal(rng) * scale); };
        switch (dist) {
          case WDist::kNormal:
            fill(normal_value);
            break;
          case WDist::kWide: {
            const int hi = int(1 + rng() % uint64_t(max_exp_field));
            const int lo = std::max(0, hi - 12);
            fill([&](int, int) { return random_bits(lo, hi); });
            break;
          }
          case WDist::kSpecial: {
            const int style = int(rng() % 12);
            if (style < 4) {
              fill(normal_value);
            } else if (style == 4) {  // one special value everywhere (alternating sign or not)
              const uint32_t v = pick_special();
              const bool alt = rng() & 1;
              fill([&](int i, int e) { return alt && (i + e) % 2 ? v ^ db.sign : v; });
            } else if (style == 5) {  // a NaN or Inf somewhere in a normal tile
              fill(normal_value);
              const uint32_t bad[] = {db.inf, db.inf | db.sign, db.nan, db.nan | db.sign};
              set(int(rng() % kBlock), int(rng() % kBlock), bad[rng() % 4]);
            } else if (style == 6) {  // subnormals only (and zeros)
              fill([&](int, int) { return random_bits(0, 0); });
            } else if (style == 7) {  // a special row block
              fill(normal_value);
              const int i = int(rng() % kBlock);
              const uint32_t v = pick_special();
              for (int e = 0; e < kBlock; ++e) set(i, e, v);
            } else if (style == 8) {  // a special column block
              fill(normal_value);
              const int e = int(rng() % kBlock);
              const uint32_t v = pick_special();
              for (int i = 0; i < kBlock; ++i) set(i, e, v);
            } else if (style == 9) {  // raw random bits: NaNs of every payload, everything
              const uint32_t mask = d == DType::kFloat32 ? 0xFFFFFFFFu : 0xFFFFu;
              fill([&](int, int) { return uint32_t(rng()) & mask; });
            } else if (style == 10) {  // 1s + X
              fill([&](int, int) { return db.one; });
              set(int(rng() % kBlock), int(rng() % kBlock), pick_special());
            } else {  // specials sprinkled into a normal tile
              fill(normal_value);
              for (int j = 0; j < 4; ++j) {
                const uint32_t v = pick_special();
                if (v == db.nan || v == (db.nan | db.sign) || (v & ~db.sign) >= db.inf) continue;
                set(int(rng() % kBlock), int(rng() % kBlock), v);
              }
            }
            break;
          }
          case WDist::kBoundary: {
            // Scale 2^k: amax = 448 * 2^k gives s = 127 + k under both scaling modes; neighbours
            // of it and of 2^k, 480 * 2^k move the scaling mode's boundaries.
            const int k_lo = d == DType::kFloat16 ? -24 : -127;
            const int k_hi = d == DType::kFloat16 ? 6 : 118;
            const int k = std::uniform_int_distribution<int>(k_lo, k_hi)(rng);
            const double anchors[] = {448.0, 256.0, 480.0, 464.0, 1.0, 449.0};
            std::vector<int> perm(kBlock);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            fill([&](int i, int e) {
              if (e == perm[size_t(i)]) {  // one per row block and column block
                const double a = anchors[rng() % std::size(anchors)] * std::ldexp(1.0, k);
                const uint32_t b = bits_from_double(d, (rng() & 1) ? -a : a);
                return add_ulps(d, b, int(rng() % 5) - 2);
              }
              const int code = int(rng() % 0x7E);  // a tie between code and code + 1
              const double tie = (e4m3_value(code) + e4m3_value(code + 1)) / 2;
              const uint32_t b =
                  bits_from_double(d, ((rng() & 1) ? -tie : tie) * std::ldexp(1.0, k));
              return add_ulps(d, b, int(rng() % 3) - 1);
            });
            break;
          }
        }
      }
    }
  }
  return w;
}

// ---- outputs ----

struct WeightOutputs {
  std::vector<uint8_t> q_row, s_row, q_col, s_col;  // empty when the axis is skipped
  bool operator==(const WeightOutputs& o) const {
    return q_row == o.q_row && s_row == o.s_row && q_col == o.q_col && s_col == o.s_col;
  }
};

inline WeightOutputs poisoned_weight_outputs(const WeightShape& s, uint8_t poison, bool rowwise,
                                             bool colwise) {
  WeightOutputs o;
  if (rowwise) {
    o.q_row.assign(size_t(s.elems()), poison);
    o.s_row.assign(size_t(weight_s_row_shape(s.G, s.N, s.K).bytes()), poison);
  }
  if (colwise) {
    o.q_col.assign(size_t(s.elems()), poison);
    o.s_col.assign(size_t(weight_s_col_shape(s.G, s.N, s.K).bytes()), poison);
  }
  return o;
}

inline uint8_t* data_or_null(std::vector<uint8_t>& v) { return v.empty() ? nullptr : v.data(); }

inline QuantizeWeightParams weight_params(const WeightTensor& w, WeightOutputs& o,
                                          WeightScaling scaling, ScalingMode mode) {
  QuantizeWeightParams p;
  p.w = w.data();
  p.dtype = w.dtype;
  p.G = w.shape.G;
  p.N = w.shape.N;
  p.K = w.shape.K;
  p.scaling_mode = mode;
  p.scaling = scaling;
  p.q_row = data_or_null(o.q_row);
  p.s_row = data_or_null(o.s_row);
  p.q_col = data_or_null(o.q_col);
  p.s_col = data_or_null(o.s_col);
  return p;
}

// mxq::ref::quantize_weight into freshly poisoned buffers.
inline WeightOutputs reference_weight(const WeightTensor& w, WeightScaling scaling,
                                      ScalingMode mode, bool rowwise = true, bool colwise = true,
                                      uint8_t poison = kPoison) {
  WeightOutputs o = poisoned_weight_outputs(w.shape, poison, rowwise, colwise);
  ref::quantize_weight(weight_params(w, o, scaling, mode));
  return o;
}

// Byte-exact comparison of every output, naming the output and the first mismatch.
inline ::testing::AssertionResult same_weight_outputs(const WeightOutputs& got,
                                                      const WeightOutputs& want,
                                                      const WeightShape& s,
                                                      const std::string& label = "") {
  const std::string at = label.empty() ? "" : label + " ";
  const struct {
    const char* name;
    const std::vector<uint8_t>& got;
    const std::vector<uint8_t>& want;
    int64_t cols;
  } fields[] = {{"q_row", got.q_row, want.q_row, s.K},
                {"s_row", got.s_row, want.s_row, weight_s_row_shape(s.G, s.N, s.K).cols},
                {"q_col", got.q_col, want.q_col, s.N},
                {"s_col", got.s_col, want.s_col, weight_s_col_shape(s.G, s.N, s.K).cols}};
  for (const auto& f : fields) {
    if (f.got.size() == f.want.size() &&
        (f.got.empty() || std::memcmp(f.got.data(), f.want.data(), f.got.size()) == 0)) {
      continue;
    }
    return bytes_equal(f.got, f.want, std::max<int64_t>(f.cols, 1), at + f.name);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mxq::test

namespace mxq {
inline void PrintTo(DType d, std::ostream* os) { *os << to_string(d); }
inline void PrintTo(WeightScaling s, std::ostream* os) { *os << to_string(s); }
}  // namespace mxq
