// The CPU reference of the routed input stage (docs/numerics.md §12.1), written from the contract:
// check index and counts, lay out the padded row space (§12; groups padded to the format's block,
// 32 or 128), gather and scale each routed row into
// a host buffer of x's dtype, then quantize that buffer with offs_p through ref::quantize. The GPU
// path (route.cu, the routed tile kernels) must equal it byte for byte.
#include <cstring>
#include <vector>

#include "../common/check.h"
#include "../common/parallel.h"
#include "../common/validate.h"
#include "mxq/layout.h"
#include "mxq/mxq.h"
#include "mxq/numerics.h"

namespace mxq::ref {
namespace {

int64_t read_int(const void* p, IndexType t, int64_t i) {
  return t == IndexType::kInt64 ? static_cast<const int64_t*>(p)[i]
                                : static_cast<const int32_t*>(p)[i];
}

// The routed value of one element (§12.1): x itself, or the fp32 product with the row's scale rounded
// to x's dtype once (RNE), as a separate multiply would produce it.
void scale_row(void* row, DType t, int64_t K, float scale) {
  for (int64_t k = 0; k < K; ++k) {
    switch (t) {
      case DType::kBFloat16: {
        auto* v = static_cast<uint16_t*>(row) + k;
        *v = bf16_from_f32(mul_rn(bf16_to_f32(*v), scale));
        break;
      }
      case DType::kFloat16: {
        auto* v = static_cast<uint16_t*>(row) + k;
        *v = f16_from_f32(mul_rn(f16_to_f32(*v), scale));
        break;
      }
      case DType::kFloat32: {
        auto* v = static_cast<float*>(row) + k;
        *v = mul_rn(*v, scale);
        break;
      }
    }
  }
}

}  // namespace

void quantize_routed(const QuantizeRoutedParams& p) {
  const int64_t E = p.num_experts;
  std::vector<int64_t> counts(static_cast<size_t>(E > 0 ? E : 0));
  detail::with_op("mxq::ref::quantize_routed", [&] {
    detail::validate(p);
    for (int64_t e = 0; e < E; ++e) {  // every entry first, so a negative one is named as such
      counts[static_cast<size_t>(e)] = read_int(p.counts, p.counts_type, e);
      MXQ_CHECK(counts[static_cast<size_t>(e)] >= 0, "counts[", e,
                "]=", counts[static_cast<size_t>(e)], " is negative");
    }
    int64_t sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t c = counts[static_cast<size_t>(e)];
      MXQ_CHECK(c <= p.N - sum, "counts must sum to N=", p.N, ", got more by counts[", e, "]");
      sum += c;
    }
    MXQ_CHECK(sum == p.N, "counts must sum to N=", p.N, ", got ", sum);
    for (int64_t r = 0; r < p.N; ++r) {
      const int64_t t = read_int(p.index, p.index_type, r);
      MXQ_CHECK(t >= 0 && t < p.T, "index[", r, "]=", t, " is outside [0, T) for T=", p.T);
    }
  });

  // ---- the padded row space (§12): offs_p, dest ----
  const int64_t Mp = detail::padded_rows_of(p.N, E, p.format);
  const int block = detail::format_block(p.format);
  std::vector<int32_t> offs_p(static_cast<size_t>(E));
  std::vector<int64_t> dest(static_cast<size_t>(p.N));
  int64_t r = 0, start = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = counts[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i, ++r) dest[static_cast<size_t>(r)] = start + i;
    start += round_up(n, block);
    offs_p[static_cast<size_t>(e)] = static_cast<int32_t>(start);
  }

  // ---- gather, scale, pad ----
  const int64_t row_bytes = p.K * dtype_bytes(p.dtype);
  std::vector<uint8_t> padded(static_cast<size_t>(Mp * row_bytes), 0);
  detail::parallel_for(p.N, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t src = read_int(p.index, p.index_type, q);
      uint8_t* row = padded.data() + dest[static_cast<size_t>(q)] * row_bytes;
      if (row_bytes > 0) {
        std::memcpy(row, static_cast<const uint8_t*>(p.x) + src * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
      if (p.scale != nullptr) scale_row(row, p.dtype, p.K, p.scale[q]);
    }
  });

  // ---- quantize with offs_p (§5-§6) ----
  QuantizeParams qp;
  qp.x = padded.data();
  qp.dtype = p.dtype;
  qp.M = Mp;
  qp.K = p.K;
  qp.format = p.format;
  qp.scaling_mode = p.scaling_mode;
  qp.offs = offs_p.data();
  qp.num_groups = E;
  qp.q_row = p.q_row;
  qp.s_row = p.s_row;
  qp.q_col = p.q_col;
  qp.s_col = p.s_col;
  ref::quantize(qp);
  std::memcpy(p.offs_p, offs_p.data(), offs_p.size() * sizeof(int32_t));
  for (int64_t q = 0; q < p.N; ++q) p.dest[q] = static_cast<int32_t>(dest[static_cast<size_t>(q)]);
  if (p.status != nullptr) *p.status = 0;
}

}  // namespace mxq::ref
