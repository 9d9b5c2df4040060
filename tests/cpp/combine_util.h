// Shared helpers of the combine suites (test_combine_reference.cpp, gpu_combine_test.cpp): problems
// for mxq::combine and mxq::combine_score_grad (mxq.h CombineParams) aimed at the contract's edges —
// router-like, duplicate-choice, any-permutation and shared-dest routings; values that overflow,
// cancel exactly, are signed zeros, subnormals and NaNs; scales that are 0, -0, NaN, Inf or overflow
// — the CPU reference run on poisoned host buffers, and the comparison of the fp32 scores.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../src/common/parallel.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"
#include "test_util.h"

namespace mxq::test {

// How the T·top_k routed rows are laid out.
enum class CombineRouting {
  kRouter,      // top_k distinct experts per token, routed rows sorted by expert (stable), each
                // expert's rows at consecutive padded rows, every expert padded to 32 (unused rows)
  kDuplicates,  // kRouter, but every third token picks one expert twice (top_k = 32: 5 experts,
                // so every token picks each of them several times)
  kPermutation,  // token_rows any permutation of [0, N); dest any injective map into [0, Mp)
  kSharedDest,   // token_rows a permutation; dest entries repeat (several routed rows read one row)
};
inline const char* combine_routing_name(CombineRouting r) {
  switch (r) {
    case CombineRouting::kRouter:
      return "router";
    case CombineRouting::kDuplicates:
      return "duplicates";
    case CombineRouting::kPermutation:
      return "permutation";
    case CombineRouting::kSharedDest:
      return "shared_dest";
  }
  return "?";
}

// The values of y and dout.
enum class CombineValues {
  kNormal,   // about normal, times 4
  kWide,     // magnitudes 2^-133 (bf16's smallest subnormal) to 2^127, random signs
  kSpecial,  // kNormal with special values planted (signed zeros, subnormals, bf16 max, Inf, NaNs
             // with payloads), and tokens whose rows cancel exactly, overflow, are all -0 or all
             // subnormal
  kNearMax,  // magnitudes in [2^126, bf16 max], random signs: most sums overflow to Inf or NaN
};
inline const char* combine_values_name(CombineValues v) {
  switch (v) {
    case CombineValues::kNormal:
      return "normal";
    case CombineValues::kWide:
      return "wide";
    case CombineValues::kSpecial:
      return "special";
    case CombineValues::kNearMax:
      return "near_max";
  }
  return "?";
}

struct CombineProblem {
  int64_t T = 0, top_k = 1, D = 0, Mp = 0;
  std::vector<uint16_t> y;          // (Mp, D) bf16
  std::vector<int32_t> dest;        // (N)
  std::vector<int32_t> token_rows;  // (T, top_k)
  std::vector<float> scale;         // (N), or empty: no scale
  std::vector<uint16_t> dout;       // (T, D) bf16
  int64_t N() const { return T * top_k; }

  // The params on these host buffers: combine (with the scale, if any), or combine_score_grad
  // (dout, never a scale).
  CombineParams params(void* out, bool scores) const {
    CombineParams p;
    p.y = y.data();
    p.Mp = Mp;
    p.D = D;
    p.dest = dest.data();
    p.N = N();
    p.token_rows = token_rows.data();
    p.T = T;
    p.top_k = top_k;
    p.scale = scores || scale.empty() ? nullptr : scale.data();
    p.dout = scores ? dout.data() : nullptr;
    p.out = out;
    return p;
  }
};

// ---- values: a hash of (seed, element), so the large shapes fill in parallel ----
inline uint64_t combine_hash(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Signed zeros, subnormals (smallest, largest), the smallest normal, bf16 max and its neighbour,
// Inf, the canonical NaN, NaNs with payloads and signs (0x7F81 is a signaling NaN), +-1, 1 + ulp.
constexpr uint16_t kCombineSpecials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080,
                                         0x7F7F, 0xFF7F, 0x7F7E, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0,
                                         0x7FC1, 0x7F81, 0x3F80, 0xBF80, 0x3F81};

inline uint16_t combine_value(CombineValues kind, uint64_t h) {
  const uint16_t sign = (h >> 63) ? 0x8000 : 0;
  switch (kind) {
    case CombineValues::kWide: {  // 2^e * (1 + m/128), e in [-133, 127]
      const int e = int((h >> 8) % 261) - 133;
      return uint16_t(bf16_from_f32(std::ldexp(1.0f + float(h & 0x7F) / 128.0f, e)) | sign);
    }
    case CombineValues::kNearMax:
      return uint16_t((0x7E80 + (h & 0xFF)) | sign);  // [2^126, 0x7F7F]
    case CombineValues::kSpecial:
      if ((h >> 40) % 8 == 0) {
        return kCombineSpecials[(h >> 44) % std::size(kCombineSpecials)];
      }
      [[fallthrough]];
    case CombineValues::kNormal: {  // Irwin-Hall of 4 uniforms: about normal
      const float sum = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) + float((h >> 32) & 0xFFFF) +
                        float(h >> 48);
      return bf16_from_f32((sum * (1.f / 65536.f) - 2.f) * 1.7320508f * 4.f);
    }
  }
  return 0;
}

inline std::vector<uint16_t> combine_values(int64_t rows, int64_t cols, CombineValues kind,
                                            uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(rows * cols));
  detail::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
      v[size_t(i)] = combine_value(kind, combine_hash(seed ^ uint64_t(i) * 0xD1B54A32D192ED03ull));
    }
  });
  return v;
}

// ---- routings ----

// token_rows and dest of a router: each (t, j) picks an expert, the routed rows are the (t, j)
// sorted by expert (stable: increasing t·top_k + j within an expert), token_rows the inverse of
// that sort, and each expert's rows sit at consecutive padded rows, every expert rounded up to 32.
inline void route_by_experts(CombineProblem& p, bool duplicates, std::mt19937_64& rng) {
  const int64_t k = p.top_k, N = p.N();
  const int64_t E = duplicates && k == kMaxTopK ? 5 : 2 * k + 5;
  std::vector<int64_t> expert(static_cast<size_t>(N));
  std::vector<int64_t> pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < p.T; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: distinct while there are E
      int64_t& e = expert[size_t(t * k + j)];
      if (j < E) {
        std::swap(pool[size_t(j)], pool[size_t(j + int64_t(rng() % uint64_t(E - j)))]);
        e = pool[size_t(j)];
      } else {
        e = int64_t(rng() % uint64_t(E));
      }
    }
    if (duplicates && k > 1 && t % 3 == 0) {  // one expert twice (not always the first two)
      expert[size_t(t * k + k - 1)] = expert[size_t(t * k + (t / 3) % (k - 1))];
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return expert[size_t(a)] < expert[size_t(b)]; });
  p.token_rows.assign(static_cast<size_t>(N), 0);
  p.dest.assign(static_cast<size_t>(N), 0);
  int64_t padded = 0, count = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t flat = order[size_t(r)];
    if (r > 0 && expert[size_t(flat)] != expert[size_t(order[size_t(r - 1)])]) {
      padded += (count + 31) / 32 * 32;
      count = 0;
    }
    p.token_rows[size_t(flat)] = int32_t(r);
    p.dest[size_t(r)] = int32_t(padded + count++);
  }
  p.Mp = padded + (count + 31) / 32 * 32 + 32;  // and 32 unused rows at the end
}

inline void route(CombineProblem& p, CombineRouting routing, std::mt19937_64& rng) {
  const int64_t N = p.N();
  if (routing == CombineRouting::kRouter || routing == CombineRouting::kDuplicates) {
    route_by_experts(p, routing == CombineRouting::kDuplicates, rng);
    return;
  }
  p.token_rows.resize(static_cast<size_t>(N));
  std::iota(p.token_rows.begin(), p.token_rows.end(), 0);
  std::shuffle(p.token_rows.begin(), p.token_rows.end(), rng);
  if (routing == CombineRouting::kPermutation) {
    p.Mp = N + N / 4 + 7;
    std::vector<int32_t> rows(static_cast<size_t>(p.Mp));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    p.dest.assign(rows.begin(), rows.begin() + N);
  } else {
    p.Mp = N / 3 + 1;
    p.dest.resize(static_cast<size_t>(N));
    for (auto& d : p.dest) d = int32_t(rng() % uint64_t(p.Mp));
  }
}

// Token t's routed rows in increasing routed row (the order combine sums them in).
inline std::vector<int32_t> sorted_rows(const CombineProblem& p, int64_t t) {
  std::vector<int32_t> rows(p.token_rows.begin() + t * p.top_k,
                            p.token_rows.begin() + (t + 1) * p.top_k);
  std::sort(rows.begin(), rows.end());
  return rows;
}

// kSpecial's planted tokens (clean only where dest is injective; harmless elsewhere):
//   t % 6 == 1: rows x, -x, x, -x, ... in summing order, one factor: partial sums x, +0, x, ...
//   t % 6 == 2: every row bf16 max or near it, positive in the first half of the columns (the
//               sum overflows to +Inf), any sign in the second (Inf - Inf: NaN)
//   t % 6 == 3: every row -0 (the sum is +0: index_put_ accumulates into +0)
//   t % 6 == 4: every row subnormal, any sign (exact sums of subnormals)
inline void plant_special_tokens(CombineProblem& p, uint64_t seed) {
  const int64_t D = p.D;
  for (int64_t t = 0; t < p.T; ++t) {
    const std::vector<int32_t> rows = sorted_rows(p, t);
    uint16_t* first = p.y.data() + int64_t(p.dest[size_t(rows[0])]) * D;
    for (size_t i = 0; i < rows.size(); ++i) {
      uint16_t* row = p.y.data() + int64_t(p.dest[size_t(rows[i])]) * D;
      for (int64_t d = 0; d < D; ++d) {
        const uint64_t h = combine_hash(seed ^ (uint64_t(t) << 32) ^ (i << 20) ^ uint64_t(d));
        switch (t % 6) {
          case 1:
            if (i > 0) row[d] = uint16_t(first[d] ^ (i % 2 ? 0x8000 : 0));
            break;
          case 2:
            row[d] = uint16_t((0x7F70 + (h & 0xF)) | (d >= D / 2 && (h >> 63) ? 0x8000 : 0));
            break;
          case 3:
            row[d] = 0x8000;
            break;
          case 4:
            row[d] = uint16_t((1 + (h & 0x7E)) | ((h >> 63) ? 0x8000 : 0));
            break;
          default:
            break;
        }
      }
      if (t % 6 == 1 && !p.scale.empty()) p.scale[size_t(rows[i])] = p.scale[size_t(rows[0])];
    }
  }
}

// A whole problem: routing, then y (Mp, D) with the rows no routed row reads set to a NaN pattern
// (reading one shows), dout (T, D), and with `scaled` the factors (every fifth a special one).
inline CombineProblem make_combine_problem(CombineRouting routing, CombineValues values,
                                           bool scaled, int64_t T, int64_t top_k, int64_t D,
                                           uint64_t seed) {
  CombineProblem p;
  p.T = T;
  p.top_k = top_k;
  p.D = D;
  std::mt19937_64 rng(seed);
  route(p, routing, rng);
  p.y = combine_values(p.Mp, D, values, combine_hash(seed ^ 1));
  p.dout = combine_values(T, D, values, combine_hash(seed ^ 2));
  std::vector<char> read(static_cast<size_t>(p.Mp), 0);
  for (const int32_t d : p.dest) read[size_t(d)] = 1;
  for (int64_t r = 0; r < p.Mp; ++r) {
    if (!read[size_t(r)]) std::fill_n(p.y.begin() + r * D, D, uint16_t(0x7FFF));
  }
  if (scaled) {
    const float special[] = {0.f,   -0.f,   -1.5f,  1.f, NAN,       INFINITY,  -INFINITY,
                             1e30f, 1e-30f, -3e-8f, 2.f, 0x1p-140f, 0x1p+120f, -0x1p-126f};
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t r = 0; r < p.N(); ++r) {
      p.scale.push_back(r % 5 == 0 ? special[size_t(r / 5) % std::size(special)] : u(rng));
    }
  }
  if (values == CombineValues::kSpecial) plant_special_tokens(p, combine_hash(seed ^ 3));
  return p;
}

inline std::string combine_problem_string(CombineRouting routing, CombineValues values, bool scaled,
                                          int64_t T, int64_t top_k, int64_t D) {
  return std::string(combine_routing_name(routing)) + "_" + combine_values_name(values) +
         (scaled ? "_scaled" : "") + "_T" + std::to_string(T) + "_k" + std::to_string(top_k) +
         "_D" + std::to_string(D);
}

// ---- the reference on poisoned host buffers ----
constexpr uint16_t kPoisonBf16 = uint16_t(kPoison) * 0x0101;
constexpr uint32_t kPoisonF32 = uint32_t(kPoison) * 0x01010101u;

inline std::vector<uint16_t> reference_combine(const CombineProblem& p) {
  std::vector<uint16_t> out(static_cast<size_t>(p.T * p.D), kPoisonBf16);
  ref::combine(p.params(out.data(), /*scores=*/false));
  return out;
}

inline std::vector<float> reference_score_grad(const CombineProblem& p) {
  std::vector<float> out(static_cast<size_t>(p.T * p.top_k), f32_from_bits(kPoisonF32));
  ref::combine_score_grad(p.params(out.data(), /*scores=*/true));
  return out;
}

template <typename T>
std::vector<uint8_t> raw_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The fp32 scores (T, top_k) as raw bytes, equal bit for bit (a NaN is the canonical 0x7FC00000 on
// both sides). Reports the count, the first [t, j] and both bit patterns.
inline ::testing::AssertionResult same_scores(const std::vector<uint8_t>& got,
                                              const std::vector<uint8_t>& want, int64_t top_k,
                                              const std::string& what) {
  if (got.size() != want.size() || got.size() % 4 != 0) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
  }
  int64_t mismatches = 0, first = -1;
  uint32_t first_got = 0, first_want = 0;
  for (size_t i = 0; i < got.size() / 4; ++i) {
    uint32_t g, w;
    std::memcpy(&g, got.data() + 4 * i, 4);
    std::memcpy(&w, want.data() + 4 * i, 4);
    if (g == w) continue;
    if (mismatches++ == 0) first = int64_t(i), first_got = g, first_want = w;
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << mismatches << " of " << got.size() / 4 << " scores differ; first at ["
     << first / top_k << ", " << first % top_k << "]: got " << f32_from_bits(first_got) << " (0x"
     << std::hex << first_got << "), want " << f32_from_bits(first_want) << " (0x" << first_want
     << ")";
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace mxq::test
