// mxq::grouped_gemm on the device (CUTLASS's SM90 grouped GEMM) against mxq::ref::grouped_gemm,
// the emulated GEMM (docs/numerics.md §13.6). The two sum in fp32 in different orders, so the
// comparison is the tolerance §13.6 states, per output element:
//
//   |gpu - ref| <= 2^-7 |ref| + 2^-10 sum_i |a_i b_i|
//
// (the first term: the two bf16 roundings; the second: fp32 sums in another order, with the tensor
// core's own adds inside each 128-deep block). sum |a_i b_i| is the reference run on the operands'
// absolute values. A layout or offs mistake moves results by far more. The output is poisoned
// first, so an element nobody wrote fails too; the guard bands around every buffer must be intact.
// SM90 only: other devices check the refusal.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.h"

namespace mxq::test {
namespace {

bool is_sm90() {
  int device = 0, major = 0, minor = 0;
  MXQ_TEST_CUDA(cudaGetDevice(&device));
  MXQ_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MXQ_TEST_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

struct GemmCase {
  Grouping grouping;
  int64_t G;
  int64_t N;
  int64_t K;
};

std::string case_string(const GemmCase& c) {
  return std::string(to_string(c.grouping)) + "_G" + std::to_string(c.G) + "_N" +
         std::to_string(c.N) + "_K" + std::to_string(c.K);
}
void PrintTo(const GemmCase& c, std::ostream* os) { *os << case_string(c); }
std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  return case_string(info.param);
}

// G group ends, multiples of 128, of M = 128 * (G + 4) rows: random sizes, group 1 empty (G >= 3),
// the last 128 rows or more an uncovered tail.
std::vector<int32_t> offs_128(int64_t M, int64_t G, std::mt19937& rng) {
  const int64_t units = M / 128 - 1;
  std::vector<int32_t> cuts(static_cast<size_t>(G));
  for (auto& c : cuts) c = int32_t(rng() % (units + 1));
  std::sort(cuts.begin(), cuts.end());
  if (G >= 3) cuts[1] = cuts[0];
  for (auto& c : cuts) c *= 128;
  return cuts;
}

// Finite e4m3 bytes (never 0x7F / 0xFF) and factors spread over 2^-8 .. 2^8.
std::vector<uint8_t> random_e4m3(int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (auto& b : v) {
    b = uint8_t(rng());
    if ((b & 0x7F) == 0x7F) b ^= 0x01;
  }
  return v;
}
std::vector<float> random_factors(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = std::ldexp(mantissa(rng), int(rng() % 17) - 8);
  return v;
}

class GroupedGemmGpu : public GpuTestWithParam<GemmCase> {};

TEST_P(GroupedGemmGpu, MatchesTheReferenceWithinTheAccumulationTolerance) {
  if (!is_sm90())
    GTEST_SKIP() << "needs an SM90 GPU (H100, H200); RefusesOtherDevices covers this one";
  const GemmCase& c = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(test_seed()));
  const int64_t G = c.G, N = c.N, K = c.K, M = 128 * (G + 4);
  const bool m_grouped = c.grouping == Grouping::kMGrouped;
  std::vector<int32_t> offs = offs_128(M, G, rng);
  // M-grouped: a (M, K) + factor_shape(M, K), b (G, N, K) + weight_factor_shape(G, N, K) (padding
  // 0); K-grouped: a (N, M) + factor_shape(N, M), b (K, M) + factor_shape(K, M).
  std::vector<uint8_t> a = random_e4m3(m_grouped ? M * K : N * M, rng);
  std::vector<uint8_t> b = random_e4m3(m_grouped ? G * N * K : K * M, rng);
  std::vector<float> a_scale =
      random_factors(m_grouped ? factor_shape(M, K).bytes() : factor_shape(N, M).bytes(), rng);
  std::vector<float> b_scale = random_factors(
      m_grouped ? weight_factor_shape(G, N, K).bytes() : factor_shape(K, M).bytes(), rng);
  if (m_grouped) {
    for (int64_t i = 0; i < static_cast<int64_t>(b_scale.size()); ++i) {
      const int64_t cols = round_up(K / 128, 4);
      if (i % cols >= K / 128) b_scale[i] = 0.0f;
    }
  }
  const int64_t out_elems = m_grouped ? M * N : G * N * K;

  // ---- the reference, and sum |a_i b_i| ----
  GroupedGemmParams p;
  p.grouping = c.grouping;
  p.num_groups = G;
  p.M = M;
  p.N = N;
  p.K = K;
  std::vector<uint16_t> want(out_elems), abs_sum(out_elems);
  p.a = a.data();
  p.a_scale = a_scale.data();
  p.b = b.data();
  p.b_scale = b_scale.data();
  p.offs = offs.data();
  p.out = want.data();
  ref::grouped_gemm(p);
  std::vector<uint8_t> a_abs(a), b_abs(b);
  for (auto& v : a_abs) v &= 0x7F;
  for (auto& v : b_abs) v &= 0x7F;
  GroupedGemmParams q = p;
  q.a = a_abs.data();
  q.b = b_abs.data();
  q.out = abs_sum.data();
  ref::grouped_gemm(q);

  // ---- the device ----
  Stream stream;
  GuardedBuffer d_a("a", a.size()), d_b("b", b.size());
  GuardedBuffer d_as("a_scale", a_scale.size() * 4), d_bs("b_scale", b_scale.size() * 4);
  GuardedBuffer d_offs("offs", offs.size() * 4), d_out("out", out_elems * 2);
  GuardedBuffer d_ws("workspace", grouped_gemm_workspace_bytes(c.grouping, M, N, K, G));
  GuardedBuffer d_status("status", 4);
  d_a.upload(a.data(), stream.get());
  d_b.upload(b.data(), stream.get());
  d_as.upload(a_scale.data(), stream.get());
  d_bs.upload(b_scale.data(), stream.get());
  d_offs.upload(offs.data(), stream.get());
  d_out.fill(0xA5, stream.get());
  d_status.fill(0xFF, stream.get());
  GroupedGemmParams g = p;
  g.a = d_a.as<uint8_t>();
  g.a_scale = d_as.as<float>();
  g.b = d_b.as<uint8_t>();
  g.b_scale = d_bs.as<float>();
  g.offs = d_offs.as<int32_t>();
  g.out = d_out.data();
  g.workspace = d_ws.data();
  g.status = d_status.as<int32_t>();
  g.stream = stream.get();
  grouped_gemm(g);
  std::vector<uint8_t> got_bytes, status_bytes;
  d_out.download_into(got_bytes, stream.get());
  d_status.download_into(status_bytes, stream.get());
  for (const GuardedBuffer* buf : {&d_a, &d_b, &d_as, &d_bs, &d_offs, &d_out, &d_ws, &d_status}) {
    EXPECT_TRUE(buf->guards_intact(stream.get())) << buf->name() << ": a write outside the buffer";
  }
  int32_t status = -1;
  std::memcpy(&status, status_bytes.data(), 4);
  EXPECT_EQ(status, 0) << "well-formed offs " << offs_to_string(offs);

  // ---- the tolerance ----
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < out_elems; ++i) {
    uint16_t bits = 0;
    std::memcpy(&bits, got_bytes.data() + 2 * i, 2);
    const float got_v = bf16_to_f32(bits), want_v = bf16_to_f32(want[i]);
    const float bound =
        std::ldexp(std::fabs(want_v), -7) + std::ldexp(bf16_to_f32(abs_sum[i]), -10);
    if (!(std::fabs(got_v - want_v) <= bound)) {
      if (bad++ == 0) {
        first = "element " + std::to_string(i) + ": got " + std::to_string(got_v) + ", want " +
                std::to_string(want_v) + " (bound " + std::to_string(bound) + ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << "outside the tolerance; first " << first << "; offs "
                    << offs_to_string(offs);
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupedGemmGpu,
                         ::testing::Values(GemmCase{Grouping::kMGrouped, 1, 256, 384},
                                           GemmCase{Grouping::kMGrouped, 4, 512, 256},
                                           GemmCase{Grouping::kMGrouped, 64, 256, 384},
                                           GemmCase{Grouping::kKGrouped, 1, 256, 384},
                                           GemmCase{Grouping::kKGrouped, 4, 384, 512},
                                           GemmCase{Grouping::kKGrouped, 64, 256, 256}),
                         case_name);

// A malformed offs is clamped on the device: nothing outside out, the status word says why.
class GroupedGemmGpuOffs : public GpuTest {};

TEST_F(GroupedGemmGpuOffs, ClampsMalformedOffsAndReportsThem) {
  if (!is_sm90()) GTEST_SKIP() << "needs an SM90 GPU (H100, H200)";
  const int64_t M = 512, N = 128, K = 128, G = 3;
  const std::vector<int32_t> offs = {256, 192, 640};  // decreasing, misaligned, past M
  Stream stream;
  GuardedBuffer d_a("a", M * K), d_as("a_scale", M * 4), d_b("b", G * N * K);
  GuardedBuffer d_bs("b_scale", weight_factor_shape<int64_t>(G, N, K).bytes() * 4);
  GuardedBuffer d_offs("offs", 12), d_out("out", M * N * 2), d_status("status", 4);
  GuardedBuffer d_ws("workspace", grouped_gemm_workspace_bytes(Grouping::kMGrouped, M, N, K, G));
  for (const GuardedBuffer* buf : {&d_a, &d_as, &d_b, &d_bs}) buf->fill(0, stream.get());
  d_offs.upload(offs.data(), stream.get());
  GroupedGemmParams p;
  p.a = d_a.as<uint8_t>();
  p.a_scale = d_as.as<float>();
  p.b = d_b.as<uint8_t>();
  p.b_scale = d_bs.as<float>();
  p.offs = d_offs.as<int32_t>();
  p.num_groups = G;
  p.M = M;
  p.N = N;
  p.K = K;
  p.out = d_out.data();
  p.workspace = d_ws.data();
  p.status = d_status.as<int32_t>();
  p.stream = stream.get();
  grouped_gemm(p);
  MXQ_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  for (const GuardedBuffer* buf : {&d_out, &d_ws, &d_status}) {
    EXPECT_TRUE(buf->guards_intact(stream.get())) << buf->name();
  }
  std::vector<uint8_t> status_bytes;
  d_status.download_into(status_bytes, stream.get());
  int32_t status = 0;
  std::memcpy(&status, status_bytes.data(), 4);
  EXPECT_EQ(status, kOffsDecreasing | kOffsMisaligned | kOffsBeyondM);
  EXPECT_THROW(check_status(p.status, stream.get()), Error);
}

TEST_F(GroupedGemmGpuOffs, RefusesOtherDevices) {
  if (is_sm90()) GTEST_SKIP() << "an SM90 device runs the kernel (the tests above)";
  GroupedGemmParams p;
  std::vector<int32_t> offs = {128};
  GuardedBuffer d("buffers", 1 << 20), d_offs("offs", 4);
  d_offs.upload(offs.data(), nullptr);
  p.a = d.as<uint8_t>();
  p.a_scale = d.as<float>();
  p.b = d.as<uint8_t>();
  p.b_scale = d.as<float>();
  p.offs = d_offs.as<int32_t>();
  p.num_groups = 1;
  p.M = p.N = p.K = 128;
  p.out = d.data();
  p.workspace = d.data();
  try {
    grouped_gemm(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("needs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxq::test
