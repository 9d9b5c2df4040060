// The expert-weight reference (mxq::ref::quantize_weight) against docs/numerics.md §2-§4 and §11:
//   WeightOracle       a test-side computation from the spec text (the formats decoded from their
//                      fields, amax in double, the scale by frexp, torchao's blocked layout; only
//                      the e4m3 rounding comes from numerics.h), every dtype x policy x scaling
//                      mode x shape x input family, partial 128-tiles included
//   WeightSpecialTiles hand-computed 32x32 tiles: §4 values as whole tiles, NaN / Inf inside a
//                      tile, all-NaN, subnormal tiles, the fp32-only rows, for all three dtypes
//   WeightProperties   32x32: q_col is the per-expert transpose of q_row and the scales agree; 1x32
//                      is the 2-D reference mxq::ref::quantize per expert (every dtype); the three
//                      dtypes agree on values all of them hold; every byte written (two poisons);
//                      axis skips
//   WeightValidation   bad input throws mxq::Error of kind kInvalidArgument, "<op>: <message>" with
//                      the exact message, and writes nothing; both entry points
#include <cmath>
#include <functional>
#include <regex>

#include "weight_util.h"

namespace mxq::test {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint8_t kPoison2 = 0x5A;

// ---- the test-side oracle ----

// The formats of §1 decoded from their fields (not numerics.h).
double decode(DType d, uint32_t b) {
  switch (d) {
    case DType::kBFloat16:
    case DType::kFloat16: {
      const bool bf = d == DType::kBFloat16;
      const int mbits = bf ? 7 : 10, ebits = bf ? 8 : 5, bias = bf ? 127 : 15;
      const int sign = (b >> 15) & 1;
      const int e = int(b >> mbits) & ((1 << ebits) - 1);
      const int m = int(b) & ((1 << mbits) - 1);
      double v = 0;
      if (e == (1 << ebits) - 1) {
        v = m ? NAN : INFINITY;
      } else if (e == 0) {
        v = std::ldexp(double(m), 1 - bias - mbits);
      } else {
        v = std::ldexp(double(m + (1 << mbits)), e - bias - mbits);
      }
      return sign ? -v : v;
    }
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
  }
  return NAN;
}

// §3 from its text: d = fl32(amax * C); RCEIL: the smallest power of two >= d, FLOOR: the largest
// <= d, as s - 127, clamped below at -127; NaN / Inf d, or RCEIL above 2^127, give 255.
uint8_t spec_scale(float amax, ScalingMode mode) {
  float c;
  const uint32_t c_bits = 0x3B124925u;  // fp32 rounding of 1/448
  std::memcpy(&c, &c_bits, 4);
  const float d = amax * (mode == ScalingMode::kRceil ? c : std::ldexp(1.0f, -8));
  if (!std::isfinite(d)) return 255;
  if (d == 0) return 0;
  int e = 0;
  const double m = std::frexp(double(d), &e);  // d = m * 2^e, m in [0.5, 1)
  const int p = mode == ScalingMode::kRceil ? (m == 0.5 ? e - 1 : e) : e - 1;
  if (p + 127 > 254) return 255;
  return uint8_t(std::max(p + 127, 0));
}

// §2 steps 4-6 for one value: r = 2^(127-s) (NaN for s = 255), q = e4m3(fl32(v * r)).
uint8_t spec_quantize(float v, uint8_t s) {
  const float r = s == 255 ? NAN : std::ldexp(1.0f, 127 - int(s));
  return e4m3_from_f32(v * r);
}

// amax of a set of values: NaN if any is NaN, else the largest magnitude (Inf included).
float spec_amax(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (std::isnan(x)) return NAN;
    m = std::max(m, std::fabs(x));
  }
  return float(m);
}

WeightOutputs oracle(const WeightTensor& w, WeightScaling scaling, ScalingMode mode) {
  const auto [G, N, K] = w.shape;
  WeightOutputs o;
  o.q_row.resize(size_t(G * N * K));
  o.q_col.resize(size_t(G * N * K));
  auto value = [&](int64_t g, int64_t n, int64_t k) {
    return decode(w.dtype, w.bits(w.index(g, n, k)));
  };
  for (int64_t g = 0; g < G; ++g) {
    Bytes s_row(size_t(N * (K / 32))), s_col(size_t(K * (N / 32)));  // plain, row-major
    if (scaling == WeightScaling::k1x32) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t j = 0; j < K / 32; ++j) {
          std::vector<double> v;
          for (int e = 0; e < 32; ++e) v.push_back(value(g, n, 32 * j + e));
          const uint8_t s = spec_scale(spec_amax(v), mode);
          s_row[size_t(n * (K / 32) + j)] = s;
          for (int e = 0; e < 32; ++e) {
            o.q_row[size_t((g * N + n) * K + 32 * j + e)] = spec_quantize(float(v[size_t(e)]), s);
          }
        }
      }
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t i = 0; i < N / 32; ++i) {
          std::vector<double> v;
          for (int e = 0; e < 32; ++e) v.push_back(value(g, 32 * i + e, k));
          const uint8_t s = spec_scale(spec_amax(v), mode);
          s_col[size_t(k * (N / 32) + i)] = s;
          for (int e = 0; e < 32; ++e) {
            o.q_col[size_t((g * K + k) * N + 32 * i + e)] = spec_quantize(float(v[size_t(e)]), s);
          }
        }
      }
    } else {
      for (int64_t b = 0; b < N / 32; ++b) {
        for (int64_t c = 0; c < K / 32; ++c) {
          std::vector<double> v;
          for (int i = 0; i < 32; ++i) {
            for (int e = 0; e < 32; ++e) v.push_back(value(g, 32 * b + i, 32 * c + e));
          }
          const uint8_t s = spec_scale(spec_amax(v), mode);
          for (int i = 0; i < 32; ++i) {
            const int64_t n = 32 * b + i;
            s_row[size_t(n * (K / 32) + c)] = s;
            for (int e = 0; e < 32; ++e) {
              const int64_t k = 32 * c + e;
              const uint8_t q = spec_quantize(float(v[size_t(32 * i + e)]), s);
              o.q_row[size_t((g * N + n) * K + k)] = q;
              o.q_col[size_t((g * K + k) * N + n)] = q;
            }
          }
          for (int e = 0; e < 32; ++e) s_col[size_t((32 * c + e) * (N / 32) + b)] = s;
        }
      }
    }
    const Bytes row_blocked = to_blocked(s_row, N, K / 32);  // torchao's construction
    const Bytes col_blocked = to_blocked(s_col, K, N / 32);
    o.s_row.insert(o.s_row.end(), row_blocked.begin(), row_blocked.end());
    o.s_col.insert(o.s_col.end(), col_blocked.begin(), col_blocked.end());
  }
  return o;
}

// The decoder and scaling modes of the oracle against the spec's own numbers.
TEST(WeightOracleSelfCheck, DecodeAndScale) {
  EXPECT_EQ(decode(DType::kFloat16, 0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(decode(DType::kFloat16, 0x7BFF), 65504.0);
  EXPECT_EQ(decode(DType::kFloat16, 0xC000), -2.0);
  EXPECT_TRUE(std::isinf(decode(DType::kFloat16, 0x7C00)));
  EXPECT_TRUE(std::isnan(decode(DType::kFloat16, 0x7C01)));
  EXPECT_EQ(decode(DType::kBFloat16, 0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(decode(DType::kBFloat16, 0x4060), 3.5);
  // §3.1 boundary table (d given, so amax = d / C is not exact: use amax values from §3 instead).
  EXPECT_EQ(spec_scale(float(decode(DType::kBFloat16, 0x0460)), ScalingMode::kRceil), 0);
  EXPECT_EQ(spec_scale(float(decode(DType::kBFloat16, 0x0461)), ScalingMode::kRceil), 1);
  EXPECT_EQ(spec_scale(f32_from_bits(0x04600001), ScalingMode::kRceil), 0);
  EXPECT_EQ(spec_scale(f32_from_bits(0x04600002), ScalingMode::kRceil), 1);
  EXPECT_EQ(spec_scale(f32_from_bits(0x047FFFFF), ScalingMode::kFloor), 1);  // §3.2
  EXPECT_EQ(spec_scale(448.0f, ScalingMode::kRceil), 127);
  EXPECT_EQ(spec_scale(480.0f, ScalingMode::kRceil), 128);
  EXPECT_EQ(spec_scale(480.0f, ScalingMode::kFloor), 127);
  EXPECT_EQ(spec_scale(INFINITY, ScalingMode::kFloor), 255);
  EXPECT_EQ(spec_scale(NAN, ScalingMode::kRceil), 255);
  // numerics.h's fp16 widening, exhaustively against the field decoder.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = decode(DType::kFloat16, h);
    const float got = f16_to_f32(uint16_t(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(double(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
    }
  }
}

// ---- WeightOracle ----

const WeightShape kOracleShapes[] = {{1, 32, 32},   {3, 96, 160},  {2, 160, 96},
                                     {1, 256, 128}, {2, 32, 2880}, {1, 2880, 64}};

using OracleParam = std::tuple<DType, WeightScaling, ScalingMode, WeightShape, WDist>;
class WeightOracle : public ::testing::TestWithParam<OracleParam> {};

TEST_P(WeightOracle, ReferenceMatchesSpec) {
  const auto [dtype, scaling, mode, shape, dist] = GetParam();
  const uint64_t seed = uint64_t(shape.G * 7919 + shape.N * 31 + shape.K) * 131 +
                        uint64_t(dtype_index(dtype)) * 17 + uint64_t(dist);
  const WeightTensor w = make_weight(dtype, shape, dist, seed);
  EXPECT_TRUE(same_weight_outputs(reference_weight(w, scaling, mode), oracle(w, scaling, mode),
                                  shape, "reference vs spec"));
}

std::string oracle_name(const ::testing::TestParamInfo<OracleParam>& info) {
  const auto& [dtype, scaling, mode, shape, dist] = info.param;
  return std::string(to_string(dtype)) + "_" +
         (scaling == WeightScaling::k32x32 ? "t32x32" : "b1x32") + "_" + to_string(mode) + "_" +
         weight_shape_name(shape) + "_" + wdist_name(dist);
}

INSTANTIATE_TEST_SUITE_P(Inputs, WeightOracle,
                         ::testing::Combine(::testing::ValuesIn(kWeightDtypes),
                                            ::testing::ValuesIn(kWeightScalings),
                                            ::testing::ValuesIn(kModes),
                                            ::testing::ValuesIn(kOracleShapes),
                                            ::testing::ValuesIn(kWDists)),
                         oracle_name);

// ---- WeightSpecialTiles: hand-computed 32x32 tiles ----

// A tile of `fill` (with the sign flipped where (i + e) is odd when `alternate`), and `special`
// at tile position (3, 17) when `has_special`. Expected: the scale per scaling mode, the byte of
// the fill value per scaling mode (a negated fill gives that byte | 0x80), the byte of the special
// value.
struct TileCase {
  const char* name;
  DType dtype;
  uint32_t fill;
  bool alternate;
  bool has_special;
  uint32_t special;
  uint8_t s_rceil, s_floor;
  uint8_t q_rceil, q_floor;  // fill
  uint8_t q_special_rceil, q_special_floor;
};
void PrintTo(const TileCase& c, std::ostream* os) { *os << c.name; }
constexpr int kSpecialI = 3, kSpecialE = 17;

// Worked by hand from §2-§4 (each line: the tile, then scale and bytes per scaling mode).
const std::vector<TileCase>& tile_cases() {
  constexpr DType bf = DType::kBFloat16, h = DType::kFloat16, f = DType::kFloat32;
  static const std::vector<TileCase> cases = {
      // all 0, all -0: s 0, bytes 00 / 80 (every dtype)
      {"bf16_all_zero", bf, 0x0000, false, false, 0, 0, 0, 0x00, 0x00, 0, 0},
      {"fp16_all_neg_zero", h, 0x8000, false, false, 0, 0, 0, 0x80, 0x80, 0, 0},
      {"fp32_all_zero", f, 0x00000000, false, false, 0, 0, 0, 0x00, 0x00, 0, 0},
      // all +-448: 127 / 7E, FE
      {"bf16_all_pm448", bf, 0x43E0, true, false, 0, 127, 127, 0x7E, 0x7E, 0, 0},
      {"fp16_all_pm448", h, 0x5F00, true, false, 0, 127, 127, 0x7E, 0x7E, 0, 0},
      {"fp32_all_pm448", f, 0x43E00000, true, false, 0, 127, 127, 0x7E, 0x7E, 0, 0},
      // all 3.5: 120 / 7E; all +-480: 128 / 77 (RCEIL), 127 / 7E (FLOOR); all 512: 128 / 78
      {"fp16_all_3p5", h, 0x4300, false, false, 0, 120, 120, 0x7E, 0x7E, 0, 0},
      {"fp16_all_pm480", h, 0x5F80, true, false, 0, 128, 127, 0x77, 0x7E, 0, 0},
      {"fp32_all_512", f, 0x44000000, false, false, 0, 128, 128, 0x78, 0x78, 0, 0},
      // fp32-only rows of §4: 0x40600001 RCEIL 121 / 76 (224.00001 -> 224), FLOOR 120 / 7E
      // (448.00003 saturates); 0x43FFFFFF RCEIL 128 / 78, FLOOR 127 / 7E (511.99997 saturates)
      {"fp32_all_3p5_plus_ulp", f, 0x40600001, false, false, 0, 121, 120, 0x76, 0x7E, 0, 0},
      {"fp32_all_512_minus_ulp", f, 0x43FFFFFF, false, false, 0, 128, 127, 0x78, 0x7E, 0, 0},
      // NaN / Inf anywhere in the tile: 255 and every byte 7F
      {"bf16_ones_plus_inf", bf, 0x3F80, false, true, 0x7F80, 255, 255, 0x7F, 0x7F, 0x7F, 0x7F},
      {"fp16_ones_plus_neg_inf", h, 0x3C00, false, true, 0xFC00, 255, 255, 0x7F, 0x7F, 0x7F, 0x7F},
      {"fp32_ones_plus_nan", f, 0x3F800000, false, true, 0x7FC00000, 255, 255, 0x7F, 0x7F, 0x7F,
       0x7F},
      {"fp16_ones_plus_nan_payload", h, 0x3C00, false, true, 0x7C01, 255, 255, 0x7F, 0x7F, 0x7F,
       0x7F},
      {"bf16_all_nan", bf, 0x7FC0, false, false, 0, 255, 255, 0x7F, 0x7F, 0, 0},
      {"fp16_all_nan", h, 0xFE00, false, false, 0, 255, 255, 0x7F, 0x7F, 0, 0},
      {"fp32_all_nan", f, 0x7FFFFFFF, false, false, 0, 255, 255, 0x7F, 0x7F, 0, 0},
      // 1s + the dtype's max: bf16 / fp32 max (2^128 (1 - 2^-8 or 2^-24)): RCEIL 247 / max 78
      // (255.x -> 256), FLOOR 246 / 7E (511.x saturates); the ones (2^-120, 2^-119) give 00.
      // fp16 max 65504: d = 146.2 -> 2^8: RCEIL 135, 65504/256 = 255.875 -> 78, ones 2^-8 -> 02;
      // FLOOR d = 255.875 -> 2^7: 134, 511.75 -> 7E, ones 2^-7 -> 04.
      {"bf16_ones_plus_max", bf, 0x3F80, false, true, 0x7F7F, 247, 246, 0x00, 0x00, 0x78, 0x7E},
      {"fp16_ones_plus_max", h, 0x3C00, false, true, 0x7BFF, 135, 134, 0x02, 0x04, 0x78, 0x7E},
      {"fp32_ones_plus_max", f, 0x3F800000, false, true, 0x7F7FFFFF, 247, 246, 0x00, 0x00, 0x78,
       0x7E},
      // 1s + the smallest subnormal (+ or -): 119, ones 78, the subnormal 00 / 80
      {"bf16_ones_plus_min_sub", bf, 0x3F80, false, true, 0x0001, 119, 119, 0x78, 0x78, 0x00, 0x00},
      {"fp16_ones_plus_neg_min_sub", h, 0x3C00, false, true, 0x8001, 119, 119, 0x78, 0x78, 0x80,
       0x80},
      {"fp32_ones_plus_min_sub", f, 0x3F800000, false, true, 0x00000001, 119, 119, 0x78, 0x78, 0x00,
       0x00},
      // all +-smallest subnormal: bf16 2^-133: 0 / 08, 88 (§4). fp16 2^-24: d = 2^-24 * C ->
      // 2^-32 (RCEIL) and 2^-32 (FLOOR): 95, 2^-24 * 2^32 = 256 -> 78. fp32 2^-149: d underflows
      // to 0: 0, 2^-149 * 2^127 = 2^-22 -> 00 / 80.
      {"bf16_all_pm_min_sub", bf, 0x0001, true, false, 0, 0, 0, 0x08, 0x08, 0, 0},
      {"fp16_all_pm_min_sub", h, 0x0001, true, false, 0, 95, 95, 0x78, 0x78, 0, 0},
      {"fp32_all_pm_min_sub", f, 0x00000001, true, false, 0, 0, 0, 0x00, 0x00, 0, 0},
      // all largest subnormal: bf16 127 * 2^-133 and fp32 (1 - 2^-23) 2^-126: d subnormal below
      // 2^-127 -> 0 under both scaling modes; v * 2^127 = 1.98 -> 2.0 = 40. fp16 1023 * 2^-24:
      // RCEIL d = 2^-22.8 -> 2^-22: 105, 1023 / 4 = 255.75 -> 78; FLOOR d = 1023 * 2^-32 -> 2^-23:
      // 104, 511.5 -> 7E.
      {"bf16_all_max_sub", bf, 0x007F, false, false, 0, 0, 0, 0x40, 0x40, 0, 0},
      {"fp16_all_max_sub", h, 0x03FF, false, false, 0, 105, 104, 0x78, 0x7E, 0, 0},
      {"fp32_all_max_sub", f, 0x007FFFFF, false, false, 0, 0, 0, 0x40, 0x40, 0, 0},
      // all smallest normal: bf16 / fp32 2^-126: 0 / 40 (§4). fp16 2^-14: d -> 2^-22 (both): 105,
      // 2^8 -> 78.
      {"fp32_all_min_normal", f, 0x00800000, false, false, 0, 0, 0, 0x40, 0x40, 0, 0},
      {"fp16_all_min_normal", h, 0x0400, false, false, 0, 105, 105, 0x78, 0x78, 0, 0},
      // all -smallest normal with a +3.5 in the tile: amax 3.5 -> 120, r = 2^7: -2^-126 * 2^7
      // underflows to -0 -> 80 (bf16); fp16 -2^-14 * 2^7 = -2^-7 -> -4 * 2^-9 -> 84.
      {"bf16_neg_min_normal_plus_3p5", bf, 0x8080, false, true, 0x4060, 120, 120, 0x80, 0x80, 0x7E,
       0x7E},
      {"fp16_neg_min_normal_plus_3p5", h, 0x8400, false, true, 0x4300, 120, 120, 0x84, 0x84, 0x7E,
       0x7E},
  };
  return cases;
}

using TileParam = std::tuple<size_t, ScalingMode>;
class WeightSpecialTiles : public ::testing::TestWithParam<TileParam> {};

// The case fills tile (1, 2) of expert 1 of a (2, 96, 160) W whose other tiles are normal
// values; the 32x32 reference must give the hand-computed bytes on both axes and every scale
// entry of the tile (s_row for its 32 rows, s_col for its 32 columns), and agree with the oracle.
TEST_P(WeightSpecialTiles, HandComputed) {
  const TileCase& c = tile_cases()[std::get<0>(GetParam())];
  const ScalingMode mode = std::get<1>(GetParam());
  const bool rceil = mode == ScalingMode::kRceil;
  const WeightShape shape{2, 96, 160};
  const int64_t g = 1, b = 1, tc = 2;
  WeightTensor w = make_weight(c.dtype, shape, WDist::kNormal, 99);
  const uint32_t sign = dtype_bits(c.dtype).sign;
  for (int i = 0; i < 32; ++i) {
    for (int e = 0; e < 32; ++e) {
      uint32_t v = c.alternate && (i + e) % 2 ? c.fill ^ sign : c.fill;
      if (c.has_special && i == kSpecialI && e == kSpecialE) v = c.special;
      w.set_bits(w.index(g, 32 * b + i, 32 * tc + e), v);
    }
  }
  const WeightOutputs o = reference_weight(w, WeightScaling::k32x32, mode);
  const uint8_t s = rceil ? c.s_rceil : c.s_floor;
  const uint8_t q_fill = rceil ? c.q_rceil : c.q_floor;
  const uint8_t q_special = rceil ? c.q_special_rceil : c.q_special_floor;
  int bad = 0;
  for (int i = 0; i < 32 && bad < 5; ++i) {
    const int64_t n = 32 * b + i;
    for (int e = 0; e < 32 && bad < 5; ++e) {
      const int64_t k = 32 * tc + e;
      uint8_t want = c.alternate && (i + e) % 2 && q_fill != 0x7F ? q_fill | 0x80 : q_fill;
      if (c.has_special && i == kSpecialI && e == kSpecialE) want = q_special;
      const uint8_t row = o.q_row[size_t((g * shape.N + n) * shape.K + k)];
      const uint8_t col = o.q_col[size_t((g * shape.K + k) * shape.N + n)];
      if (row != want || col != want) {
        ++bad;
        ADD_FAILURE() << "(" << i << ", " << e << "): q_row 0x" << std::hex << int(row)
                      << ", q_col 0x" << int(col) << ", want 0x" << int(want);
      }
    }
  }
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(int(o.s_row[size_t(weight_s_row_offset(g, 32 * b + e, tc, shape.N, shape.K))]),
              int(s))
        << "S_row row " << e;
    EXPECT_EQ(int(o.s_col[size_t(weight_s_col_offset(g, 32 * tc + e, b, shape.N, shape.K))]),
              int(s))
        << "S_col row " << e;
  }
  EXPECT_TRUE(same_weight_outputs(o, oracle(w, WeightScaling::k32x32, mode), shape, "vs oracle"));
}

INSTANTIATE_TEST_SUITE_P(Cases, WeightSpecialTiles,
                         ::testing::Combine(::testing::Range<size_t>(0, tile_cases().size()),
                                            ::testing::ValuesIn(kModes)),
                         [](const ::testing::TestParamInfo<TileParam>& info) {
                           return std::string(tile_cases()[std::get<0>(info.param)].name) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// ---- WeightProperties ----

const WeightShape kPropShapes[] = {{1, 32, 32}, {3, 96, 160}, {2, 160, 288}, {1, 128, 2880}};

using PropParam = std::tuple<DType, ScalingMode, WeightShape>;
class WeightProperties : public ::testing::TestWithParam<PropParam> {
 protected:
  WeightTensor input(WDist dist = WDist::kSpecial) const {
    const auto& [dtype, mode, shape] = GetParam();
    return make_weight(dtype, shape, dist, uint64_t(shape.N * 1000 + shape.K + shape.G));
  }
};

// §11: with 32x32 tiles, q_col is exactly the transpose of q_row per expert, and a tile's scale
// sits at S_row[n, c] for its rows and S_col[k, b] for its columns.
TEST_P(WeightProperties, TilesTransposeAndShareScales) {
  const auto& [dtype, mode, shape] = GetParam();
  for (WDist dist : kWDists) {
    const WeightTensor w = input(dist);
    const WeightOutputs o = reference_weight(w, WeightScaling::k32x32, mode);
    const auto [G, N, K] = shape;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) {
          ASSERT_EQ(o.q_col[size_t((g * K + k) * N + n)], o.q_row[size_t((g * N + n) * K + k)])
              << wdist_name(dist) << " g " << g << " n " << n << " k " << k;
        }
      }
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) {
          ASSERT_EQ(o.s_row[size_t(weight_s_row_offset(g, n, k / 32, N, K))],
                    o.s_col[size_t(weight_s_col_offset(g, k, n / 32, N, K))])
              << wdist_name(dist) << " g " << g << " n " << n << " k " << k;
        }
      }
    }
  }
}

// §7: every byte of every output written on every call (two poisons), for every axis choice; an
// axis alone gives the bytes it gives beside the other.
TEST_P(WeightProperties, EveryByteWrittenAndAxesIndependent) {
  const auto& [dtype, mode, shape] = GetParam();
  const WeightTensor w = input();
  for (WeightScaling scaling : kWeightScalings) {
    const WeightOutputs both = reference_weight(w, scaling, mode, true, true, kPoison);
    EXPECT_TRUE(same_weight_outputs(reference_weight(w, scaling, mode, true, true, kPoison2), both,
                                    shape, "second poison"));
    WeightOutputs row_only = reference_weight(w, scaling, mode, true, false, kPoison2);
    WeightOutputs col_only = reference_weight(w, scaling, mode, false, true, kPoison2);
    EXPECT_TRUE(row_only.q_col.empty() && col_only.q_row.empty());
    row_only.q_col = both.q_col;
    row_only.s_col = both.s_col;
    col_only.q_row = both.q_row;
    col_only.s_row = both.s_row;
    EXPECT_TRUE(same_weight_outputs(row_only, both, shape, "rowwise alone"));
    EXPECT_TRUE(same_weight_outputs(col_only, both, shape, "colwise alone"));
  }
}

std::string prop_name(const ::testing::TestParamInfo<PropParam>& info) {
  const auto& [dtype, mode, shape] = info.param;
  return std::string(to_string(dtype)) + "_" + to_string(mode) + "_" + weight_shape_name(shape);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WeightProperties,
                         ::testing::Combine(::testing::ValuesIn(kWeightDtypes),
                                            ::testing::ValuesIn(kModes),
                                            ::testing::ValuesIn(kPropShapes)),
                         prop_name);

using CrossParam = std::tuple<ScalingMode, WeightShape>;
class WeightCrossChecks : public ::testing::TestWithParam<CrossParam> {};

// §11: the 1x32 policy is the 2-D contract (§5) applied to each expert: mxq::ref::quantize of the
// expert's (N, K) matrix as x (M = N), for every dtype.
TEST_P(WeightCrossChecks, OneByThirtyTwoIsQuantizePerExpert) {
  const auto& [mode, shape] = GetParam();
  for (const DType dtype : kWeightDtypes) {
    const WeightTensor w = make_weight(dtype, shape, WDist::kSpecial, uint64_t(shape.N + shape.K));
    const WeightOutputs o = reference_weight(w, WeightScaling::k1x32, mode);
    const auto [G, N, K] = shape;
    const int64_t row_region = weight_s_row_shape<int64_t>(1, N, K).cols;
    const int64_t col_region = weight_s_col_shape<int64_t>(1, N, K).cols;
    for (int64_t g = 0; g < G; ++g) {
      Bytes q_row(size_t(N * K)), s_row(size_t(s_row_shape(N, K, 0).bytes()));
      Bytes q_col(size_t(N * K)), s_col(size_t(s_col_shape(N, K).bytes()));
      QuantizeParams p;
      p.x = w.bytes.data() + g * N * K * dtype_bytes(dtype);
      p.dtype = dtype;
      p.M = N;
      p.K = K;
      p.scaling_mode = mode;
      p.q_row = q_row.data();
      p.s_row = s_row.data();
      p.q_col = q_col.data();
      p.s_col = s_col.data();
      ref::quantize(p);
      auto slice = [](const Bytes& v, int64_t at, int64_t n) {
        return Bytes(v.begin() + at, v.begin() + at + n);
      };
      const std::string at = std::string(to_string(dtype)) + " expert " + std::to_string(g) + " ";
      EXPECT_TRUE(bytes_equal(slice(o.q_row, g * N * K, N * K), q_row, K, at + "q_row"));
      EXPECT_TRUE(bytes_equal(slice(o.s_row, g * row_region, row_region), s_row, 1, at + "s_row"));
      EXPECT_TRUE(bytes_equal(slice(o.q_col, g * N * K, N * K), q_col, N, at + "q_col"));
      EXPECT_TRUE(bytes_equal(slice(o.s_col, g * col_region, col_region), s_col, 1, at + "s_col"));
    }
  }
}

// §2 step 1: every input widens to fp32 exactly, so the same values give the same bytes in every
// dtype. Values all three hold: bf16 values with exponents in fp16's normal range, zeros, Inf, NaN.
TEST_P(WeightCrossChecks, DtypesAgreeOnSharedValues) {
  const auto& [mode, shape] = GetParam();
  WeightTensor bf(DType::kBFloat16, shape), h(DType::kFloat16, shape), f(DType::kFloat32, shape);
  std::mt19937_64 rng(shape.N + shape.K);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < shape.elems(); ++i) {
    // |v| in fp16's normal range [2^-14, 65504], 8 significant bits: exact in all three dtypes.
    const float n = normal(rng);
    const float m = std::max(std::fabs(n), 1.0f / 64) * (n < 0 ? -1.0f : 1.0f);
    uint16_t b = bf16_from_f32(std::ldexp(m, int(rng() % 16) - 8));
    const uint64_t r = rng() % 1000;
    if (r == 0) b = 0x7F80;  // Inf
    if (r == 1) b = 0xFFC0;  // NaN
    if (r == 2) b = 0x8000;  // -0
    bf.set_bits(i, b);
    const float v = bf16_to_f32(b);
    f.set_bits(i, f32_bits(v));
    h.set_bits(i, std::isnan(v) ? 0xFE00 : f16_bits_from_double(v));
    ASSERT_TRUE(std::isnan(v) || double(f16_to_f32(uint16_t(h.bits(i)))) == double(v)) << v;
  }
  for (WeightScaling scaling : kWeightScalings) {
    const WeightOutputs want = reference_weight(bf, scaling, mode);
    EXPECT_TRUE(same_weight_outputs(reference_weight(h, scaling, mode), want, shape, "fp16"));
    EXPECT_TRUE(same_weight_outputs(reference_weight(f, scaling, mode), want, shape, "fp32"));
  }
}

std::string cross_name(const ::testing::TestParamInfo<CrossParam>& info) {
  const auto& [mode, shape] = info.param;
  return std::string(to_string(mode)) + "_" + weight_shape_name(shape);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WeightCrossChecks,
                         ::testing::Combine(::testing::ValuesIn(kModes),
                                            ::testing::ValuesIn(kPropShapes)),
                         cross_name);

// An empty expert matrix (N or K = 0) writes nothing and needs no pointers.
TEST(WeightEmpty, NothingToWrite) {
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{0, 64}, {64, 0}, {0, 0}}) {
    QuantizeWeightParams p;
    p.G = 3;
    p.N = N;
    p.K = K;
    EXPECT_NO_THROW(ref::quantize_weight(p)) << N << "x" << K;
    Bytes q(16, kPoison), s(16, kPoison);
    p.q_row = q.data();
    p.s_row = s.data();
    EXPECT_NO_THROW(ref::quantize_weight(p));
    EXPECT_EQ(q, Bytes(16, kPoison));
    EXPECT_EQ(s, Bytes(16, kPoison));
    EXPECT_NO_THROW(quantize_weight(p));  // the GPU entry point too: nothing to launch
  }
}

// ---- WeightValidation ----

const std::string kAddr = "0x[0-9a-f]+";  // how std::ostream prints a non-null pointer

TEST(WeightScalingNames, AcceptsExactlyTheThreeNames) {
  EXPECT_EQ(parse_weight_scaling("1x32"), WeightScaling::k1x32);
  EXPECT_EQ(parse_weight_scaling("32x32"), WeightScaling::k32x32);
  EXPECT_EQ(parse_weight_scaling("128x128"), WeightScaling::k128x128);
  EXPECT_STREQ(to_string(WeightScaling::k1x32), "1x32");
  EXPECT_STREQ(to_string(WeightScaling::k32x32), "32x32");
  EXPECT_STREQ(to_string(WeightScaling::k128x128), "128x128");
  for (const std::string bad :
       {"32X32", "1X32", "32x1", "32", "", " 32x32", "32x32 ", "mx", "128", "1x128", "128X128"}) {
    try {
      parse_weight_scaling(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      // The parser names itself (§9); the torch layer puts its own op before message().
      const std::string message =
          "weight_scaling must be \"1x32\", \"32x32\" or \"128x128\", got \"" + bad + "\"";
      EXPECT_EQ(e.message(), message);
      EXPECT_EQ(std::string(e.what()), "mxq::parse_weight_scaling: " + message);
    }
  }
}

struct WeightBadCase {
  const char* name;
  std::function<void(QuantizeWeightParams&)> edit;
  std::string message;  // a regular expression matching message() whole
};
void PrintTo(const WeightBadCase& c, std::ostream* os) { *os << c.name; }

const char* const kHalfPair = ": set both or neither \\(a null pair skips that axis\\)";

const std::vector<WeightBadCase>& weight_bad_cases() {
  static const std::vector<WeightBadCase> cases = {
      {"dtype_7", [](auto& p) { p.dtype = static_cast<DType>(7); },
       exact("dtype must be DType::kBFloat16, kFloat16 or kFloat32, got 7")},
      {"dtype_negative", [](auto& p) { p.dtype = static_cast<DType>(-1); },
       exact("dtype must be DType::kBFloat16, kFloat16 or kFloat32, got -1")},
      {"scaling_7", [](auto& p) { p.scaling = static_cast<WeightScaling>(7); },
       exact("scaling must be WeightScaling::k1x32 or k32x32, got 7")},
      {"scaling_mode_9", [](auto& p) { p.scaling_mode = static_cast<ScalingMode>(9); },
       exact("scaling_mode must be ScalingMode::kRceil or kFloor, got 9")},
      {"G_0", [](auto& p) { p.G = 0; }, exact("G must be at least 1, got 0")},
      {"G_negative", [](auto& p) { p.G = -2; }, exact("G must be at least 1, got -2")},
      {"G_2pow31", [](auto& p) { p.G = int64_t(1) << 31; },
       exact("G must be at most 2^31-1, got 2147483648")},
      {"N_100", [](auto& p) { p.N = 100; }, exact("N must be a multiple of 32, got 100")},
      {"K_48", [](auto& p) { p.K = 48; }, exact("K must be a multiple of 32, got 48")},
      {"N_negative", [](auto& p) { p.N = -32; }, exact("N must be non-negative, got -32")},
      {"K_2pow31", [](auto& p) { p.K = int64_t(1) << 31; },
       exact("K must be at most 2^31-1, got 2147483648")},
      {"GNK_too_large",
       [](auto& p) {
         p.G = 2147483647;
         p.N = 2147483616;
         p.K = 2147483616;
       },
       exact("G*N*K must be below 2^60 elements, got G=2147483647, N=2147483616, K=2147483616")},
      // Exactly 2^60 is refused; the bad dtype (checked next) keeps a wrong pass from running.
      {"GNK_2pow60",
       [](auto& p) {
         p.G = int64_t(1) << 30;
         p.N = p.K = int64_t(1) << 15;
         p.dtype = static_cast<DType>(7);
       },
       exact("G*N*K must be below 2^60 elements, got G=1073741824, N=32768, K=32768")},
      // G one less (G*N*K = 2^60 - 2^30) passes that check: the next one (dtype) refuses it.
      {"GNK_below_2pow60",
       [](auto& p) {
         p.G = (int64_t(1) << 30) - 1;
         p.N = p.K = int64_t(1) << 15;
         p.dtype = static_cast<DType>(7);
       },
       exact("dtype must be DType::kBFloat16, kFloat16 or kFloat32, got 7")},
      {"w_null", [](auto& p) { p.w = nullptr; }, exact("w is null")},
      {"w_misaligned", [](auto& p) { p.w = static_cast<const uint8_t*>(p.w) + 2; },
       "w must be 16-byte aligned, got address " + kAddr},
      {"q_col_misaligned", [](auto& p) { p.q_col += 1; },
       "q_col must be 16-byte aligned, got address " + kAddr},
      {"s_row_misaligned", [](auto& p) { p.s_row += 8; },
       "s_row must be 16-byte aligned, got address " + kAddr},
      {"q_row_null_s_row_given", [](auto& p) { p.q_row = nullptr; },
       std::string("q_row is null but s_row is set") + kHalfPair},
      {"s_row_null_q_row_given", [](auto& p) { p.s_row = nullptr; },
       std::string("s_row is null but q_row is set") + kHalfPair},
      {"q_col_null_s_col_given", [](auto& p) { p.q_col = nullptr; },
       std::string("q_col is null but s_col is set") + kHalfPair},
      {"s_col_null_q_col_given", [](auto& p) { p.s_col = nullptr; },
       std::string("s_col is null but q_col is set") + kHalfPair},
      {"no_axis",
       [](auto& p) {
         p.q_row = p.s_row = nullptr;
         p.q_col = p.s_col = nullptr;
       },
       exact("nothing to compute: set q_row and s_row (rowwise), q_col and s_col (colwise), or "
             "all four")},
  };
  return cases;
}

class WeightValidation : public ::testing::TestWithParam<size_t> {};

// The reference and the GPU entry point refuse with the same message, each naming itself; nothing
// is written. (The GPU entry point gets host buffers here: every case fails validation, which
// comes before the device.)
TEST_P(WeightValidation, ThrowsNamingArgumentAndWritesNothing) {
  const WeightBadCase& c = weight_bad_cases()[GetParam()];
  const WeightShape shape{2, 64, 96};
  const WeightTensor w = make_weight(DType::kBFloat16, shape, WDist::kNormal, 5);
  WeightOutputs o = poisoned_weight_outputs(shape, kPoison, true, true);
  const WeightOutputs untouched = o;
  QuantizeWeightParams p = weight_params(w, o, WeightScaling::k32x32, ScalingMode::kRceil);
  EXPECT_NO_THROW(ref::quantize_weight(p));  // the baseline is valid
  o = untouched;
  p = weight_params(w, o, WeightScaling::k32x32, ScalingMode::kRceil);
  c.edit(p);
  EXPECT_TRUE(
      throws_error([&] { ref::quantize_weight(p); }, "mxq::ref::quantize_weight", c.message));
  EXPECT_TRUE(o == untouched);
  EXPECT_TRUE(throws_error([&] { quantize_weight(p); }, "mxq::quantize_weight", c.message));
  EXPECT_TRUE(o == untouched);
}

INSTANTIATE_TEST_SUITE_P(Cases, WeightValidation,
                         ::testing::Range<size_t>(0, weight_bad_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(weight_bad_cases()[info.param].name);
                         });

// Without a usable device the GPU entry point refuses valid arguments as a missing capability
// (kUnsupported without CUDA in the build, kCuda without a device), named, never as a bad argument.
TEST(WeightEntryPoint, GpuRefusesWithoutDevice) {
  if (gpu_available()) GTEST_SKIP() << "this build has CUDA and a device";
  const WeightShape shape{1, 32, 32};
  const WeightTensor w = make_weight(DType::kFloat16, shape, WDist::kNormal, 5);
  WeightOutputs o = poisoned_weight_outputs(shape, kPoison, true, false);
  try {
    quantize_weight(weight_params(w, o, WeightScaling::k1x32, ScalingMode::kFloor));
    ADD_FAILURE() << "did not throw";
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), Error::Kind::kInvalidArgument) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("mxq::quantize_weight: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace mxq::test
