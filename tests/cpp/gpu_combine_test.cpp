// mxq::combine and mxq::combine_score_grad on the device (a warp per token) against
// mxq::ref::combine and ref::combine_score_grad, raw bytes: the outputs poisoned first (two
// different poisons, so an element nobody writes fails), guard bands around every buffer, the
// inputs unchanged, the status word 0; shapes up to 4096 tokens of 7168 columns, top_k 1, 2, 8 and
// 32, router-like, duplicate-choice, permutation and shared-dest routings, adversarial values and
// factors. Bad device-side input: a token_rows or dest entry out of range sets kIndexOutOfRange and
// the row contributes nothing (the reference of the same problem with that row reading zeros; its
// score is +0). T = 0 writes the status word and nothing else.
//
// The scores are compared bit for bit except that any NaN equals any NaN (combine_util.h
// same_scores: the fp32 sums' NaNs are not canonicalized, and the CPU's and the GPU's differ).
#include <limits>

#include "combine_util.h"
#include "gpu_util.h"

namespace mxq::test {
namespace {

// One problem's buffers on the device; `scores` picks the entry point.
struct DeviceCombine {
  Stream stream;
  GuardedBuffer y, dest, token_rows, scale, dout, out, status;
  CombineParams params;
  const CombineProblem* host;
  bool scores;

  DeviceCombine(const CombineProblem& p, bool scores_) : host(&p), scores(scores_) {
    y = GuardedBuffer("y", p.y.size() * 2);
    y.upload(p.y.data(), stream.get());
    dest = GuardedBuffer("dest", p.dest.size() * 4);
    dest.upload(p.dest.data(), stream.get());
    token_rows = GuardedBuffer("token_rows", p.token_rows.size() * 4);
    token_rows.upload(p.token_rows.data(), stream.get());
    if (!scores && !p.scale.empty()) {
      scale = GuardedBuffer("scale", p.scale.size() * 4);
      scale.upload(p.scale.data(), stream.get());
    }
    if (scores) {
      dout = GuardedBuffer("dout", p.dout.size() * 2);
      dout.upload(p.dout.data(), stream.get());
    }
    out = GuardedBuffer("out", size_t(scores ? p.T * p.top_k * 4 : p.T * p.D * 2));
    status = GuardedBuffer("status", 4);
    params.y = y.data();
    params.Mp = p.Mp;
    params.D = p.D;
    params.dest = dest.as<int32_t>();
    params.N = p.N();
    params.token_rows = token_rows.as<int32_t>();
    params.T = p.T;
    params.top_k = p.top_k;
    params.scale = scale.as<float>();
    params.dout = dout.data();
    params.out = out.data();
    params.status = status.as<int32_t>();
    params.stream = stream.get();
  }

  // Poisons out and the status word, runs the entry point, hands back out's bytes.
  std::vector<uint8_t> run(uint8_t poison = kPoison) {
    out.fill(poison, stream.get());
    status.fill(0xFF, stream.get());
    if (scores) {
      combine_score_grad(params);
    } else {
      combine(params);
    }
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    MXQ_TEST_CUDA(cudaGetLastError());
    return out.download(stream.get());
  }

  int32_t read_status() {
    const std::vector<uint8_t> s = status.download(stream.get());
    int32_t v;
    std::memcpy(&v, s.data(), 4);
    return v;
  }

  // Guard bands intact and the inputs as uploaded.
  ::testing::AssertionResult nothing_outside() {
    for (GuardedBuffer* b : {&y, &dest, &token_rows, &scale, &dout, &out, &status}) {
      auto r = b->guards_intact(stream.get());
      if (!r) return r;
    }
    const std::vector<std::pair<const GuardedBuffer*, std::vector<uint8_t>>> inputs = {
        {&y, raw_bytes(host->y)},
        {&dest, raw_bytes(host->dest)},
        {&token_rows, raw_bytes(host->token_rows)},
        {&scale, scale.allocated() ? raw_bytes(host->scale) : std::vector<uint8_t>()},
        {&dout, dout.allocated() ? raw_bytes(host->dout) : std::vector<uint8_t>()}};
    for (const auto& [b, bytes] : inputs) {
      if (!b->allocated()) continue;
      auto r = b->holds(bytes, stream.get());
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
};

struct GpuCase {
  CombineRouting routing;
  CombineValues values;
  bool scaled;
  int64_t T, top_k, D;
};

std::string gpu_case_string(const GpuCase& c) {
  return combine_problem_string(c.routing, c.values, c.scaled, c.T, c.top_k, c.D);
}
void PrintTo(const GpuCase& c, std::ostream* os) { *os << gpu_case_string(c); }
std::string gpu_case_name(const ::testing::TestParamInfo<GpuCase>& info) {
  return gpu_case_string(info.param);
}

std::vector<GpuCase> gpu_cases() {
  using R = CombineRouting;
  using V = CombineValues;
  return {
      // The MoE layer's shapes: top_k 8 of DeepSeek-V3's 7168 columns, and 2048.
      {R::kRouter, V::kNormal, true, 4096, 8, 7168},
      {R::kRouter, V::kSpecial, false, 4096, 8, 2048},
      {R::kDuplicates, V::kSpecial, true, 1000, 8, 2048},
      {R::kPermutation, V::kWide, true, 777, 8, 7168},
      // top_k 1 and 32 (every lane of the warp holds a routed row), 2.
      {R::kRouter, V::kWide, true, 2048, 1, 7168},
      {R::kRouter, V::kSpecial, false, 513, 1, 2048},
      {R::kPermutation, V::kSpecial, true, 257, 32, 2048},
      {R::kDuplicates, V::kNormal, false, 129, 32, 7168},
      {R::kSharedDest, V::kNearMax, true, 100, 32, 2048},
      {R::kDuplicates, V::kSpecial, true, 300, 2, 2048},
      // D not a multiple of 256: lanes past the last chunk idle (17 chunks), chunks wrapping
      // unevenly (513); one chunk; a lone token; a CTA's worth of warps and one more.
      {R::kPermutation, V::kSpecial, true, 333, 8, 136},
      {R::kSharedDest, V::kWide, false, 45, 8, 4104},
      {R::kRouter, V::kSpecial, true, 64, 4, 8},
      {R::kRouter, V::kSpecial, true, 1, 8, 2048},
      {R::kPermutation, V::kNormal, false, 9, 8, 2048},
  };
}

class GpuCombine : public GpuTestWithParam<GpuCase> {};

TEST_P(GpuCombine, MatchesReference) {
  const GpuCase& c = GetParam();
  const CombineProblem p =
      make_combine_problem(c.routing, c.values, c.scaled, c.T, c.top_k, c.D, test_seed());
  const std::vector<uint8_t> want = raw_bytes(reference_combine(p));
  DeviceCombine dev(p, /*scores=*/false);
  for (const uint8_t poison : {kPoison, uint8_t(0xFF)}) {  // 0xFFFF: a NaN mxq never writes
    EXPECT_TRUE(same_bytes(dev.run(poison), want, 2 * c.D, "combine"))
        << "poison 0x" << std::hex << int(poison);
    EXPECT_EQ(dev.read_status(), 0);
  }
  EXPECT_TRUE(dev.nothing_outside());
}

TEST_P(GpuCombine, ScoreGradMatchesReference) {
  const GpuCase& c = GetParam();
  const CombineProblem p =
      make_combine_problem(c.routing, c.values, c.scaled, c.T, c.top_k, c.D, test_seed());
  const std::vector<uint8_t> want = raw_bytes(reference_score_grad(p));
  DeviceCombine dev(p, /*scores=*/true);
  for (const uint8_t poison : {kPoison, uint8_t(0xFF)}) {  // 0xFFFFFFFF: a NaN
    const std::vector<uint8_t> got = dev.run(poison);
    if (c.values == CombineValues::kNormal) {  // no NaN possible: every bit
      EXPECT_TRUE(same_bytes(got, want, 4 * c.top_k, "combine_score_grad"))
          << "poison 0x" << std::hex << int(poison);
    } else {
      EXPECT_TRUE(same_scores(got, want, c.top_k, "combine_score_grad"))
          << "poison 0x" << std::hex << int(poison);
    }
    EXPECT_EQ(dev.read_status(), 0);
  }
  EXPECT_TRUE(dev.nothing_outside());
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuCombine, ::testing::ValuesIn(gpu_cases()), gpu_case_name);

// ---- bad device-side input: the status bit, and the row contributes nothing ----

class GpuCombineBadInput : public GpuTest {};

// (t, j): token t's j-th routed row; through dest: dest[token_rows[t, j]] is set to `value`, else
// token_rows[t, j] itself.
struct BadEntry {
  int64_t t, j;
  bool through_dest;
  int32_t value;
};

TEST_F(GpuCombineBadInput, OutOfRangeRowsContributeNothing) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  for (const int64_t top_k : {int64_t(8), int64_t(1), int64_t(32)}) {
    for (const bool scaled : {true, false}) {
      const int64_t T = 70, D = 264;
      const CombineProblem p =
          make_combine_problem(CombineRouting::kRouter, CombineValues::kSpecial, scaled, T, top_k,
                               D, test_seed(uint64_t(top_k) * 2 + scaled));
      const int32_t N = int32_t(p.N()), Mp = int32_t(p.Mp);
      std::vector<BadEntry> bad = {{3, 0, false, N},       {10, 0, false, -1}, {20, 0, false, kMax},
                                   {30, 0, true, Mp},      {40, 0, true, -5},  {61, 0, true, kMin},
                                   {67, 0, false, N + 100}};
      if (top_k > 1) {
        bad.push_back({3, top_k - 1, true, Mp + 1});  // two in one token
        bad.push_back({20, top_k / 2, false, -100});
      }
      for (int64_t j = 0; j < top_k; ++j) {  // token 50: every row out of range
        bad.push_back({50, j, j % 2 == 1, j % 2 ? Mp + int32_t(j) : N + int32_t(j)});
      }
      // The bad problem, and the reference's stand-in: y with a zero row at Mp, each bad entry's
      // routed row reading it with factor 1 (+0 added to a sum that is never -0 changes nothing).
      CombineProblem broken = p, zeroed = p;
      zeroed.Mp = p.Mp + 1;
      zeroed.y.resize(size_t(zeroed.Mp * D), 0x0000);
      std::vector<float> want_scores = reference_score_grad(p);
      for (const BadEntry& e : bad) {
        const size_t flat = size_t(e.t * top_k + e.j);
        const int32_t r = p.token_rows[flat];
        if (e.through_dest) {
          broken.dest[size_t(r)] = e.value;
        } else {
          broken.token_rows[flat] = e.value;
        }
        zeroed.dest[size_t(r)] = Mp;
        if (scaled) zeroed.scale[size_t(r)] = 1.0f;
        want_scores[flat] = 0.0f;
      }
      const std::string at = "top_k " + std::to_string(top_k) + (scaled ? " scaled" : "");

      DeviceCombine tokens(broken, /*scores=*/false);
      EXPECT_TRUE(same_bytes(tokens.run(), raw_bytes(reference_combine(zeroed)), 2 * D, "combine"))
          << at;
      EXPECT_EQ(tokens.read_status(), kIndexOutOfRange) << at;
      EXPECT_THROW(check_status(tokens.params.status, tokens.stream.get()), Error) << at;
      EXPECT_TRUE(tokens.nothing_outside()) << at;

      DeviceCombine scores(broken, /*scores=*/true);
      EXPECT_TRUE(same_scores(scores.run(), raw_bytes(want_scores), top_k, "combine_score_grad"))
          << at;
      EXPECT_EQ(scores.read_status(), kIndexOutOfRange) << at;
      EXPECT_TRUE(scores.nothing_outside()) << at;

      // The reference refuses the same problem.
      std::vector<uint16_t> host_out(size_t(T * D));
      EXPECT_THROW(ref::combine(broken.params(host_out.data(), false)), Error);
    }
  }
}

// T = 0: the status word is written 0 (on every call), nothing else; without one, nothing at all.
TEST_F(GpuCombineBadInput, NoTokensWritesOnlyTheStatus) {
  Stream stream;
  GuardedBuffer y("y", 64 * 2048 * 2), out("out", 16), status("status", 4);
  y.fill(0, stream.get());
  for (const bool scores : {false, true}) {
    CombineParams p;
    p.y = y.data();
    p.Mp = 64;
    p.D = 2048;
    p.T = 0;
    p.N = 0;
    p.top_k = 8;
    p.out = out.data();
    p.status = status.as<int32_t>();
    p.stream = stream.get();
    out.fill(kPoison, stream.get());
    status.fill(0xFF, stream.get());
    if (scores) {
      combine_score_grad(p);
    } else {
      combine(p);
    }
    MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
    const std::vector<uint8_t> word = status.download(stream.get());
    int32_t v;
    std::memcpy(&v, word.data(), 4);
    EXPECT_EQ(v, 0) << "scores " << scores;
    EXPECT_TRUE(out.all_bytes_are(kPoison, stream.get())) << "scores " << scores;
    // No status word: nothing to do (every pointer may be null).
    CombineParams bare;
    bare.top_k = 8;
    bare.D = 2048;
    EXPECT_NO_THROW(scores ? combine_score_grad(bare) : combine(bare));
    for (const GuardedBuffer* b : {&y, &out, &status}) EXPECT_TRUE(b->guards_intact(stream.get()));
  }
}

}  // namespace
}  // namespace mxq::test
