// The combine stage's CPU reference (mxq::ref::combine and ref::combine_score_grad, mxq.h
// CombineParams) against naive models written here from the contract, byte for byte: combine sums
// each token's routed rows in increasing routed row into bf16 from +0 (each row scaled and rounded
// first when scale is given), combine_score_grad sums 32 lanes of 8-element chunks then an xor
// butterfly, every product and sum rounded on its own. Routings of top_k 1 to 32 (duplicate expert
// choices, any permutation, shared dest), D a multiple of 8 but not of 256, adversarial values; a
// few sums worked by hand; the argument checks (exact messages, nothing written); T = 0.
#include <cmath>
#include <functional>
#include <limits>

#include "combine_util.h"

namespace mxq::test {
namespace {

// ---- the models ----

// combine as mxq.h states it: out[t] = +0; for each routed row r of token t in increasing r,
// out[t] = bf16(fl32(out[t]) + fl32(g)), g = y[dest[r]] or bf16(fl32(y[dest[r]]) * scale[r]).
std::vector<uint16_t> model_combine(const CombineProblem& p, bool scaled) {
  std::vector<uint16_t> out(static_cast<size_t>(p.T * p.D), 0x0000);
  for (int64_t t = 0; t < p.T; ++t) {
    std::vector<int32_t> rows;
    for (int64_t j = 0; j < p.top_k; ++j) rows.push_back(p.token_rows[size_t(t * p.top_k + j)]);
    std::sort(rows.begin(), rows.end());
    uint16_t* acc = out.data() + t * p.D;
    for (const int32_t r : rows) {
      const uint16_t* src = p.y.data() + int64_t(p.dest[size_t(r)]) * p.D;
      for (int64_t d = 0; d < p.D; ++d) {
        uint16_t g = src[d];
        if (scaled) {
          volatile float product = bf16_to_f32(g) * p.scale[size_t(r)];
          g = bf16_from_f32(product);
        }
        volatile float sum = bf16_to_f32(acc[d]) + bf16_to_f32(g);
        acc[d] = bf16_from_f32(sum);
      }
    }
  }
  return out;
}

// One score in the documented order: lane l (of 32) sums its chunks c = l, l + 32, ... (8 elements
// each, in element order) from +0, acc = acc + a·b with the product rounded on its own; then for
// off = 16, 8, 4, 2, 1 every lane at once v[l] = v[l] + v[l ^ off]; the result is lane 0's, a NaN
// as the canonical 0x7FC00000.
float model_dot(const uint16_t* a, const uint16_t* b, int64_t D) {
  float v[32];
  for (int64_t l = 0; l < 32; ++l) {
    volatile float acc = 0.0f;
    for (int64_t c = l; c < D / 8; c += 32) {
      for (int64_t e = 0; e < 8; ++e) {
        volatile float product = bf16_to_f32(a[c * 8 + e]) * bf16_to_f32(b[c * 8 + e]);
        acc = acc + product;
      }
    }
    v[l] = acc;
  }
  for (int off = 16; off >= 1; off /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) {
      volatile float sum = v[l] + v[l ^ off];
      next[l] = sum;
    }
    std::memcpy(v, next, sizeof v);
  }
  return std::isnan(v[0]) ? f32_from_bits(0x7FC00000u) : v[0];
}

std::vector<float> model_score_grad(const CombineProblem& p) {
  std::vector<float> out(static_cast<size_t>(p.T * p.top_k));
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t r = p.token_rows[size_t(t * p.top_k + j)];
      out[size_t(t * p.top_k + j)] =
          model_dot(p.dout.data() + t * p.D, p.y.data() + int64_t(p.dest[size_t(r)]) * p.D, p.D);
    }
  }
  return out;
}

// ---- random problems against the models ----

struct RefCase {
  CombineRouting routing;
  CombineValues values;
  bool scaled;
  int64_t T, top_k, D;
};

std::string ref_case_string(const RefCase& c) {
  return combine_problem_string(c.routing, c.values, c.scaled, c.T, c.top_k, c.D);
}
void PrintTo(const RefCase& c, std::ostream* os) { *os << ref_case_string(c); }
std::string ref_case_name(const ::testing::TestParamInfo<RefCase>& info) {
  return ref_case_string(info.param);
}

std::vector<RefCase> ref_cases() {
  std::vector<RefCase> cases;
  for (CombineRouting r : {CombineRouting::kRouter, CombineRouting::kDuplicates,
                           CombineRouting::kPermutation, CombineRouting::kSharedDest}) {
    for (CombineValues v : {CombineValues::kNormal, CombineValues::kWide, CombineValues::kSpecial,
                            CombineValues::kNearMax}) {
      for (bool scaled : {false, true}) {
        for (int64_t k : {1, 2, 8, 32}) cases.push_back({r, v, scaled, 45, k, 136});
      }
    }
  }
  // One chunk; 33 chunks (chunk 32 back on lane 0); 513 chunks; more tokens; a single token.
  cases.push_back({CombineRouting::kDuplicates, CombineValues::kSpecial, true, 33, 2, 8});
  cases.push_back({CombineRouting::kRouter, CombineValues::kSpecial, true, 300, 8, 264});
  cases.push_back({CombineRouting::kPermutation, CombineValues::kWide, false, 7, 32, 4104});
  cases.push_back({CombineRouting::kSharedDest, CombineValues::kNearMax, true, 20, 8, 2048});
  cases.push_back({CombineRouting::kRouter, CombineValues::kNormal, false, 1, 1, 16});
  return cases;
}

uint64_t case_seed(const RefCase& c) { return std::hash<std::string>{}(ref_case_string(c)); }

class CombineReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(CombineReference, EqualsTheModel) {
  const RefCase& c = GetParam();
  const CombineProblem p =
      make_combine_problem(c.routing, c.values, c.scaled, c.T, c.top_k, c.D, case_seed(c));
  const std::vector<uint16_t> want = model_combine(p, c.scaled);
  const std::vector<uint16_t> got = reference_combine(p);
  EXPECT_TRUE(bytes_equal(raw_bytes(got), raw_bytes(want), 2 * c.D, "combine"));
  // The planted tokens reach the edges they are there for (unscaled: the factors may tame them).
  if (c.values == CombineValues::kSpecial && !c.scaled && c.top_k > 1 &&
      c.routing != CombineRouting::kSharedDest) {
    EXPECT_TRUE(std::count(got.begin(), got.end(), kBf16Inf) > 0) << "no sum overflowed";
    EXPECT_TRUE(std::count(got.begin(), got.end(), kBf16CanonicalNan) > 0) << "no NaN";
  }
  // NaNs come out canonical, and no sum is -0 (the accumulation starts at +0).
  for (const uint16_t v : got) {
    ASSERT_FALSE((v & kBf16AbsMask) > kBf16Inf && v != kBf16CanonicalNan) << std::hex << v;
    ASSERT_NE(v, 0x8000);
  }
}

TEST_P(CombineReference, ScoreGradEqualsTheModel) {
  const RefCase& c = GetParam();
  const CombineProblem p =
      make_combine_problem(c.routing, c.values, c.scaled, c.T, c.top_k, c.D, case_seed(c));
  const std::vector<float> want = model_score_grad(p);
  const std::vector<float> got = reference_score_grad(p);
  if (c.values == CombineValues::kNormal) {  // no NaN possible: every bit
    EXPECT_TRUE(bytes_equal(raw_bytes(got), raw_bytes(want), 4 * c.top_k, "combine_score_grad"));
  } else {
    EXPECT_TRUE(same_scores(raw_bytes(got), raw_bytes(want), c.top_k, "combine_score_grad"));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CombineReference, ::testing::ValuesIn(ref_cases()), ref_case_name);

// ---- sums worked by hand ----

// One token, rows r0 = 1, r1 = 256, r2 = -256 (bf16 keeps 8 significant bits: 257 is a tie that
// rounds to 256), token_rows naming them out of order: increasing r gives (1 + 256) - 256 = +0;
// token_rows' order would give (-256 + 1) + 256 = 1.
TEST(CombineReferenceSums, InIncreasingRoutedRow) {
  CombineProblem p;
  p.T = 1;
  p.top_k = 3;
  p.D = 8;
  p.Mp = 4;
  p.dest = {3, 0, 2};  // r -> padded row
  p.token_rows = {2, 0, 1};
  p.y.assign(size_t(p.Mp * p.D), 0x7FFF);
  std::fill_n(p.y.begin() + 3 * 8, 8, uint16_t(0x3F80));  // r0: 1
  std::fill_n(p.y.begin() + 0 * 8, 8, uint16_t(0x4380));  // r1: 256
  std::fill_n(p.y.begin() + 2 * 8, 8, uint16_t(0xC380));  // r2: -256
  EXPECT_EQ(reference_combine(p), std::vector<uint16_t>(8, 0x0000));
  // Scaled: bf16(1 * 3) = 3; 3 + 256 = 259 ties to 260; 260 - 256 = 4.
  p.scale = {3.0f, 1.0f, 1.0f};
  EXPECT_EQ(reference_combine(p), std::vector<uint16_t>(8, 0x4080));
  // Each scaled row is rounded to bf16 before it is added: rows 256, 1 (factor 1 + 2^-10), -256.
  // bf16(1.0009765625) = 1, and 256 + 1 = 257 ties to 256: +0. (Adding the fp32 product would give
  // 257.0009765625, rounded up to 258: 2.)
  std::fill_n(p.y.begin() + 3 * 8, 8, uint16_t(0x4380));  // r0: 256
  std::fill_n(p.y.begin() + 0 * 8, 8, uint16_t(0x3F80));  // r1: 1
  p.scale = {1.0f, 0x1.004p+0f, 1.0f};
  EXPECT_EQ(reference_combine(p), std::vector<uint16_t>(8, 0x0000));
}

// top_k = 1 unscaled: each token's row itself, but +0 + -0 = +0 and every NaN canonical.
TEST(CombineReferenceSums, OneRowIsItsRowFromPositiveZero) {
  const CombineProblem p = make_combine_problem(CombineRouting::kPermutation,
                                                CombineValues::kSpecial, false, 200, 1, 72, 11);
  const std::vector<uint16_t> got = reference_combine(p);
  int64_t negative_zeros = 0, nans = 0;
  for (int64_t t = 0; t < p.T; ++t) {
    for (int64_t d = 0; d < p.D; ++d) {
      uint16_t v = p.y[size_t(int64_t(p.dest[size_t(p.token_rows[size_t(t)])]) * p.D + d)];
      if (v == 0x8000) v = 0x0000, ++negative_zeros;
      if ((v & kBf16AbsMask) > kBf16Inf) v = kBf16CanonicalNan, ++nans;
      ASSERT_EQ(got[size_t(t * p.D + d)], v) << "token " << t << " column " << d;
    }
  }
  EXPECT_GT(negative_zeros, 0);
  EXPECT_GT(nans, 0);
}

// combine_score_grad's order, with 1s lost against 2^24 (fp32 keeps 24 bits) wherever they meet it.
TEST(CombineReferenceSums, ScoreGradLanesThenButterfly) {
  const auto score = [](const std::vector<uint16_t>& y_row) {
    CombineProblem p;
    p.T = 1;
    p.top_k = 1;
    p.D = int64_t(y_row.size());
    p.Mp = 1;
    p.dest = {0};
    p.token_rows = {0};
    p.y = y_row;
    p.dout.assign(y_row.size(), 0x3F80);  // 1
    return reference_score_grad(p)[0];
  };
  const uint16_t k2p24 = 0x4B80, kOne = 0x3F80;
  // Two chunks: lane 0 sums 2^24 and seven 1s in order (each lost), lane 1 sums eight 1s; the
  // butterfly adds the two: 2^24 + 8.
  std::vector<uint16_t> y(16, kOne);
  y[0] = k2p24;
  EXPECT_EQ(score(y), 16777224.0f);
  // 33 chunks: chunk 32 (eight 1s) is lane 0's again, after 2^24: all lost. 2^24.
  y.assign(264, 0);
  y[0] = k2p24;
  std::fill_n(y.begin() + 256, 8, kOne);
  EXPECT_EQ(score(y), 16777216.0f);
  // Nine chunks: 2^24 on lane 0, a 1 on lanes 1 to 8. The butterfly: off 16 nothing; off 8 lane 0
  // loses lane 8's 1; off 4 lane 0 loses lane 4's 1, lanes 1-3 become 2; off 2 lane 0 gets lane
  // 2's 2, lane 1 becomes 4; off 1 lane 0 gets 4: 2^24 + 6. (In lane order: 2^24.)
  y.assign(72, 0);
  y[0] = k2p24;
  for (int c = 1; c <= 8; ++c) y[size_t(8 * c)] = kOne;
  EXPECT_EQ(score(y), 16777222.0f);
  // Exact small sums: 1·1 + 2·2 + ... over one chunk.
  y = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100};  // 1 .. 8
  EXPECT_EQ(score(y), 36.0f);
}

// ---- the argument checks ----

// throws_error (test_util.h) on exactly `message`, or (prefix) on its start: an address follows.
::testing::AssertionResult throws_message(const std::function<void()>& f, const std::string& op,
                                          const std::string& message, bool prefix = false) {
  return throws_error(f, op, exact(message) + (prefix ? ".*" : ""));
}

// A small valid problem (T = 10, top_k = 4, N = 40, D = 16) and both outputs, poisoned.
struct Call {
  CombineProblem p =
      make_combine_problem(CombineRouting::kRouter, CombineValues::kNormal, true, 10, 4, 16, 5);
  std::vector<uint16_t> out = std::vector<uint16_t>(size_t(p.T * p.D), kPoisonBf16);
  std::vector<float> scores = std::vector<float>(size_t(p.N()), f32_from_bits(kPoisonF32));
  CombineParams combine() { return p.params(out.data(), false); }
  CombineParams score_grad() { return p.params(scores.data(), true); }
  ::testing::AssertionResult untouched() const {
    if (!std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == kPoisonBf16; })) {
      return ::testing::AssertionFailure() << "combine's out was written";
    }
    if (!std::all_of(scores.begin(), scores.end(),
                     [](float v) { return f32_bits(v) == kPoisonF32; })) {
      return ::testing::AssertionFailure() << "combine_score_grad's out was written";
    }
    return ::testing::AssertionSuccess();
  }
};

constexpr const char* kRefCombine = "mxq::ref::combine";
constexpr const char* kRefScoreGrad = "mxq::ref::combine_score_grad";

// Both reference entry points refuse `edit` of a valid call with `message`, and write nothing.
void expect_both_refuse(const std::function<void(CombineParams&)>& edit, const std::string& message,
                        bool prefix = false) {
  Call c;
  CombineParams a = c.combine(), b = c.score_grad();
  edit(a);
  edit(b);
  EXPECT_TRUE(throws_message([&] { ref::combine(a); }, kRefCombine, message, prefix));
  EXPECT_TRUE(throws_message([&] { ref::combine_score_grad(b); }, kRefScoreGrad, message, prefix));
  EXPECT_TRUE(c.untouched()) << message;
}

template <typename T>
const T* misaligned(const T* ptr) {  // 2 bytes past a valid pointer
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(ptr) + 2);
}

TEST(CombineReferenceErrors, Sizes) {
  expect_both_refuse([](CombineParams& p) { p.top_k = 0; }, "top_k must be in [1, 32], got 0");
  expect_both_refuse([](CombineParams& p) { p.top_k = 33, p.N = p.T * 33; },
                     "top_k must be in [1, 32], got 33");
  expect_both_refuse([](CombineParams& p) { p.N = 39; },
                     "N (routed rows) must be T*top_k = 40, got 39");
  expect_both_refuse([](CombineParams& p) { p.N = 41; },
                     "N (routed rows) must be T*top_k = 40, got 41");
  for (int64_t D : {12, 4, 130, -8}) {
    expect_both_refuse(
        [D](CombineParams& p) { p.D = D; },
        "D (columns of y) must be a multiple of 8 in [0, 2^31-1], got " + std::to_string(D));
  }
  expect_both_refuse([](CombineParams& p) { p.T = -1, p.N = -4; },
                     "T (tokens) must be in [0, 2^31-1], got -1");
  expect_both_refuse([](CombineParams& p) { p.Mp = -1; },
                     "Mp (rows of y) must be in [0, 2^31-1], got -1");
  expect_both_refuse([](CombineParams& p) { p.Mp = 0; },
                     "y has no rows (Mp = 0) but T = 10 tokens read it");
}

TEST(CombineReferenceErrors, Pointers) {
  expect_both_refuse([](CombineParams& p) { p.y = nullptr; }, "y is null");
  expect_both_refuse([](CombineParams& p) { p.dest = nullptr; }, "dest is null");
  expect_both_refuse([](CombineParams& p) { p.token_rows = nullptr; }, "token_rows is null");
  expect_both_refuse([](CombineParams& p) { p.out = nullptr; }, "out is null");
  expect_both_refuse([](CombineParams& p) { p.y = misaligned(static_cast<const uint16_t*>(p.y)); },
                     "y must be 16-byte aligned, got address 0x", true);
  expect_both_refuse([](CombineParams& p) { p.dest = misaligned(p.dest); },
                     "dest must be 4-byte aligned, got address 0x", true);
  expect_both_refuse([](CombineParams& p) { p.token_rows = misaligned(p.token_rows); },
                     "token_rows must be 4-byte aligned, got address 0x", true);
  int32_t status_words[2] = {0x5A5A5A5A, 0x5A5A5A5A};
  int32_t* odd_status = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(status_words) + 2);
  expect_both_refuse([&](CombineParams& p) { p.status = odd_status; },
                     "status must be 4-byte aligned, got address 0x", true);
  // combine's bf16 rows are stored 16 bytes at a time, the scores 4.
  Call c;
  CombineParams a = c.combine();
  a.out = static_cast<uint16_t*>(a.out) + 4;
  EXPECT_TRUE(throws_message([&] { ref::combine(a); }, kRefCombine,
                             "out must be 16-byte aligned, got address 0x", true));
  a = c.combine();
  a.scale = misaligned(a.scale);
  EXPECT_TRUE(throws_message([&] { ref::combine(a); }, kRefCombine,
                             "scale must be 4-byte aligned, got address 0x", true));
  CombineParams b = c.score_grad();
  std::vector<float> scores(c.scores.size() + 1);
  b.out = scores.data() + 1;  // 4-byte aligned: fine for the scores
  EXPECT_NO_THROW(ref::combine_score_grad(b));
  b = c.score_grad();
  b.out = reinterpret_cast<char*>(b.out) + 2;
  EXPECT_TRUE(throws_message([&] { ref::combine_score_grad(b); }, kRefScoreGrad,
                             "out must be 4-byte aligned, got address 0x", true));
}

TEST(CombineReferenceErrors, ScoreGradInputs) {
  Call c;
  CombineParams b = c.score_grad();
  b.scale = c.p.scale.data();
  EXPECT_TRUE(throws_message([&] { ref::combine_score_grad(b); }, kRefScoreGrad,
                             "scale is combine's input; combine_score_grad computes the scores' "
                             "gradient"));
  b = c.score_grad();
  b.dout = nullptr;
  EXPECT_TRUE(
      throws_message([&] { ref::combine_score_grad(b); }, kRefScoreGrad,
                     "dout is null (combine_score_grad reads the output's gradient, (T, D) bf16)"));
  b = c.score_grad();
  b.dout = misaligned(static_cast<const uint16_t*>(b.dout));
  EXPECT_TRUE(throws_message([&] { ref::combine_score_grad(b); }, kRefScoreGrad,
                             "dout must be 16-byte aligned, got address 0x", true));
  EXPECT_TRUE(c.untouched());
  // combine reads no dout: a null or odd one is ignored.
  CombineParams a = c.combine();
  a.dout = misaligned(c.p.dout.data());
  EXPECT_NO_THROW(ref::combine(a));
}

// An index out of range: the reference throws (the GPU skips the row and sets the status bit),
// before anything is written.
TEST(CombineReferenceErrors, IndexOutOfRange) {
  const int64_t N = 40;
  for (const int32_t bad : {int32_t(N), int32_t(-1), std::numeric_limits<int32_t>::max(),
                            std::numeric_limits<int32_t>::min()}) {
    expect_both_refuse(
        [bad](CombineParams& p) { const_cast<int32_t*>(p.token_rows)[3 * 4 + 1] = bad; },
        "token_rows[3, 1] = " + std::to_string(bad) + " is outside [0, N=40)");
  }
  Call c;
  const int64_t Mp = c.p.Mp;
  const int32_t r = c.p.token_rows[7 * 4 + 2];
  for (const int64_t bad : {Mp, int64_t(-1), Mp + 1000}) {
    expect_both_refuse(
        [r, bad](CombineParams& p) { const_cast<int32_t*>(p.dest)[r] = int32_t(bad); },
        "dest[" + std::to_string(r) + "] = " + std::to_string(bad) +
            " is outside [0, Mp=" + std::to_string(Mp) + ")");
  }
  // A dest entry that no token names is never read.
  Call unread;
  unread.p.token_rows[0] = unread.p.token_rows[1];  // routed row token_rows[0] is named no more
  const int32_t orphan = Call().p.token_rows[0];
  unread.p.dest[size_t(orphan)] = -7;
  EXPECT_NO_THROW(ref::combine(unread.combine()));
  EXPECT_NO_THROW(ref::combine_score_grad(unread.score_grad()));
}

// ---- no tokens, no columns ----

TEST(CombineReferenceEmpty, NoTokensWritesOnlyTheStatus) {
  for (bool scores : {false, true}) {
    CombineParams p;
    p.T = 0;
    p.N = 0;
    p.top_k = 8;
    p.D = 2048;
    p.Mp = 0;  // every pointer null
    int32_t status = 0x5A5A5A5A;
    p.status = &status;
    if (scores) {
      EXPECT_NO_THROW(ref::combine_score_grad(p));
    } else {
      EXPECT_NO_THROW(ref::combine(p));
    }
    EXPECT_EQ(status, 0) << "scores " << scores;
    // With buffers: nothing written.
    std::vector<uint16_t> y(64 * 8, 0x3F80), dout(8, 0x3F80), out(8, kPoisonBf16);
    std::vector<int32_t> dest(1, 0), rows(1, 0);
    p.y = y.data();
    p.Mp = 64;
    p.D = 8;
    p.dest = dest.data();
    p.token_rows = rows.data();
    p.dout = scores ? dout.data() : nullptr;
    p.out = out.data();
    status = 0x5A5A5A5A;
    EXPECT_NO_THROW(scores ? ref::combine_score_grad(p) : ref::combine(p));
    EXPECT_EQ(status, 0);
    EXPECT_EQ(out, std::vector<uint16_t>(8, kPoisonBf16));
  }
  // The size rules hold at T = 0 too.
  CombineParams p;
  p.T = 0;
  p.N = 0;
  p.top_k = 0;
  EXPECT_TRUE(
      throws_message([&] { ref::combine(p); }, kRefCombine, "top_k must be in [1, 32], got 0"));
  p.top_k = 1;
  p.N = 1;
  EXPECT_TRUE(throws_message([&] { ref::combine(p); }, kRefCombine,
                             "N (routed rows) must be T*top_k = 0, got 1"));
}

// D = 0: combine has no bytes to write; each score is an empty sum, +0. y and dout may be null.
TEST(CombineReferenceEmpty, NoColumns) {
  Call c;
  CombineParams a = c.combine(), b = c.score_grad();
  a.D = b.D = 0;
  a.y = b.y = b.dout = nullptr;
  int32_t status = -1;
  a.status = b.status = &status;
  EXPECT_NO_THROW(ref::combine(a));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(c.out, std::vector<uint16_t>(c.out.size(), kPoisonBf16));
  status = -1;
  EXPECT_NO_THROW(ref::combine_score_grad(b));
  EXPECT_EQ(status, 0);
  for (const float v : c.scores) EXPECT_EQ(f32_bits(v), 0u);
}

// ---- the GPU entry points: the same checks, before any device is needed ----

TEST(CombineEntryPoints, CheckArgumentsFirst) {
  Call c;
  CombineParams a = c.combine(), b = c.score_grad();
  a.top_k = b.top_k = 33;
  EXPECT_TRUE(
      throws_message([&] { combine(a); }, "mxq::combine", "top_k must be in [1, 32], got 33"));
  EXPECT_TRUE(throws_message([&] { combine_score_grad(b); }, "mxq::combine_score_grad",
                             "top_k must be in [1, 32], got 33"));
  a = c.combine();
  a.D = 12;
  EXPECT_TRUE(throws_message([&] { combine(a); }, "mxq::combine",
                             "D (columns of y) must be a multiple of 8 in [0, 2^31-1], got 12"));
  b = c.score_grad();
  b.scale = c.p.scale.data();
  EXPECT_TRUE(throws_message([&] { combine_score_grad(b); }, "mxq::combine_score_grad",
                             "scale is combine's input; combine_score_grad computes the scores' "
                             "gradient"));
  b = c.score_grad();
  b.dout = nullptr;
  EXPECT_TRUE(
      throws_message([&] { combine_score_grad(b); }, "mxq::combine_score_grad",
                     "dout is null (combine_score_grad reads the output's gradient, (T, D) bf16)"));
  // T = 0 without a status word: nothing to do, no device needed.
  CombineParams empty;
  empty.top_k = 4;
  EXPECT_NO_THROW(combine(empty));
  EXPECT_NO_THROW(combine_score_grad(empty));
  EXPECT_TRUE(c.untouched());
  // Valid arguments without a usable device (or CUDA): refused as a missing capability.
  if (gpu_available()) GTEST_SKIP() << "a device is present: the GPU suite runs the kernels";
  for (const bool scores : {false, true}) {
    try {
      scores ? combine_score_grad(c.score_grad()) : combine(c.combine());
      ADD_FAILURE() << "accepted valid arguments without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kUnsupported) << e.what();
      EXPECT_EQ(
          std::string(e.what()).rfind(scores ? "mxq::combine_score_grad: " : "mxq::combine: ", 0),
          0u)
          << e.what();
    }
  }
  EXPECT_TRUE(c.untouched());
}

}  // namespace
}  // namespace mxq::test
