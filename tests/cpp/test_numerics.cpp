// The scalar rules of numerics.h against independent formulations written from docs/numerics.md:
// the scale rules over all 2^32 fp32 patterns, the e4m3 cast over every bf16 value times every
// reciprocal, the format decoders over every code. Every expected value comes from the docs' tables
// or from double arithmetic.
#include <algorithm>
#include <array>
#include <cmath>
#include <thread>

#include "test_util.h"

namespace mxq::test {
namespace {

float f32(uint32_t bits) { return f32_from_bits(bits); }

// ---- exhaustive sweeps, split across hardware threads ----

struct SweepResult {
  uint64_t mismatches = 0;
  uint64_t first = 0;  // first mismatching index
  int64_t got = 0;
  int64_t want = 0;
};

void note(SweepResult& r, uint64_t i, int64_t got, int64_t want) {
  if (got != want && r.mismatches++ == 0) r = {1, i, got, want};
}

// Runs check(begin, end, result) on one chunk of [0, n) per thread and merges the results.
template <typename Check>
SweepResult sweep_chunks(uint64_t n, const Check& check) {
  const uint64_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<SweepResult> results(threads);
  std::vector<std::thread> pool;
  for (uint64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { check(n * t / threads, n * (t + 1) / threads, results[t]); });
  }
  for (auto& th : pool) th.join();
  SweepResult total;  // chunks ascend: the first chunk with a mismatch holds the first one
  for (const auto& res : results) {
    if (res.mismatches != 0 && total.mismatches == 0) {
      total = res;
    } else {
      total.mismatches += res.mismatches;
    }
  }
  return total;
}

// Compares got(i) with want(i) for every i in [0, n).
template <typename Got, typename Want>
SweepResult sweep(uint64_t n, const Got& got, const Want& want) {
  return sweep_chunks(n, [&](uint64_t begin, uint64_t end, SweepResult& r) {
    for (uint64_t i = begin; i < end; ++i) note(r, i, got(i), want(i));
  });
}

::testing::AssertionResult no_mismatch(const SweepResult& r, const char* what) {
  if (r.mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << r.mismatches << " mismatches; first at 0x" << std::hex << r.first
         << ": got " << std::dec << r.got << ", want " << r.want;
}

// An expected value that is a step function of the non-negative fp32 patterns: value[j] on
// [start[j], start[j+1]), the last run ending at `end`. Every rule swept below is monotone in |x|,
// so its expected values form such runs; their boundaries come from the docs' definitions, found
// by bisection. Checking a run costs one call of the function under test per pattern, so 2^32
// patterns take seconds.
struct Runs {
  std::vector<uint32_t> start;
  std::vector<int32_t> value;
  uint64_t end = 0;
};

// The first pattern in [+0, +Inf] where the monotone predicate holds; 0x7F800001 if none does.
template <typename Pred>
uint32_t first_where(const Pred& holds) {
  uint32_t lo = 0, hi = 0x7F800001;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (holds(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Compares got(i) with runs at i for every i in [0, runs.end). Each run segment is counted in a
// tight loop the compiler vectorizes, and rescanned for the first mismatch only when needed.
template <typename Got>
SweepResult sweep_runs(const Runs& runs, const Got& got) {
  return sweep_chunks(runs.end, [&](uint64_t begin, uint64_t end, SweepResult& r) {
    for (size_t j = 0; j < runs.start.size(); ++j) {
      const uint64_t run_end = j + 1 < runs.start.size() ? runs.start[j + 1] : runs.end;
      const uint32_t a = uint32_t(std::max<uint64_t>(begin, runs.start[j]));
      const uint32_t b = uint32_t(std::min<uint64_t>(end, run_end));
      const int32_t want = runs.value[j];
      uint32_t bad = 0;  // 32-bit arithmetic throughout, so that the loop vectorizes
      for (uint32_t i = a; i < b; ++i) bad += int32_t(got(i)) != want;
      if (bad == 0) continue;
      for (uint32_t i = a; i < b; ++i) note(r, i, got(i), want);
    }
  });
}

// Scale bytes as runs: 0 from +0, s = 1..255 from the first pattern where reaches(bits, s) holds,
// and 255 on the NaN patterns.
template <typename Reaches>
Runs scale_runs(const Reaches& reaches) {
  Runs runs{{0}, {0}, uint64_t(1) << 31};
  for (int s = 1; s <= 255; ++s) {
    runs.start.push_back(first_where([&](uint32_t bits) { return reaches(bits, s); }));
    runs.value.push_back(s);
  }
  runs.start.push_back(0x7F800001);
  runs.value.push_back(255);
  return runs;
}

// ---- independent formulations (docs/numerics.md §1-§3) ----

double pow2(int e) { return std::ldexp(1.0, e); }

// §3.1: s - 127 is the exponent of the smallest power of two >= d (clamped at -127; beyond 2^127 it
// is 255), so s is reached once d > 2^(s-128).
bool rceil_reaches(float d, int s) { return double(d) > pow2(s - 128); }
// §3.2: s - 127 is the exponent of the largest power of two <= d (clamped at -127), so s is reached
// once d >= 2^(s-127); 255 (d >= 2^128) only by Inf.
bool floor_reaches(float d, int s) { return double(d) >= pow2(s - 127); }

// fl32(a * b): the product of two floats is exact in double, the cast rounds once.
float product(float a, double b) { return static_cast<float>(double(a) * b); }

// §1: value of a non-negative e4m3 code 0..126 from the format definition.
double e4m3_spec_value(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
}

// §2 step 6: the nearest of the 127 non-negative finite e4m3 values (a tie goes to the even code),
// saturation at 448, NaN -> 0x7F, the sign bit copied (so -0 and negative underflow give 0x80).
uint8_t e4m3_spec(float p) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7E; ++c) v.push_back(e4m3_spec_value(c));
    return v;
  }();
  if (std::isnan(p)) return 0x7F;
  const uint8_t sign = std::signbit(p) ? 0x80 : 0x00;
  const double a = std::fabs(double(p));
  if (a >= 448) return sign | 0x7E;
  const int lo = int(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
  const int hi = lo + 1;
  const double mid = (values[lo] + values[hi]) / 2;  // exact: e4m3 values have 4 significant bits
  const int code = a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
  return uint8_t(sign | code);
}

// fp32 -> bf16 by comparing with the two neighbouring bf16 values (ties to the even one); every NaN
// becomes the canonical 0x7FC0.
uint16_t bf16_spec(float f) {
  if (std::isnan(f)) return 0x7FC0;
  if (std::isinf(f)) return uint16_t(f32_bits(f) >> 16);
  const uint32_t bits = f32_bits(f);
  // The truncation and one bf16 step further from zero.
  const uint16_t lo = uint16_t(bits >> 16), hi = uint16_t(lo + 1);
  const double a = std::fabs(double(f)), vlo = std::fabs(double(bf16_to_f32(lo)));
  const double vhi =
      (lo & 0x7FFF) == 0x7F7F ? std::ldexp(1.0, 128) : std::fabs(double(bf16_to_f32(hi)));
  const double mid = (vlo + vhi) / 2;
  return a < mid ? lo : a > mid ? hi : (lo % 2 == 0 ? lo : hi);
}

bool same_f32(float a, float b) {  // bitwise equal, any NaN equal to any NaN
  return std::isnan(a) ? std::isnan(b) : f32_bits(a) == f32_bits(b);
}

// ---- §1 formats ----

TEST(Formats, E4m3NamedCodes) {  // docs/numerics.md §1
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x76), 224.0f);
  EXPECT_EQ(e4m3_to_f32(0x77), 240.0f);
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_EQ(f32_bits(e4m3_to_f32(0x80)), 0x80000000u);  // -0
}

TEST(Formats, E4m3DecodeEveryCode) {  // §1, all 256 codes against the format definition
  for (int q = 0; q < 256; ++q) {
    const int code = q & 0x7F;
    const float want = code == 0x7F ? NAN : float((q & 0x80 ? -1 : 1) * e4m3_spec_value(code));
    EXPECT_TRUE(same_f32(e4m3_to_f32(uint8_t(q)), want)) << "q=0x" << std::hex << q;
    if (code != 0x7F) {
      EXPECT_EQ(e4m3_from_f32(e4m3_to_f32(uint8_t(q))), q) << "round trip q=0x" << std::hex << q;
    }
  }
}

// §1 and §2 step 4: value 2^(s-127), reciprocal 2^(127-s), 255 = NaN.
TEST(Formats, E8m0EveryByte) {
  for (int s = 0; s < 255; ++s) {
    EXPECT_EQ(e8m0_to_f32(uint8_t(s)), std::ldexp(1.0f, s - 127)) << "s=" << s;
    EXPECT_EQ(e8m0_reciprocal(uint8_t(s)), std::ldexp(1.0f, 127 - s)) << "s=" << s;
  }
  EXPECT_EQ(f32_bits(e8m0_to_f32(0)), 0x00400000u);        // 2^-127 is an fp32 subnormal
  EXPECT_EQ(f32_bits(e8m0_reciprocal(254)), 0x00400000u);  // which a shift cannot produce
  EXPECT_EQ(f32_bits(e8m0_reciprocal(0)), 0x7F000000u);    // 2^127
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_TRUE(std::isnan(e8m0_reciprocal(255)));
}

TEST(Formats, Bf16FromF32Sanity) {
  EXPECT_EQ(bf16_from_f32(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_f32(f32(0x3F808000)), 0x3F80);  // tie, to even
  EXPECT_EQ(bf16_from_f32(f32(0x3F818000)), 0x3F82);  // tie, to even (up)
  EXPECT_EQ(bf16_from_f32(f32(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(bf16_from_f32(f32(0xBF80FFFF)), 0xBF81);  // sign kept
  EXPECT_EQ(bf16_from_f32(f32(0x7F7FFFFF)), 0x7F80);  // rounds past bf16 max to Inf
  EXPECT_EQ(bf16_from_f32(f32(0x7F800000)), 0x7F80);
  EXPECT_EQ(bf16_from_f32(f32(0xFF800000)), 0xFF80);
  EXPECT_EQ(bf16_from_f32(f32(0x00008000)), 0x0000);  // subnormal tie, to even (zero)
  EXPECT_EQ(bf16_from_f32(f32(0x80000000)), 0x8000);  // -0
  for (uint32_t nan : {0x7F800001u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F80FFFFu}) {  // canonical NaN
    EXPECT_EQ(bf16_from_f32(f32(nan)), 0x7FC0) << "0x" << std::hex << nan;
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {  // widening then narrowing is the identity
    if (std::isnan(bf16_to_f32(uint16_t(b)))) continue;
    ASSERT_EQ(bf16_from_f32(bf16_to_f32(uint16_t(b))), b);
    ASSERT_EQ(f32_bits(bf16_to_f32(uint16_t(b))), b << 16);
  }
}

// bf16 rounding of every fp32 value (the dequantize output, §8): a value rounds to bf16 b or above
// once it passes the midpoint between b's predecessor and b (reaching it on a tie when b is even).
TEST(Exhaustive, Bf16FromF32AllFp32) {
  Runs runs{{0}, {0}, 0x7F800001};  // +0 .. +Inf; NaN (always the canonical 0x7FC0) checked below
  for (uint32_t b = 1; b <= 0x7F80; ++b) {
    const double v = b == 0x7F80 ? pow2(128) : bf16_to_f32(uint16_t(b));  // Inf sits at 2^128
    const double mid = (double(bf16_to_f32(uint16_t(b - 1))) + v) / 2;
    runs.start.push_back(first_where(
        [&](uint32_t x) { return double(f32(x)) > mid || (double(f32(x)) == mid && b % 2 == 0); }));
    runs.value.push_back(b);
  }
  EXPECT_TRUE(no_mismatch(sweep_runs(runs, [](uint32_t i) { return bf16_from_f32(f32(i)); }),
                          "bf16_from_f32, positive"));
  EXPECT_TRUE(no_mismatch(
      sweep_runs(runs, [](uint32_t i) { return bf16_from_f32(f32(i | 0x80000000u)) ^ 0x8000; }),
      "bf16_from_f32, negative (sign flipped back)"));
  for (uint32_t nan = 0x7F800001u; nan < 0x80000000u; ++nan) {
    ASSERT_EQ(bf16_from_f32(f32(nan)), 0x7FC0) << std::hex << nan;
    ASSERT_EQ(bf16_from_f32(f32(nan | 0x80000000u)), 0x7FC0) << std::hex << nan;
  }
}

// ---- §2 step 2: amax ----

TEST(Amax, NanPropagatingMaxOfMagnitudes) {
  std::mt19937 rng(7);
  const std::array<uint16_t, 10> specials = {0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x0000,
                                             0x8000, 0x0001, 0x7F7F, 0xFF7F, 0x7F81};
  for (int trial = 0; trial < 100000; ++trial) {
    uint16_t v[kBlock];
    for (auto& b : v) b = uint16_t(rng());
    if (trial % 2) {  // mostly finite blocks with an occasional special
      for (auto& b : v) {
        b = bf16_from_f32(std::ldexp(float(rng() % 1000) - 500, int(rng() % 40) - 20));
      }
      v[rng() % kBlock] = specials[rng() % specials.size()];
    }
    float want = 0.0f;  // starts at +0; NaN wins over everything
    for (uint16_t b : v) {
      const float a = std::fabs(bf16_to_f32(b));
      want = std::isnan(want) || std::isnan(a) ? NAN : std::max(want, a);
    }
    const float got = bf16_to_f32(amax_bits_bf16(v, kBlock));
    ASSERT_TRUE(same_f32(got, want)) << "trial " << trial << ": got " << got << ", want " << want;
  }
}

// ---- §3 scale rules ----

struct BoundaryCase {
  uint32_t d_bits;
  int s;
};
void PrintTo(const BoundaryCase& c, std::ostream* os) {
  *os << "d=0x" << std::hex << c.d_bits << " s=" << std::dec << c.s;
}

class RceilBoundary : public ::testing::TestWithParam<BoundaryCase> {};

TEST_P(RceilBoundary, ScaleByte) {  // docs/numerics.md §3.1 boundary table
  EXPECT_EQ(int(e8m0_rceil_from_d(GetParam().d_bits)), GetParam().s);
}

INSTANTIATE_TEST_SUITE_P(
    Table, RceilBoundary,
    ::testing::Values(
        BoundaryCase{0x00000000, 0}, BoundaryCase{0x00000001, 0}, BoundaryCase{0x00400000, 0},
        BoundaryCase{0x00400001, 1}, BoundaryCase{0x007FFFFF, 1}, BoundaryCase{0x00800000, 1},
        BoundaryCase{0x1F800000, 63}, BoundaryCase{0x1F800001, 64}, BoundaryCase{0x3F7FFFFF, 127},
        BoundaryCase{0x3F800000, 127}, BoundaryCase{0x3F800001, 128}, BoundaryCase{0x5F800000, 191},
        BoundaryCase{0x5F800001, 192}, BoundaryCase{0x7F000000, 254}, BoundaryCase{0x7F000001, 255},
        BoundaryCase{0x7F800000, 255}, BoundaryCase{0x7FC00000, 255}),
    [](const auto& info) {
      std::ostringstream os;
      os << "d_0x" << std::hex << std::uppercase << info.param.d_bits;
      return os.str();
    });

TEST(ScaleRules, RceilCutoff) {  // §3.1: the smallest amax with a non-zero scale
  EXPECT_EQ(e8m0_from_amax_bf16(0x045F, ScalingMode::kRceil), 0);
  EXPECT_EQ(e8m0_from_amax_bf16(0x0460, ScalingMode::kRceil), 0);  // 448 * 2^-127
  EXPECT_EQ(e8m0_from_amax_bf16(0x0461, ScalingMode::kRceil), 1);
  EXPECT_EQ(e8m0_from_amax(f32(0x04600000), ScalingMode::kRceil), 0);
  EXPECT_EQ(e8m0_from_amax(f32(0x04600001), ScalingMode::kRceil), 0);
  EXPECT_EQ(e8m0_from_amax(f32(0x04600002), ScalingMode::kRceil), 1);
}

// §3.2: the one fp32 amax where torchao's exponent form differs.
TEST(ScaleRules, FloorMultiplyForm) {
  EXPECT_EQ(e8m0_from_amax(f32(0x047FFFFF), ScalingMode::kFloor), 1);
  EXPECT_EQ(e8m0_from_amax(f32(0x047FFFFE), ScalingMode::kFloor), 0);
  EXPECT_EQ(e8m0_from_amax(f32(0x04800000), ScalingMode::kFloor), 1);
}

TEST(ScaleRules, Fp32InputRows) {  // §4, the two rows that change with fp32 input
  const float a = f32(0x40600001);
  const uint8_t s_rceil = e8m0_from_amax(a, ScalingMode::kRceil);
  EXPECT_EQ(s_rceil, 121);
  EXPECT_EQ(e4m3_from_f32(mul_rn(a, e8m0_reciprocal(s_rceil))), 0x76);
  const float b = f32(0x43FFFFFF);
  const uint8_t s_floor = e8m0_from_amax(b, ScalingMode::kFloor);
  EXPECT_EQ(s_floor, 127);
  EXPECT_EQ(e4m3_from_f32(mul_rn(b, e8m0_reciprocal(s_floor))), 0x7E);
}

// Every fp32 pattern of d through both scaling modes (§3). The sign of d is ignored (d = amax * C
// is never negative); the negative patterns are swept too.
TEST(Exhaustive, ScaleFromDAllFp32) {
  const Runs rceil = scale_runs([](uint32_t d, int s) { return rceil_reaches(f32(d), s); });
  const Runs floor = scale_runs([](uint32_t d, int s) { return floor_reaches(f32(d), s); });
  for (const uint32_t sign : {0u, 0x80000000u}) {
    EXPECT_TRUE(
        no_mismatch(sweep_runs(rceil, [sign](uint32_t i) { return e8m0_rceil_from_d(i | sign); }),
                    sign ? "RCEIL, negative d" : "RCEIL"));
    EXPECT_TRUE(
        no_mismatch(sweep_runs(floor, [sign](uint32_t i) { return e8m0_floor_from_d(i | sign); }),
                    sign ? "FLOOR, negative d" : "FLOOR"));
  }
}

// Every non-negative fp32 amax (NaN and Inf included) through the whole scale step (§3).
TEST(Exhaustive, ScaleFromAmaxAllFp32) {
  const double c_rceil = double(f32(kRceilInv448));  // §3.1: the fp32 rounding of 1/448
  EXPECT_EQ(f32(kRceilInv448), float(1.0 / 448));
  const Runs rceil =
      scale_runs([&](uint32_t a, int s) { return rceil_reaches(product(f32(a), c_rceil), s); });
  const Runs floor =
      scale_runs([](uint32_t a, int s) { return floor_reaches(product(f32(a), 1.0 / 256), s); });
  EXPECT_TRUE(no_mismatch(
      sweep_runs(rceil, [](uint32_t i) { return e8m0_from_amax(f32(i), ScalingMode::kRceil); }),
      "RCEIL"));
  EXPECT_TRUE(no_mismatch(
      sweep_runs(floor, [](uint32_t i) { return e8m0_from_amax(f32(i), ScalingMode::kFloor); }),
      "FLOOR"));
  // §3.2: torchao's exponent form max(exponent(amax) - 8, 0) agrees everywhere but at 0x047FFFFF.
  Runs exponent_form{{0}, {0}, uint64_t(1) << 31};
  for (uint32_t e = 9; e <= 0xFF; ++e) {
    exponent_form.start.push_back(e << 23);
    exponent_form.value.push_back(e == 0xFF ? 255 : int32_t(e) - 8);
  }
  const auto r = sweep_runs(exponent_form,
                            [](uint32_t i) { return e8m0_from_amax(f32(i), ScalingMode::kFloor); });
  EXPECT_EQ(r.mismatches, 1u);
  EXPECT_EQ(r.first, 0x047FFFFFu);
  EXPECT_EQ(r.got, 1);
}

// ---- §2 steps 4-6: the e4m3 cast of every bf16 value times every reciprocal ----

TEST(Exhaustive, E4m3EveryBf16TimesEveryReciprocal) {
  const auto r = sweep(
      uint64_t(1) << 24,
      [](uint64_t i) {
        const float p = mul_rn(bf16_to_f32(uint16_t(i >> 8)), e8m0_reciprocal(uint8_t(i)));
        return int64_t(e4m3_from_f32(p));
      },
      [](uint64_t i) {
        const double r = uint8_t(i) == 255 ? NAN : std::ldexp(1.0, 127 - int(uint8_t(i)));
        const float p = float(double(bf16_to_f32(uint16_t(i >> 8))) * r);  // exact, one rounding
        return int64_t(e4m3_spec(p));
      });
  EXPECT_TRUE(no_mismatch(r, "e4m3(bf16 << 8 | s)"));
}

// fp32 input (later issues) reaches e4m3_from_f32 with all 24 significant bits, so the sticky bits
// below a tie matter: random mantissas at the exponents e4m3 rounds in (2^-11 .. 2^9), and random
// patterns.
TEST(E4m3, RandomFp32Patterns) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < (1 << 23); ++trial) {
    const uint32_t focused = (rng() & 0x807FFFFFu) | uint32_t(116 + rng() % 21) << 23;
    const float p = f32(trial % 2 ? focused : uint32_t(rng()));
    ASSERT_EQ(int(e4m3_from_f32(p)), int(e4m3_spec(p))) << "p=0x" << std::hex << f32_bits(p);
  }
}

// §2 step 6 by example.
TEST(E4m3, NamedRoundings) {
  EXPECT_EQ(e4m3_from_f32(464.0f), 0x7E);  // tie between 448 and (non-existent) 480: saturates
  EXPECT_EQ(e4m3_from_f32(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_f32(-INFINITY), 0xFE);
  EXPECT_EQ(e4m3_from_f32(INFINITY), 0x7E);
  EXPECT_EQ(e4m3_from_f32(-NAN), 0x7F);
  EXPECT_EQ(e4m3_from_f32(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_f32(-1e-30f), 0x80);                // negative underflow keeps the sign
  EXPECT_EQ(e4m3_from_f32(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9: even code 0
  EXPECT_EQ(e4m3_from_f32(std::ldexp(3.0f, -10)), 0x02);  // tie between codes 1 and 2
  EXPECT_EQ(e4m3_from_f32(f32(0x3F880000)), 0x38);  // 1.0625: tie between 1 (0x38) and 1.125, even
  EXPECT_EQ(e4m3_from_f32(f32(0x3F880001)), 0x39);  // just above the tie
  EXPECT_EQ(e4m3_from_f32(f32(0x3C7FFFFF)), 0x08);  // just below 2^-6 rounds up to the min normal
}

// ---- §8 dequantize of every (q, s) ----

TEST(Dequantize, EveryCodeAndScale) {
  for (int s = 0; s < 256; ++s) {
    for (int q = 0; q < 256; ++q) {
      const uint16_t got = dequantize_element(uint8_t(q), uint8_t(s));
      if (s == 255 || (q & 0x7F) == 0x7F) {  // NaN scale or data: the canonical bf16 NaN
        ASSERT_EQ(got, 0x7FC0) << "q=0x" << std::hex << q << " s=" << std::dec << s;
        continue;
      }
      const double value = (q & 0x80 ? -1 : 1) * e4m3_spec_value(q & 0x7F);
      // Exact in double, then rounded to fp32 (exact here), then to bf16.
      const uint16_t want = bf16_spec(float(std::ldexp(value, s - 127)));
      ASSERT_EQ(got, want) << "q=0x" << std::hex << q << " s=" << std::dec << s;
    }
  }
}

// The GPU's two-at-a-time route (numerics.h dequantize_pair_exact) against dequantize_element: every
// pair of non-NaN codes at every scale it takes, and the boundaries of that scale range (the
// hardware's fp16 conversion is checked on the GPU by GpuDequantizeAllPairs).
TEST(Dequantize, PairRouteEveryCodePairAndScale) {
  for (int q = 0; q < 256; ++q) {  // the fp16 twin of every code is its exact value
    if ((q & 0x7F) == 0x7F) continue;
    ASSERT_EQ(f16_to_f32(f16_from_e4m3(uint8_t(q))), e4m3_to_f32(uint8_t(q))) << "q=" << q;
  }
  for (int s = kDequantExactScaleMin; s <= kDequantExactScaleMax; ++s) {
    for (int lo = 0; lo < 256; ++lo) {
      for (int hi = 0; hi < 256; ++hi) {
        if ((lo & 0x7F) == 0x7F || (hi & 0x7F) == 0x7F) continue;
        const uint32_t f16x2 = f16_from_e4m3(uint8_t(lo)) | uint32_t(f16_from_e4m3(uint8_t(hi)))
                                                                << 16;
        const uint32_t want = dequantize_element(uint8_t(lo), uint8_t(s)) |
                              uint32_t(dequantize_element(uint8_t(hi), uint8_t(s))) << 16;
        ASSERT_EQ(dequantize_pair_exact(f16x2, uint8_t(s)), want)
            << "lo=0x" << std::hex << lo << " hi=0x" << hi << std::dec << " s=" << s;
      }
    }
  }
  // Just outside the range, the route would be wrong (a product rounds or overflows), which is why
  // the kernel takes the element route there.
  EXPECT_FALSE(dequantize_is_exact(kDequantExactScaleMin - 1));
  EXPECT_FALSE(dequantize_is_exact(kDequantExactScaleMax + 1));
  EXPECT_NE(dequantize_element(0x7E, kDequantExactScaleMax + 1),
            dequantize_pair_exact(f16_from_e4m3(0x7E), kDequantExactScaleMax + 1) & 0xFFFF);
  EXPECT_NE(dequantize_element(0x01, kDequantExactScaleMin - 6),
            dequantize_pair_exact(f16_from_e4m3(0x01), kDequantExactScaleMin - 6) & 0xFFFF);
}

TEST(Dequantize, NanCodeDetection) {
  for (int b = 0; b < 256; ++b) {
    for (int pos = 0; pos < 4; ++pos) {
      const uint32_t w = (0x38383838u & ~(0xFFu << (8 * pos))) | uint32_t(b) << (8 * pos);
      EXPECT_EQ(has_e4m3_nan(w), (b & 0x7F) == 0x7F) << "byte 0x" << std::hex << b << " at " << pos;
    }
  }
}

}  // namespace
}  // namespace mxq::test
