// Shared helpers of the routed suites (test_routed_reference.cpp, gpu_routed_test.cpp, the fuzz
// driver): routing problems aimed at the contract's edges (docs/numerics.md §12.1), a test-side
// composition written from the spec (gather, scale, pad, then ref::quantize with offs_p), and
// running mxq::ref::quantize_routed on poisoned buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"
#include "test_util.h"

namespace mxq::test {

// How the routed rows are spread over the experts.
enum class Routing {
  kRandom,      // random counts, some not multiples of 32
  kEmpty,       // most experts empty
  kOneExpert,   // one expert (not the first) takes every row
  kDuplicates,  // tokens routed to the same expert twice in a row
  kAligned,     // every count a multiple of 32
};
inline const char* routing_name(Routing r) {
  switch (r) {
    case Routing::kRandom:
      return "random";
    case Routing::kEmpty:
      return "empty";
    case Routing::kOneExpert:
      return "one_expert";
    case Routing::kDuplicates:
      return "duplicates";
    case Routing::kAligned:
      return "aligned";
  }
  return "?";
}

struct RoutedProblem {
  DType dtype = DType::kBFloat16;
  int64_t T = 0, K = 0, N = 0, E = 0;
  std::vector<uint8_t> x;       // (T, K) of dtype
  std::vector<int64_t> index;   // (N)
  std::vector<int64_t> counts;  // (E)
  std::vector<float> scale;     // (N), or empty: no scale
  int64_t Mp() const { return padded_rows(N, E); }
};

// x (T, K) of `dtype` from raw bits: the §4 special blocks and wide magnitudes (through bf16), a
// NaN row and an Inf row; routes by `routing`; with `scaled`, factors including 0, -0, negatives,
// NaN, Inf and values that overflow or underflow x's type.
inline RoutedProblem make_routed_problem(DType dtype, int64_t T, int64_t K, int64_t N, int64_t E,
                                         Routing routing, bool scaled, uint64_t seed) {
  RoutedProblem p;
  p.dtype = dtype;
  p.T = T;
  p.K = K;
  p.N = N;
  p.E = E;
  std::mt19937_64 rng(seed);
  const int64_t rows = round_up(std::max<int64_t>(T, 32), 32);
  const std::vector<uint16_t> bits =
      make_input(rows, K, seed % 2 ? Dist::kSpecial : Dist::kWide, seed);
  p.x.resize(static_cast<size_t>(T * K * dtype_bytes(dtype)));
  for (int64_t i = 0; i < T * K; ++i) {
    float v = bf16_to_f32(bits[static_cast<size_t>(i)]);
    if (T > 2 && i / K == 1) v = (i % 7 == 0) ? NAN : v;        // a row with NaN
    if (T > 2 && i / K == 2) v = (i % 5 == 0) ? -INFINITY : v;  // a row with Inf
    if (dtype == DType::kFloat32) {
      std::memcpy(p.x.data() + 4 * i, &v, 4);
    } else {
      const _Float16 f16 = static_cast<_Float16>(v);
      uint16_t h = bf16_from_f32(v);
      if (dtype == DType::kFloat16) std::memcpy(&h, &f16, 2);
      std::memcpy(p.x.data() + 2 * i, &h, 2);
    }
  }
  // counts
  p.counts.assign(static_cast<size_t>(E), 0);
  std::uniform_int_distribution<int64_t> any_expert(0, E - 1);
  switch (routing) {
    case Routing::kOneExpert:
      p.counts[static_cast<size_t>(E / 2)] = N;
      break;
    case Routing::kEmpty:
      for (int64_t r = 0; r < N; ++r)
        ++p.counts[static_cast<size_t>(any_expert(rng) % 3 * (E / 3))];
      break;
    case Routing::kAligned: {
      int64_t left = N;
      for (int64_t e = 0; e < E && left > 0; ++e) {
        const int64_t c = e == E - 1 ? left : std::min(left, 32 * int64_t(rng() % 4));
        p.counts[static_cast<size_t>(e)] = c;
        left -= c;
      }
      if (left > 0) p.counts[0] += left;
      break;
    }
    default:
      for (int64_t r = 0; r < N; ++r) ++p.counts[static_cast<size_t>(any_expert(rng))];
  }
  // index, expert by expert
  std::uniform_int_distribution<int64_t> any_token(0, std::max<int64_t>(T - 1, 0));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < p.counts[static_cast<size_t>(e)]; ++i) {
      const bool twice = routing == Routing::kDuplicates && i % 2 == 1;
      p.index.push_back(twice ? p.index.back() : any_token(rng));
    }
  }
  if (scaled) {
    const float special[] = {0.f, -0.f, -1.5f, 1.f, NAN, INFINITY, 1e30f, 1e-30f, -3e-8f, 2.f};
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t r = 0; r < N; ++r) {
      p.scale.push_back(r % 5 == 0 ? special[static_cast<size_t>(r / 5) % std::size(special)]
                                   : u(rng));
    }
  }
  return p;
}

// index or counts as the bytes of int32 or int64 entries.
inline std::vector<uint8_t> int_bytes(const std::vector<int64_t>& v, IndexType t) {
  std::vector<uint8_t> b(v.size() * (t == IndexType::kInt64 ? 8 : 4));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == IndexType::kInt64) {
      std::memcpy(b.data() + 8 * i, &v[i], 8);
    } else {
      const auto w = static_cast<int32_t>(v[i]);
      std::memcpy(b.data() + 4 * i, &w, 4);
    }
  }
  return b;
}

struct RoutedOutputs {
  std::vector<uint8_t> q_row, s_row, q_col, s_col;
  std::vector<int32_t> offs_p, dest;
};

inline RoutedOutputs routed_buffers(const RoutedProblem& p, bool rowwise, bool colwise,
                                    uint8_t poison = kPoison) {
  const int64_t Mp = p.Mp();
  RoutedOutputs o;
  if (rowwise) {
    o.q_row.assign(static_cast<size_t>(q_row_shape(Mp, p.K).bytes()), poison);
    o.s_row.assign(static_cast<size_t>(s_row_shape(Mp, p.K, p.E).bytes()), poison);
  }
  if (colwise) {
    o.q_col.assign(static_cast<size_t>(q_col_shape(Mp, p.K).bytes()), poison);
    o.s_col.assign(static_cast<size_t>(s_col_shape(Mp, p.K, p.E).bytes()), poison);
  }
  o.offs_p.assign(static_cast<size_t>(p.E), int32_t(0xA5A5A5A5));
  o.dest.assign(static_cast<size_t>(p.N), int32_t(0xA5A5A5A5));
  return o;
}

// mxq::ref::quantize_routed on poisoned host buffers.
inline RoutedOutputs reference_routed(const RoutedProblem& p, ScalingMode mode, bool rowwise,
                                      bool colwise, IndexType index_type = IndexType::kInt32,
                                      IndexType counts_type = IndexType::kInt32) {
  RoutedOutputs o = routed_buffers(p, rowwise, colwise);
  const std::vector<uint8_t> index = int_bytes(p.index, index_type);
  const std::vector<uint8_t> counts = int_bytes(p.counts, counts_type);
  QuantizeRoutedParams rp;
  rp.x = p.x.data();
  rp.dtype = p.dtype;
  rp.T = p.T;
  rp.K = p.K;
  rp.index = index.data();
  rp.index_type = index_type;
  rp.N = p.N;
  rp.counts = counts.data();
  rp.counts_type = counts_type;
  rp.num_experts = p.E;
  rp.scale = p.scale.empty() ? nullptr : p.scale.data();
  rp.scaling_mode = mode;
  if (rowwise) {
    rp.q_row = o.q_row.data();
    rp.s_row = o.s_row.data();
  }
  if (colwise) {
    rp.q_col = o.q_col.data();
    rp.s_col = o.s_col.data();
  }
  rp.offs_p = o.offs_p.data();
  rp.dest = o.dest.data();
  ref::quantize_routed(rp);
  return o;
}

// The composition of docs/numerics.md §12.1 written here: offs_p and dest from the counts, the routed
// rows gathered into a zeroed (Mp, K) buffer — scaled as torch would, (x.float() * s).to(dtype) —
// then ref::quantize with offs_p.
inline RoutedOutputs composed_routed(const RoutedProblem& p, ScalingMode mode, bool rowwise,
                                     bool colwise) {
  RoutedOutputs o = routed_buffers(p, rowwise, colwise);
  const int64_t Mp = p.Mp();
  const int64_t width = dtype_bytes(p.dtype);
  std::vector<uint8_t> padded(static_cast<size_t>(Mp * p.K * width), 0);
  int64_t r = 0, start = 0;
  for (int64_t e = 0; e < p.E; ++e) {
    const int64_t n = p.counts[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i, ++r) {
      const int64_t src = p.index[static_cast<size_t>(r)];
      o.dest[static_cast<size_t>(r)] = static_cast<int32_t>(start + i);
      uint8_t* row = padded.data() + (start + i) * p.K * width;
      std::memcpy(row, p.x.data() + src * p.K * width, static_cast<size_t>(p.K * width));
      if (p.scale.empty()) continue;
      const float s = p.scale[static_cast<size_t>(r)];
      for (int64_t k = 0; k < p.K; ++k) {
        if (p.dtype == DType::kFloat32) {
          float v;
          std::memcpy(&v, row + 4 * k, 4);
          v = v * s;
          std::memcpy(row + 4 * k, &v, 4);
        } else if (p.dtype == DType::kFloat16) {
          _Float16 h;
          std::memcpy(&h, row + 2 * k, 2);
          h = static_cast<_Float16>(static_cast<float>(h) * s);
          std::memcpy(row + 2 * k, &h, 2);
        } else {
          uint16_t b;
          std::memcpy(&b, row + 2 * k, 2);
          b = bf16_from_f32(bf16_to_f32(b) * s);
          std::memcpy(row + 2 * k, &b, 2);
        }
      }
    }
    start += (n + 31) / 32 * 32;
    o.offs_p[static_cast<size_t>(e)] = static_cast<int32_t>(start);
  }
  QuantizeParams q;
  q.x = padded.data();
  q.dtype = p.dtype;
  q.M = Mp;
  q.K = p.K;
  q.scaling_mode = mode;
  q.offs = o.offs_p.data();
  q.num_groups = p.E;
  if (rowwise) {
    q.q_row = o.q_row.data();
    q.s_row = o.s_row.data();
  }
  if (colwise) {
    q.q_col = o.q_col.data();
    q.s_col = o.s_col.data();
  }
  ref::quantize(q);
  return o;
}

// Every output equal, raw bytes.
inline ::testing::AssertionResult same_routed(const RoutedOutputs& got, const RoutedOutputs& want,
                                              int64_t Mp, int64_t K) {
  const auto cols = [](int64_t c) { return std::max<int64_t>(c, 1); };
  for (const auto& [g, w, c, name] :
       {std::tuple{&got.q_row, &want.q_row, cols(K), "q_row"},
        std::tuple{&got.s_row, &want.s_row, cols(round_up(K / 32, 4)), "s_row"},
        std::tuple{&got.q_col, &want.q_col, cols(Mp), "q_col"},
        std::tuple{&got.s_col, &want.s_col, cols(Mp / 32 + 4), "s_col"}}) {
    auto r = bytes_equal(*g, *w, c, name);
    if (!r) return r;
  }
  if (got.offs_p != want.offs_p) return ::testing::AssertionFailure() << "offs_p differs";
  if (got.dest != want.dest) return ::testing::AssertionFailure() << "dest differs";
  return ::testing::AssertionSuccess();
}

}  // namespace mxq::test
