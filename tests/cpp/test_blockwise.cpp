// FP8 blockwise on the CPU (docs/numerics.md §13): the two scalar rules checked exhaustively against
// their from-spec formulas in fp64; the reference (mxq::ref) against a test-side model written from
// the spec — its own e4m3 table, its own rules in double, its own placement formulas (strides (1,
// outer) for the activation factors, the padded tile rows of the weight factors) — byte for byte on
// every output, poisoned before each call; the special-value blocks; grouped = dense; routed =
// quantize(hand-built padded tensor, offs_p); the weights' transpose identities; dequantize; and
// the new refusals, message for message.
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>

#include "../../src/common/parallel.h"
#include "test_util.h"

namespace mxq::test {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr int kB = 128;  // the FP8 blockwise block, written here on its own

// ---- (a) the scalar rules, exhaustively ----

// Every non-negative finite fp32 pattern u: calls check(u) on 2^31 - 2^23 values in parallel and
// reports the count of failures and the first.
::testing::AssertionResult for_every_finite(const std::function<bool(uint32_t)>& check) {
  constexpr int64_t kEnd = 0x7F800000;  // +Inf: the first non-finite pattern
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> first{kEnd};
  detail::parallel_for(kEnd, [&](int64_t begin, int64_t end) {
    int64_t local = 0;
    int64_t local_first = kEnd;
    for (int64_t u = begin; u < end; ++u) {
      if (!check(static_cast<uint32_t>(u))) {
        if (local == 0) local_first = u;
        ++local;
      }
    }
    failures += local;
    int64_t seen = first.load();
    while (local_first < seen && !first.compare_exchange_weak(seen, local_first)) {
    }
  });
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures.load() << " patterns fail, the first 0x" << std::hex << first.load();
}

TEST(BlockwiseScalar, Fp32MultiplierIsTheFp64QuotientRoundedOnceForEveryFiniteAmax) {
  // The spec's formula: m = fl32(448 / max(amax, 1e-12)) with the division in fp64.
  EXPECT_TRUE(for_every_finite([](uint32_t u) {
    const float amax = f32_from_bits(u);
    const double clamped = std::max(static_cast<double>(amax), static_cast<double>(1e-12f));
    const auto want = static_cast<float>(448.0 / clamped);
    return f32_bits(blockwise_multiplier(amax, ScalingMode::kFp32)) == f32_bits(want);
  }));
  EXPECT_EQ(kBlockwiseAmaxFloor, f32_bits(1e-12f));
}

TEST(BlockwiseScalar, FactorIsTheFp64ReciprocalRoundedOnceForEveryFiniteMultiplier) {
  EXPECT_TRUE(for_every_finite([](uint32_t u) {
    const float m = f32_from_bits(u);
    const auto want = static_cast<float>(1.0 / static_cast<double>(m));
    return f32_bits(blockwise_factor(m)) == f32_bits(want);
  }));
}

TEST(BlockwiseScalar, RceilFactorIsExactlyTwoToTheSMinus127) {
  for (int s = 0; s <= 254; ++s) {
    const float m = e8m0_reciprocal(static_cast<uint8_t>(s));
    const auto want = static_cast<float>(std::ldexp(1.0, s - 127));
    EXPECT_EQ(f32_bits(blockwise_factor(m)), f32_bits(want)) << "s=" << s;
    EXPECT_EQ(static_cast<double>(m) * static_cast<double>(want), 1.0) << "s=" << s;
  }
  // blockwise_multiplier(kRceil) is the multiplier of §2 for the block's RCEIL byte.
  for (const float amax : {0.0f, 1e-40f, 1e-12f, 1.0f, 448.0f, 449.0f, 65504.0f, 3.0e38f}) {
    EXPECT_EQ(f32_bits(blockwise_multiplier(amax, ScalingMode::kRceil)),
              f32_bits(e8m0_reciprocal(e8m0_from_amax(amax, ScalingMode::kRceil))))
        << amax;
  }
}

// ---- the test-side model of §13, in double, with its own e4m3 table ----

// The value of a non-negative e4m3 (float8_e4m3fn) code 0x00..0x7E, from the format's definition:
// 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (mantissa * 2^-9).
double e4m3_value(int code) {
  const int e = (code >> 3) & 15, mantissa = code & 7;
  return e == 0 ? std::ldexp(mantissa, -9) : std::ldexp(1.0 + mantissa / 8.0, e - 7);
}

// e4m3 of a finite p: the nearest code, ties to the even code (= even mantissa), |p| >= 448 -> 448,
// the sign kept (so -0 and negative values rounding to 0 give 0x80).
uint8_t model_e4m3(double p) {
  static const std::vector<double> table = [] {  // ascending: codes 0x00..0x7E
    std::vector<double> t;
    for (int code = 0; code <= 0x7E; ++code) t.push_back(e4m3_value(code));
    return t;
  }();
  const uint8_t sign = std::signbit(p) ? 0x80 : 0x00;
  const double a = std::fabs(p);
  if (a >= 448.0) return sign | 0x7E;
  // The two neighbours of a: hi the first code not below it, lo the one before.
  const int hi = static_cast<int>(std::lower_bound(table.begin(), table.end(), a) - table.begin());
  if (hi == 0 || table[hi] == a) return static_cast<uint8_t>(sign | hi);
  const int lo = hi - 1;
  const double below = a - table[lo], above = table[hi] - a;
  const int code = below < above ? lo : (above < below ? hi : (lo % 2 == 0 ? lo : hi));
  return static_cast<uint8_t>(sign | code);
}

TEST(BlockwiseModel, E4m3TableAgreesWithTheLibrarysDecoder) {  // the model's own sanity
  for (int code = 0; code <= 0x7E; ++code) {
    EXPECT_EQ(e4m3_value(code), static_cast<double>(e4m3_to_f32(static_cast<uint8_t>(code))));
  }
  EXPECT_EQ(e4m3_value(0x7E), 448.0);
  EXPECT_EQ(model_e4m3(-0.0), 0x80);
  EXPECT_EQ(model_e4m3(1000.0), 0x7E);
  EXPECT_EQ(model_e4m3(-1e-9), 0x80);
  // The neighbour search equals the plain nearest-code scan (ties to the even code) on every
  // midpoint, every code and points between.
  const auto scan = [](double a) {
    int best = 0;
    for (int code = 1; code <= 0x7E; ++code) {
      const double d_new = std::fabs(a - e4m3_value(code)),
                   d_best = std::fabs(a - e4m3_value(best));
      if (d_new < d_best || (d_new == d_best && code % 2 == 0)) best = code;
    }
    return best;
  };
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = e4m3_value(code), hi = e4m3_value(code + 1);
    for (const double a : {lo, (lo + hi) / 2, lo + (hi - lo) / 3, hi - (hi - lo) / 3}) {
      EXPECT_EQ(model_e4m3(a), scan(a)) << a;
    }
  }
}

struct ModelBlock {
  uint32_t d_bits = 0;
  Bytes q;
};

// One block (any length) of values already widened (exact doubles of the input's values).
ModelBlock model_block(const std::vector<double>& v, ScalingMode mode) {
  ModelBlock out;
  out.q.resize(v.size());
  double amax = 0.0;
  bool finite = true;
  for (const double x : v) {
    finite = finite && std::isfinite(x);
    amax = std::max(amax, std::fabs(x));
  }
  if (!finite) {  // NaN or Inf anywhere: d NaN, every byte 0x7F
    out.d_bits = 0x7FC00000u;
    std::fill(out.q.begin(), out.q.end(), uint8_t(0x7F));
    return out;
  }
  float m;
  if (mode == ScalingMode::kFp32) {  // m = fl32(448 / max(amax, fl32(1e-12))), fp64 division
    m = static_cast<float>(448.0 / std::max(amax, static_cast<double>(1e-12f)));
  } else {  // RCEIL: t = fl32(amax * fl32(1/448)) rounded up to a power of two, at least 2^-127
    const auto t = static_cast<double>(static_cast<float>(amax * static_cast<float>(1.0 / 448.0)));
    double d = std::ldexp(1.0, -127);
    while (d < t) d *= 2.0;
    m = static_cast<float>(1.0 / d);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    // The fp32 product rounded once: the double product of two fp32 values is exact.
    out.q[i] = model_e4m3(static_cast<double>(static_cast<float>(v[i] * m)));
  }
  out.d_bits = f32_bits(static_cast<float>(1.0 / static_cast<double>(m)));
  return out;
}

// ---- inputs: fp32 values exactly representable in the dtype, and their bytes ----

float to_dtype(float v, DType t) {  // the value the dtype holds (the tests keep only exact ones)
  if (t == DType::kBFloat16) return bf16_to_f32(bf16_from_f32(v));
  if (t == DType::kFloat16) return f16_to_f32(f16_from_f32(v));
  return v;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, DType t, uint64_t seed, bool wide) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int lo = t == DType::kFloat16 ? -26 : (t == DType::kFloat32 ? -150 : -135);
  const int hi = t == DType::kFloat16 ? 15 : 126;
  std::uniform_int_distribution<int> exponent(lo, hi);
  for (auto& v : x) v = to_dtype(wide ? std::ldexp(uniform(rng), exponent(rng)) : normal(rng), t);
  return x;
}

Bytes floats_as_bytes(const std::vector<float>& f) {
  Bytes b(f.size() * 4);
  if (!f.empty()) std::memcpy(b.data(), f.data(), b.size());
  return b;
}
Bytes bits_as_bytes(const std::vector<uint32_t>& f) {
  Bytes b(f.size() * 4);
  if (!f.empty()) std::memcpy(b.data(), f.data(), b.size());
  return b;
}

// The four outputs of x (M, K) by the model: q_row (M, K); d_row[m, j] at float j*M + m; q_col
// (K, M) with q_col[k, m] = q(x[m, k]) of its 128x1 block; d_col[k, i] at float i*K + k.
struct Outputs {
  Bytes q_row, s_row, q_col, s_col;
};

Outputs model_quantize(const std::vector<float>& x, int64_t M, int64_t K, ScalingMode mode) {
  Outputs o;
  o.q_row.resize(static_cast<size_t>(M * K));
  o.q_col.resize(static_cast<size_t>(M * K));
  std::vector<uint32_t> d_row(static_cast<size_t>(M * K / kB)), d_col(d_row.size());
  std::vector<double> v(kB);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < K / kB; ++j) {
      for (int i = 0; i < kB; ++i) v[i] = x[static_cast<size_t>(m * K + j * kB + i)];
      const ModelBlock b = model_block(v, mode);
      for (int i = 0; i < kB; ++i) o.q_row[static_cast<size_t>(m * K + j * kB + i)] = b.q[i];
      d_row[static_cast<size_t>(j * M + m)] = b.d_bits;
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t i = 0; i < M / kB; ++i) {
      for (int r = 0; r < kB; ++r) v[r] = x[static_cast<size_t>((i * kB + r) * K + k)];
      const ModelBlock b = model_block(v, mode);
      for (int r = 0; r < kB; ++r) o.q_col[static_cast<size_t>(k * M + i * kB + r)] = b.q[r];
      d_col[static_cast<size_t>(i * K + k)] = b.d_bits;
    }
  }
  o.s_row = bits_as_bytes(d_row);
  o.s_col = bits_as_bytes(d_col);
  return o;
}

// ref::quantize of FP8 blockwise into poisoned buffers (0xA5) of exactly the contract's sizes.
Outputs ref_quantize(const std::vector<float>& x, int64_t M, int64_t K, DType t, ScalingMode mode,
                     const std::vector<int32_t>* offs = nullptr, bool rowwise = true,
                     bool colwise = true) {
  const Bytes in = encode_as(x, t);
  Outputs o;
  if (rowwise) {
    o.q_row.assign(static_cast<size_t>(M * K), kPoison);
    o.s_row.assign(static_cast<size_t>(M * (K / kB) * 4), kPoison);
  }
  if (colwise) {
    o.q_col.assign(static_cast<size_t>(M * K), kPoison);
    o.s_col.assign(static_cast<size_t>(K * (M / kB) * 4), kPoison);
  }
  int32_t status = -7;
  QuantizeParams p;
  p.x = in.data();
  p.dtype = t;
  p.M = M;
  p.K = K;
  p.format = Format::kFp8Blockwise;
  p.scaling_mode = mode;
  if (offs != nullptr) {
    p.offs = offs->data();
    p.num_groups = static_cast<int64_t>(offs->size());
    p.status = &status;
  }
  if (rowwise) {
    p.q_row = o.q_row.data();
    p.s_row = o.s_row.data();
  }
  if (colwise) {
    p.q_col = o.q_col.data();
    p.s_col = o.s_col.data();
  }
  ref::quantize(p);
  if (offs != nullptr) EXPECT_EQ(status, 0);
  return o;
}

void expect_outputs_equal(const Outputs& got, const Outputs& want, int64_t M, int64_t K,
                          const std::string& what) {
  if (!got.q_row.empty()) {
    EXPECT_TRUE(bytes_equal(got.q_row, want.q_row, K, what + " q_row"));
    EXPECT_TRUE(bytes_equal(got.s_row, want.s_row, M * 4, what + " s_row (column j of d_row)"));
  }
  if (!got.q_col.empty()) {
    EXPECT_TRUE(bytes_equal(got.q_col, want.q_col, M, what + " q_col"));
    EXPECT_TRUE(bytes_equal(got.s_col, want.s_col, K * 4, what + " s_col (column i of d_col)"));
  }
}

const DType kDTypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};
const ScalingMode kModes[] = {ScalingMode::kFp32, ScalingMode::kRceil};

// ---- (b) the special-value blocks, byte for byte ----

struct Special {
  const char* name;
  std::vector<float> block;  // 128 values
};

std::vector<float> filled(float v) { return std::vector<float>(kB, v); }
std::vector<float> ramp(float scale) {  // +-scale * (i+1)/128, alternating signs
  std::vector<float> b(kB);
  for (int i = 0; i < kB; ++i) b[i] = (i % 2 ? -scale : scale) * static_cast<float>(i + 1) / kB;
  return b;
}
std::vector<float> with(std::vector<float> b, int at, float v) {
  b[static_cast<size_t>(at)] = v;
  return b;
}

// A block where fl32(amax * m) > 448 for the fp32 rule (m rounded up): its largest value saturates.
std::vector<float> saturating_block() {
  for (float a = 1.0f; a < 2.0f; a = std::nextafter(a, 2.0f)) {
    const float m = blockwise_multiplier(a, ScalingMode::kFp32);
    if (static_cast<double>(a) * m > 448.0 &&
        static_cast<float>(static_cast<double>(a) * m) > 448.0f) {
      return with(ramp(1.0f), 5, a);
    }
  }
  return {};
}

std::vector<Special> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float rceil_edge = 448.0f;  // amax/448 = 1: RCEIL's boundary, fp32's m = 1
  return {
      {"zeros", filled(0.0f)},
      {"neg_zeros", with(filled(-0.0f), 3, 1.0f)},
      {"ones", filled(1.0f)},
      {"mixed_sign", ramp(3.0f)},
      {"amax_448", with(ramp(100.0f), 9, rceil_edge)},
      {"amax_448_next_up", with(ramp(100.0f), 9, std::nextafter(rceil_edge, 1e9f))},
      {"amax_448_next_down", with(ramp(100.0f), 9, std::nextafter(rceil_edge, 0.0f))},
      {"amax_448_times_2pow_20", with(ramp(1e6f), 0, std::ldexp(448.0f, 20))},
      {"amax_448_times_2pow_minus_20", with(ramp(1e-7f), 0, std::ldexp(448.0f, -20))},
      {"subnormal_fp32", filled(1e-40f)},
      {"below_the_floor", with(with(filled(1e-40f), 1, 1e-13f), 2, -3e-13f)},
      {"fp16_max", with(ramp(1000.0f), 7, 65504.0f)},
      {"fp16_min_subnormal", with(filled(0.0f), 4, std::ldexp(1.0f, -24))},
      {"bf16_max", with(ramp(1e30f), 11, bf16_to_f32(0x7F7F))},
      {"fp32_max", with(ramp(1e30f), 11, std::numeric_limits<float>::max())},
      {"nan_first", with(ramp(2.0f), 0, nan)},
      {"nan_last", with(ramp(2.0f), kB - 1, nan)},
      {"inf_middle", with(ramp(2.0f), 77, inf)},
      {"neg_inf", with(ramp(2.0f), 31, -inf)},
      {"saturates", saturating_block()},
  };
}

// The block as row 0 and as column 0 of a 128x128 x (the rest a ramp): rowwise bytes of row 0
// with d_row[0, 0], colwise bytes of q_col row 0 with d_col[0, 0], all other blocks too.
TEST(BlockwiseSpecial, EveryBlockByteExactOnBothAxesEveryDTypeEveryMode) {
  for (const Special& s : specials()) {
    ASSERT_EQ(s.block.size(), size_t(kB)) << s.name;
    for (const DType t : kDTypes) {
      bool exact = true;
      for (const float v : s.block) {
        exact = exact && (std::isnan(v) || f32_bits(to_dtype(v, t)) == f32_bits(v));
      }
      if (!exact) continue;  // not a value of this dtype
      std::vector<float> x(kB * kB);
      for (int r = 0; r < kB; ++r) {
        for (int c = 0; c < kB; ++c) x[r * kB + c] = to_dtype(float((r * 7 + c) % 13) - 6.f, t);
      }
      for (int i = 0; i < kB; ++i) x[i] = x[i * kB] = s.block[i];
      x[0] = s.block[0];
      for (const ScalingMode mode : kModes) {
        const std::string what = std::string(s.name) + " " + to_string(t) + " " + to_string(mode);
        const Outputs got = ref_quantize(x, kB, kB, t, mode);
        expect_outputs_equal(got, model_quantize(x, kB, kB, mode), kB, kB, what);
        // The spec's own statements about this block, beyond the model.
        std::vector<double> v(s.block.begin(), s.block.end());
        const ModelBlock b = model_block(v, mode);
        uint32_t d_row0 = 0;
        std::memcpy(&d_row0, got.s_row.data(), 4);
        EXPECT_EQ(d_row0, b.d_bits) << what;
        EXPECT_TRUE(bytes_equal(Bytes(got.q_row.begin(), got.q_row.begin() + kB), b.q, kB, what));
      }
    }
  }
}

TEST(BlockwiseSpecial, TheSpecsStatementsHold) {
  const auto block = [](const std::vector<float>& v, ScalingMode mode, Bytes* q) {
    q->assign(kB, kPoison);
    return f32_bits(quantize_blockwise_block_f32(v.data(), kB, mode, q->data()));
  };
  Bytes q;
  // All zero: m = fl32(448e12), d = fl32(1 / m), data 0.
  EXPECT_EQ(block(filled(0.0f), ScalingMode::kFp32, &q),
            f32_bits(static_cast<float>(1.0 / static_cast<double>(static_cast<float>(448e12)))));
  EXPECT_EQ(q, Bytes(kB, 0x00));
  EXPECT_EQ(block(filled(0.0f), ScalingMode::kRceil, &q), 0x00400000u);  // 2^-127
  EXPECT_EQ(q, Bytes(kB, 0x00));
  // NaN / Inf anywhere: d NaN (0x7FC00000), every byte 0x7F, under both rules.
  for (const ScalingMode mode : kModes) {
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      EXPECT_EQ(block(with(ramp(5.0f), 64, bad), mode, &q), kBlockwiseFactorNan);
      EXPECT_EQ(q, Bytes(kB, 0x7F));
    }
  }
  // amax 448 exactly: m = 1, d = 1, and 448 -> 0x7E, -448 -> 0xFE; -0 -> 0x80.
  std::vector<float> v = with(with(filled(-0.0f), 0, 448.0f), 1, -448.0f);
  for (const ScalingMode mode : kModes) {
    EXPECT_EQ(block(v, mode, &q), f32_bits(1.0f));
    EXPECT_EQ(q[0], 0x7E);
    EXPECT_EQ(q[1], 0xFE);
    EXPECT_EQ(q[2], 0x80);
  }
  // A product above 448 saturates to 448 (0x7E), never NaN.
  const std::vector<float> sat = saturating_block();
  ASSERT_FALSE(sat.empty());
  block(sat, ScalingMode::kFp32, &q);
  EXPECT_EQ(q[5], 0x7E);
}

// ---- (c) whole matrices, layouts, grouped, routed, weights, dequantize ----

TEST(BlockwiseReference, WholeMatricesEqualTheModelByteForByte) {
  const int64_t M = 384, K = 256;
  uint64_t seed = 1;
  for (const DType t : kDTypes) {
    for (const bool wide : {false, true}) {
      const std::vector<float> x = random_matrix(M, K, t, seed++, wide);
      for (const ScalingMode mode : kModes) {
        const std::string what =
            std::string(to_string(t)) + (wide ? " wide " : " normal ") + to_string(mode);
        const Outputs want = model_quantize(x, M, K, mode);
        expect_outputs_equal(ref_quantize(x, M, K, t, mode), want, M, K, what);
        // One axis at a time gives the same bytes.
        expect_outputs_equal(ref_quantize(x, M, K, t, mode, nullptr, true, false), want, M, K,
                             what + " rowwise only");
        expect_outputs_equal(ref_quantize(x, M, K, t, mode, nullptr, false, true), want, M, K,
                             what + " colwise only");
      }
    }
  }
}

// Each block's factor a distinct power of two, so a misplaced factor cannot hide: d_row[m, j] at
// float j*M + m (strides (1, M)), d_col[k, i] at float i*K + k (strides (1, K)).
TEST(BlockwiseReference, FactorsLieOuterFastest) {
  const int64_t M = 256, K = 384;
  std::vector<float> x(static_cast<size_t>(M * K), 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < K / kB; ++j) {  // rowwise block (m, j): amax 448 * 2^e, e = m%50 + j
      x[static_cast<size_t>(m * K + j * kB + (m % kB))] =
          std::ldexp(448.0f, static_cast<int>(m % 50 + 3 * j) - 40);
    }
  }
  const Outputs got = ref_quantize(x, M, K, DType::kFloat32, ScalingMode::kFp32);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < K / kB; ++j) {
      float d = 0;
      std::memcpy(&d, got.s_row.data() + 4 * (j * M + m), 4);
      EXPECT_EQ(d, std::ldexp(1.0f, static_cast<int>(m % 50 + 3 * j) - 40)) << m << ", " << j;
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t i = 0; i < M / kB; ++i) {
      double amax = 0;
      for (int r = 0; r < kB; ++r) amax = std::max(amax, double(x[size_t((i * kB + r) * K + k)]));
      float d = 0;
      std::memcpy(&d, got.s_col.data() + 4 * (i * K + k), 4);
      const float want = amax == 0 ? static_cast<float>(1.0 / double(float(448e12))) : amax / 448;
      EXPECT_EQ(d, want) << k << ", " << i;
    }
  }
  // layout.h's formulas say the same.
  EXPECT_EQ(factor_offset(5, 2, M), 2 * M + 5);
  EXPECT_EQ(factor_shape<int64_t>(M, K).rows, M);
  EXPECT_EQ(factor_shape<int64_t>(M, K).cols, K / kB);
}

TEST(BlockwiseReference, GroupedEqualsDenseAndChecksOffsAt128) {
  const int64_t M = 640, K = 256;
  const std::vector<float> x = random_matrix(M, K, DType::kBFloat16, 11, false);
  for (const ScalingMode mode : kModes) {
    const Outputs dense = ref_quantize(x, M, K, DType::kBFloat16, mode);
    for (const std::vector<int32_t>& offs :
         {std::vector<int32_t>{128, 128, 384}, std::vector<int32_t>{640}, std::vector<int32_t>{0},
          std::vector<int32_t>{256, 512, 640, 640}}) {
      expect_outputs_equal(ref_quantize(x, M, K, DType::kBFloat16, mode, &offs), dense, M, K,
                           "grouped");
    }
  }
  const Bytes in = encode_as(x, DType::kBFloat16);
  const auto refused = [&](std::vector<int32_t> offs, const std::string& message) {
    Bytes q(static_cast<size_t>(M * K), kPoison), s(static_cast<size_t>(M * K / kB * 4), kPoison);
    QuantizeParams p;
    p.x = in.data();
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = ScalingMode::kFp32;
    p.offs = offs.data();
    p.num_groups = static_cast<int64_t>(offs.size());
    p.q_row = q.data();
    p.s_row = s.data();
    try {
      ref::quantize(p);
      ADD_FAILURE() << "accepted offs for " << message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "mxq::ref::quantize: " + message);
    }
    EXPECT_EQ(q, Bytes(q.size(), kPoison)) << "written before refusing: " << message;
    EXPECT_EQ(s, Bytes(s.size(), kPoison)) << "written before refusing: " << message;
  };
  refused({96}, "offs[0]=96 is not a multiple of 128 (group sizes must be)");
  refused({128, 160}, "offs[1]=160 is not a multiple of 128 (group sizes must be)");
  refused({256, 128}, "offs must be non-decreasing, got offs[1]=128 after offs[0]=256");
  refused({768}, "offs[0]=768 exceeds M=640");
  // The synchronizing checker takes the format's block too.
  const std::vector<int32_t> at128 = {128, 384}, at32 = {128, 160};
  EXPECT_NO_THROW(validate_offs_host(at128.data(), 2, M, Format::kFp8Blockwise));
  EXPECT_NO_THROW(validate_offs_host(at32.data(), 2, M));  // MXFP8's 32 by default
  try {
    validate_offs_host(at32.data(), 2, M, Format::kFp8Blockwise);
    ADD_FAILURE() << "validate_offs_host took a group end of 160 for FP8 blockwise";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "mxq::validate_offs: offs[1]=160 is not a multiple of 128 (group sizes must be)");
  }
}

// Routed rows: a hand-built padded tensor (groups padded to 128, Mp = roundup(N + 127E, 128)) with
// the gate scale applied as a separate multiply, quantized with offs_p, equals quantize_routed.
TEST(BlockwiseReference, RoutedEqualsQuantizeOfTheHandBuiltPaddedTensor) {
  const int64_t T = 5, K = 256, E = 3;
  const std::vector<int32_t> index = {4, 0, 2, 2, 1};  // expert 0: rows 4, 0; expert 2: 2, 2, 1
  const std::vector<int32_t> counts = {2, 0, 3};
  const std::vector<float> scale = {0.5f, 1.25f, -2.0f, 3.0f, 0.1f};
  const int64_t N = 5;
  const int64_t Mp = (N + 127 * E + 127) / 128 * 128;
  ASSERT_EQ(Mp, 512);  // roundup(386, 128): the tail rows 256..511 are zero
  const std::vector<int32_t> want_offs = {128, 128, 256};
  const std::vector<int32_t> want_dest = {0, 1, 128, 129, 130};
  for (const DType t : kDTypes) {
    const std::vector<float> x = random_matrix(T, K, t, 21, false);
    std::vector<float> padded(static_cast<size_t>(Mp * K), 0.0f);
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t k = 0; k < K; ++k) {  // the product rounded to x's dtype once
        padded[static_cast<size_t>(want_dest[r] * K + k)] =
            to_dtype(x[static_cast<size_t>(index[r] * K + k)] * scale[r], t);
      }
    }
    for (const ScalingMode mode : kModes) {
      const Outputs want = ref_quantize(padded, Mp, K, t, mode, &want_offs);
      expect_outputs_equal(want, model_quantize(padded, Mp, K, mode), Mp, K, "padded");
      const Bytes in = encode_as(x, t);
      Outputs got;
      got.q_row.assign(static_cast<size_t>(Mp * K), kPoison);
      got.s_row.assign(static_cast<size_t>(Mp * K / kB * 4), kPoison);
      got.q_col.assign(static_cast<size_t>(Mp * K), kPoison);
      got.s_col.assign(static_cast<size_t>(Mp * K / kB * 4), kPoison);
      std::vector<int32_t> offs_p(E, -1), dest(N, -1);
      QuantizeRoutedParams p;
      p.x = in.data();
      p.dtype = t;
      p.T = T;
      p.K = K;
      p.index = index.data();
      p.N = N;
      p.counts = counts.data();
      p.num_experts = E;
      p.scale = scale.data();
      p.format = Format::kFp8Blockwise;
      p.scaling_mode = mode;
      p.q_row = got.q_row.data();
      p.s_row = got.s_row.data();
      p.q_col = got.q_col.data();
      p.s_col = got.s_col.data();
      p.offs_p = offs_p.data();
      p.dest = dest.data();
      ref::quantize_routed(p);
      expect_outputs_equal(got, want, Mp, K, std::string("routed ") + to_string(t));
      EXPECT_EQ(offs_p, want_offs);
      EXPECT_EQ(dest, want_dest);
    }
  }
  EXPECT_EQ(quantize_routed_workspace_bytes(100, 3, Format::kFp8Blockwise), 512 * 8);
  EXPECT_EQ(quantize_routed_workspace_bytes(100, 3), (padded_rows<int64_t>(100, 3)) * 8);
}

// Weights (G, N, K) in 128x128 tiles: the model's tile bytes in q_row (G, N, K) and, transposed,
// q_col (G, K, N); the tile factor at s_row[g][tn * roundup(K/128, 4) + tk] and s_col[g][tk *
// roundup(N/128, 4) + tn], every padding factor 0.
TEST(BlockwiseReference, WeightTilesBothLayoutsPaddingZero) {
  struct Shape {
    int64_t G, N, K;
  };
  for (const Shape sh : {Shape{1, 256, 384}, Shape{2, 384, 128}, Shape{3, 128, 640}}) {
    const int64_t G = sh.G, N = sh.N, K = sh.K;
    const int64_t kr = (K / kB + 3) / 4 * 4, nr = (N / kB + 3) / 4 * 4;
    for (const DType t : kDTypes) {
      std::vector<float> w = random_matrix(G * N, K, t, 31 + G, true);
      w[static_cast<size_t>(K + 3)] = std::numeric_limits<float>::quiet_NaN();  // tile (0, 0, 0)
      const Bytes in = encode_as(w, t);
      for (const ScalingMode mode : kModes) {
        Bytes want_qr(static_cast<size_t>(G * N * K)), want_qc(want_qr.size());
        std::vector<uint32_t> want_sr(static_cast<size_t>(G * (N / kB) * kr), 0);
        std::vector<uint32_t> want_sc(static_cast<size_t>(G * (K / kB) * nr), 0);
        std::vector<double> v(kB * kB);
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t tn = 0; tn < N / kB; ++tn) {
            for (int64_t tk = 0; tk < K / kB; ++tk) {
              for (int i = 0; i < kB; ++i) {
                for (int e = 0; e < kB; ++e) {
                  v[i * kB + e] = w[static_cast<size_t>((g * N + tn * kB + i) * K + tk * kB + e)];
                }
              }
              const ModelBlock b = model_block(v, mode);
              for (int i = 0; i < kB; ++i) {
                for (int e = 0; e < kB; ++e) {
                  const int64_t n = tn * kB + i, k = tk * kB + e;
                  want_qr[static_cast<size_t>((g * N + n) * K + k)] = b.q[i * kB + e];
                  want_qc[static_cast<size_t>((g * K + k) * N + n)] = b.q[i * kB + e];
                }
              }
              want_sr[static_cast<size_t>(g * (N / kB) * kr + tn * kr + tk)] = b.d_bits;
              want_sc[static_cast<size_t>(g * (K / kB) * nr + tk * nr + tn)] = b.d_bits;
            }
          }
        }
        for (const int axes : {3, 1, 2}) {  // both, rowwise only, colwise only
          Bytes qr(want_qr.size(), kPoison), qc(want_qc.size(), kPoison);
          Bytes sr(want_sr.size() * 4, kPoison), sc(want_sc.size() * 4, kPoison);
          QuantizeWeightParams p;
          p.w = in.data();
          p.dtype = t;
          p.G = G;
          p.N = N;
          p.K = K;
          p.format = Format::kFp8Blockwise;
          p.scaling_mode = mode;
          p.scaling = WeightScaling::k128x128;
          if (axes & 1) {
            p.q_row = qr.data();
            p.s_row = sr.data();
          }
          if (axes & 2) {
            p.q_col = qc.data();
            p.s_col = sc.data();
          }
          ref::quantize_weight(p);
          const std::string what = std::to_string(G) + "x" + std::to_string(N) + "x" +
                                   std::to_string(K) + " " + to_string(t) + " " + to_string(mode) +
                                   " axes " + std::to_string(axes);
          if (axes & 1) {
            EXPECT_TRUE(bytes_equal(qr, want_qr, K, what + " q_row"));
            EXPECT_TRUE(bytes_equal(sr, bits_as_bytes(want_sr), kr * 4, what + " s_row"));
          } else {
            EXPECT_EQ(qr, Bytes(qr.size(), kPoison)) << what;
            EXPECT_EQ(sr, Bytes(sr.size(), kPoison)) << what;
          }
          if (axes & 2) {
            EXPECT_TRUE(bytes_equal(qc, want_qc, N, what + " q_col"));
            EXPECT_TRUE(bytes_equal(sc, bits_as_bytes(want_sc), nr * 4, what + " s_col"));
          } else {
            EXPECT_EQ(qc, Bytes(qc.size(), kPoison)) << what;
            EXPECT_EQ(sc, Bytes(sc.size(), kPoison)) << what;
          }
        }
        // layout.h's formulas place the same tiles.
        EXPECT_EQ(weight_factor_shape<int64_t>(G, N, K).bytes(), int64_t(want_sr.size()));
        EXPECT_EQ(weight_factor_shape<int64_t>(G, K, N).bytes(), int64_t(want_sc.size()));
        EXPECT_EQ(weight_factor_offset(G - 1, N / kB - 1, K / kB - 1, N, K),
                  (G - 1) * (N / kB) * kr + (N / kB - 1) * kr + K / kB - 1);
      }
    }
  }
}

// out = bf16(fl32(e4m3(q) * d)), d from factor_shape(rows, cols): q_row with d_row, and the (K, M)
// q_col with d_col, through the same call.
TEST(BlockwiseReference, DequantizeIsTheProductRoundedOnce) {
  const int64_t M = 256, K = 384;
  std::vector<float> x = random_matrix(M, K, DType::kFloat32, 41, true);
  x[static_cast<size_t>(7 * K + 200)] = std::numeric_limits<float>::infinity();
  for (const ScalingMode mode : kModes) {
    const Outputs o = ref_quantize(x, M, K, DType::kFloat32, mode);
    const auto check = [&](const Bytes& q, const Bytes& s, int64_t rows, int64_t cols,
                           const char* what) {
      std::vector<uint16_t> out(static_cast<size_t>(rows * cols), 0xA5A5);
      DequantizeParams p;
      p.q = q.data();
      p.scales = s.data();
      p.rows = rows;
      p.cols = cols;
      p.format = Format::kFp8Blockwise;
      p.out = out.data();
      ref::dequantize(p);
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          float d = 0;
          std::memcpy(&d, s.data() + 4 * ((c / kB) * rows + r), 4);
          const uint8_t code = q[static_cast<size_t>(r * cols + c)];
          const double value = (code & 0x7F) == 0x7F
                                   ? std::nan("")
                                   : (code & 0x80 ? -1 : 1) * e4m3_value(code & 0x7F);
          const uint16_t want = bf16_from_f32(static_cast<float>(value * d));
          bad += out[static_cast<size_t>(r * cols + c)] != want;
        }
      }
      EXPECT_EQ(bad, 0) << what << " " << to_string(mode);
    };
    check(o.q_row, o.s_row, M, K, "q_row, d_row");
    check(o.q_col, o.s_col, K, M, "q_col, d_col");
  }
}

// ---- (d) the refusals, message for message, nothing written ----

::testing::AssertionResult refuses(const std::function<void()>& f, const std::string& what,
                                   Error::Kind kind = Error::Kind::kInvalidArgument) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() != kind) {
      return ::testing::AssertionFailure() << "kind " << int(e.kind()) << ": " << e.what();
    }
    if (std::string(e.what()) != what) {
      return ::testing::AssertionFailure()
             << "\"" << e.what() << "\" instead of \"" << what << "\"";
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "did not throw: " << what;
}

struct Buffers {  // a valid FP8 blockwise quantize of a 256x256 bf16 x, host memory
  Bytes x = Bytes(256 * 256 * 2, 0);
  Bytes q_row = Bytes(256 * 256, kPoison), s_row = Bytes(256 * 2 * 4, kPoison);
  Bytes q_col = Bytes(256 * 256, kPoison), s_col = Bytes(256 * 2 * 4, kPoison);
  QuantizeParams params() {
    QuantizeParams p;
    p.x = x.data();
    p.M = 256;
    p.K = 256;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = ScalingMode::kFp32;
    p.q_row = q_row.data();
    p.s_row = s_row.data();
    p.q_col = q_col.data();
    p.s_col = s_col.data();
    return p;
  }
  bool untouched() const {
    for (const Bytes* b : {&q_row, &s_row, &q_col, &s_col}) {
      if (*b != Bytes(b->size(), kPoison)) return false;
    }
    return true;
  }
};

TEST(BlockwiseValidation, QuantizeRefusals) {
  const std::string op = "mxq::ref::quantize: ";
  const std::vector<std::pair<std::function<void(QuantizeParams&)>, std::string>> cases = {
      {[](QuantizeParams& p) { p.scaling_mode = ScalingMode::kFloor; },
       "scaling_mode must be ScalingMode::kFp32 or kRceil for format fp8_blockwise, got "
       "ScalingMode::kFloor"},
      {[](QuantizeParams& p) { p.scaling_mode = static_cast<ScalingMode>(7); },
       "scaling_mode must be ScalingMode::kFp32 or kRceil for format fp8_blockwise, got 7"},
      {[](QuantizeParams& p) {
         p.format = Format::kMxfp8;
         p.scaling_mode = ScalingMode::kFp32;
       },
       "scaling_mode must be ScalingMode::kRceil or kFloor for format mxfp8, got "
       "ScalingMode::kFp32 (a rule of format fp8_blockwise)"},
      {[](QuantizeParams& p) { p.K = 192; }, "K must be a multiple of 128, got 192"},
      {[](QuantizeParams& p) { p.M = 96; }, "M must be a multiple of 128, got 96"},
      {[](QuantizeParams& p) { p.format = static_cast<Format>(5); },
       "format must be Format::kMxfp8 or kFp8Blockwise, got 5"},
      {[](QuantizeParams& p) { p.s_row += 4; },
       "s_row must be 16-byte aligned, got address 0x[0-9a-f]+"},
      {[](QuantizeParams& p) { p.s_col = nullptr; },
       "s_col is null but q_col is set: set both or neither (a null pair skips that axis)"},
  };
  for (const auto& [edit, message] : cases) {
    Buffers b;
    QuantizeParams p = b.params();
    edit(p);
    if (message.find("0x[") != std::string::npos) {  // an address: match the start only
      try {
        ref::quantize(p);
        ADD_FAILURE() << "did not throw: " << message;
      } catch (const Error& e) {
        EXPECT_EQ(
            std::string(e.what()).rfind(op + "s_row must be 16-byte aligned, got address ", 0), 0u)
            << e.what();
      }
    } else {
      EXPECT_TRUE(refuses([&] { ref::quantize(p); }, op + message));
      EXPECT_TRUE(refuses([&] { quantize(p); }, "mxq::quantize: " + message));
    }
    EXPECT_TRUE(b.untouched()) << message;
  }
  // The composed path is MXFP8's baseline only.
  Buffers b;
  EXPECT_TRUE(refuses([&] { quantize_composed(b.params(), b.q_row.data()); },
                      "mxq::quantize_composed: the composed path (MXFP8's three-kernel baseline) "
                      "takes format Format::kMxfp8 only, got fp8_blockwise (quantize it with "
                      "mxq::quantize)"));
  EXPECT_TRUE(b.untouched());
}

// Valid FP8 blockwise arguments pass every check: the GPU entry points of a CPU build get as far
// as the device (kUnsupported); empty inputs write nothing but the status word.
TEST(BlockwiseValidation, ValidArgumentsReachTheDeviceAndEmptyInputsWriteOnlyStatus) {
  if (!gpu_available()) {
    // Valid FP8 blockwise arguments pass validation and reach the device check: a build without
    // CUDA says so, a CUDA build on a machine without a usable device says that (its driver's
    // words follow), both as kUnsupported.
#ifdef MXQ_WITH_CUDA
    const std::string no_device = "mxq::quantize: no usable CUDA device (";
#else
    const std::string no_device =
        "mxq::quantize: this build of mxq has no CUDA (nvcc was not found at configure time); the "
        "CPU reference (mxq::ref) works";
#endif
    const auto refused = [&](const QuantizeParams& p) -> ::testing::AssertionResult {
      try {
        quantize(p);
      } catch (const Error& e) {
        if (e.kind() == Error::Kind::kUnsupported &&
            std::string(e.what()).rfind(no_device, 0) == 0) {
          return ::testing::AssertionSuccess();
        }
        return ::testing::AssertionFailure() << "kind " << int(e.kind()) << ": " << e.what();
      }
      return ::testing::AssertionFailure() << "did not throw";
    };
    Buffers b;
    EXPECT_TRUE(refused(b.params()));
    QuantizeParams p = b.params();
    p.scaling_mode = ScalingMode::kRceil;
    p.q_col = nullptr;
    p.s_col = nullptr;
    EXPECT_TRUE(refused(p));
    EXPECT_TRUE(b.untouched());
  }
  for (const int64_t M : {int64_t(0), int64_t(256)}) {
    const int64_t K = 256 - M;  // one of the two is 0
    const std::vector<int32_t> offs = {0};
    int32_t status = -1;
    QuantizeParams p;
    p.M = M;
    p.K = K;
    p.format = Format::kFp8Blockwise;
    p.scaling_mode = ScalingMode::kFp32;
    p.offs = offs.data();
    p.num_groups = 1;
    p.status = &status;
    Bytes poison(16, kPoison);  // any buffer of 0 bytes: nothing may be written into it
    p.q_row = poison.data();
    p.s_row = poison.data();
    ref::quantize(p);
    EXPECT_EQ(status, 0);
    EXPECT_EQ(poison, Bytes(16, kPoison));
  }
}

TEST(BlockwiseValidation, SizeChecksTakeTheFormat) {
  const Format f = Format::kFp8Blockwise;
  EXPECT_NO_THROW(check_sizes(256, 384, -1, f));
  EXPECT_NO_THROW(check_sizes(96, 64, -1));  // MXFP8 by default
  EXPECT_TRUE(refuses([&] { check_sizes(96, 128, -1, f); },
                      "mxq::check_sizes: M must be a multiple of 128, got 96"));
  EXPECT_TRUE(refuses([&] { check_dequantize_sizes(128, 160, -1, f); },
                      "mxq::check_dequantize_sizes: cols must be a multiple of 128, got 160"));
  EXPECT_TRUE(refuses([&] { check_weight_sizes(2, 128, 64, f); },
                      "mxq::check_weight_sizes: K must be a multiple of 128, got 64"));
  EXPECT_TRUE(refuses([&] { check_routed_sizes(10, 96, 5, 2, f); },
                      "mxq::check_routed_sizes: K must be a multiple of 128, got 96"));
  EXPECT_NO_THROW(check_routed_sizes(10, 96, 5, 2));
  EXPECT_TRUE(refuses([&] { check_routed_sizes(0, 128, 2147483647 - 300, 4, f); },
                      "mxq::check_routed_sizes: the padded rows roundup(N + 127*E, 128) must be "
                      "at most 2^31-1, got 2147483904 (N=2147483347, E=4)"));
  EXPECT_EQ(parse_format("mxfp8"), Format::kMxfp8);
  EXPECT_EQ(parse_format("fp8_blockwise"), Format::kFp8Blockwise);
  EXPECT_STREQ(to_string(Format::kMxfp8), "mxfp8");
  EXPECT_STREQ(to_string(Format::kFp8Blockwise), "fp8_blockwise");
  for (const std::string bad : {"MXFP8", "fp8", "blockwise", "fp8-blockwise", "", " mxfp8"}) {
    EXPECT_TRUE(refuses(
        [&] { parse_format(bad); },
        "mxq::parse_format: format must be \"mxfp8\" or \"fp8_blockwise\", got \"" + bad + "\""));
  }
}

TEST(BlockwiseValidation, WeightAndDequantizeRefusals) {
  Bytes w(256 * 256 * 2, 0), q(256 * 256, kPoison), s(2 * 4 * 4, kPoison);
  QuantizeWeightParams p;
  p.w = w.data();
  p.G = 1;
  p.N = 256;
  p.K = 256;
  p.format = Format::kFp8Blockwise;
  p.scaling_mode = ScalingMode::kFp32;
  p.scaling = WeightScaling::k128x128;
  p.q_row = q.data();
  p.s_row = s.data();
  const std::string op = "mxq::ref::quantize_weight: ";
  QuantizeWeightParams e = p;
  e.scaling = WeightScaling::k32x32;
  EXPECT_TRUE(refuses([&] { ref::quantize_weight(e); },
                      op + "scaling must be WeightScaling::k128x128 for format fp8_blockwise, got "
                           "WeightScaling::k32x32"));
  e.scaling = WeightScaling::k1x32;
  EXPECT_TRUE(refuses([&] { ref::quantize_weight(e); },
                      op + "scaling must be WeightScaling::k128x128 for format fp8_blockwise, got "
                           "WeightScaling::k1x32"));
  e = p;
  e.format = Format::kMxfp8;
  e.scaling_mode = ScalingMode::kRceil;
  EXPECT_TRUE(refuses([&] { ref::quantize_weight(e); },
                      op + "scaling must be WeightScaling::k1x32 or k32x32 for format mxfp8, got "
                           "WeightScaling::k128x128 (the tiles of format fp8_blockwise)"));
  e = p;
  e.scaling_mode = ScalingMode::kFloor;
  EXPECT_TRUE(refuses([&] { ref::quantize_weight(e); },
                      op + "scaling_mode must be ScalingMode::kFp32 or kRceil for format "
                           "fp8_blockwise, got ScalingMode::kFloor"));
  e = p;
  e.K = 160;
  EXPECT_TRUE(
      refuses([&] { ref::quantize_weight(e); }, op + "K must be a multiple of 128, got 160"));
  EXPECT_EQ(q, Bytes(q.size(), kPoison));
  EXPECT_EQ(s, Bytes(s.size(), kPoison));

  std::vector<uint16_t> out(256 * 256, 0xA5A5);
  const std::vector<int32_t> offs = {128, 256};
  DequantizeParams d;
  d.q = q.data();
  d.scales = s.data();
  d.rows = 256;
  d.cols = 256;
  d.format = Format::kFp8Blockwise;
  d.layout = ScaleLayout::kMGroups;
  d.offs = offs.data();
  d.num_groups = 2;
  d.out = out.data();
  EXPECT_TRUE(refuses([&] { ref::dequantize(d); },
                      "mxq::ref::dequantize: format fp8_blockwise dequantizes with layout "
                      "ScaleLayout::kBlocked (a grouped tensor's factors are a slice of the dense "
                      "ones), got layout 1"));
  d.layout = ScaleLayout::kBlocked;
  EXPECT_TRUE(refuses([&] { ref::dequantize(d); },
                      "mxq::ref::dequantize: the blocked layout takes no offs"));
  d.offs = nullptr;
  d.num_groups = 0;
  d.cols = 96;
  EXPECT_TRUE(refuses([&] { ref::dequantize(d); },
                      "mxq::ref::dequantize: cols must be a multiple of 128, got 96"));
  EXPECT_EQ(out, std::vector<uint16_t>(out.size(), 0xA5A5));
}

}  // namespace
}  // namespace mxq::test
