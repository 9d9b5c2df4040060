// to_blocked, the third kernel of the composed path (the baseline the fused kernel replaces): plain
// colwise scales S_col (K, M/32) rearranged into the dense blocked layout, or into the K-groups
// layout from device offs with every byte after the last group's region zeroed (docs/numerics.md
// §5-§6; torchao calls this rearrangement to_blocked).
//
// Dense: one warp moves one 128x4 atom: lane l holds rows l, l+32, l+64, l+96 of the atom (4 scale
// columns each), which are exactly the 16 bytes at l*16 of the blocked atom. Grouped: warp w of a
// CTA plans the places of the CTA's atom w (scales.cuh plan_tile_places), then the CTA stages each
// atom in shared memory and places it with the quantize kernels' own scale stores. Scales past the
// edge of S_col (K or M/32 not a multiple of the atom) are staged as 0, the padding value.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"
#include "scales.cuh"

namespace mxq::kernels {

struct ToBlockedConfig {
  static constexpr int kThreads = 256;
  static constexpr int kAtomsPerCta = kThreads / 32;
  static_assert(kAtomRows == 4 * 32 && kAtomCols == 4, "a lane moves 4 rows of 4 scale bytes");
};

struct ToBlockedParams {
  const uint8_t* s_plain;
  int64_t M, K;
  const int32_t* offs;
  int num_groups;
  uint8_t* s_col;
  int32_t* status;
  int64_t m_atoms, atoms;
  int64_t atom_ctas;  // CTAs past this zero-fill the K-groups slack
};

// S_col[k, c] of the plain matrix, 0 past its edge.
__device__ __forceinline__ uint8_t plain_scale(const ToBlockedParams& p, int64_t k, int64_t c) {
  const int64_t cols = p.M / kBlock;
  return k < p.K && c < cols ? p.s_plain[k * cols + c] : 0;
}

// The (k0, m0) corner of atom a: scale rows k0.., tokens m0.. (scale columns m0/32..).
__device__ __forceinline__ void atom_corner(const ToBlockedParams& p, int64_t a, int64_t* k0,
                                            int64_t* m0) {
  *k0 = a / p.m_atoms * kAtomRows;
  *m0 = a % p.m_atoms * (kAtomCols * kBlock);
}

__global__ void __launch_bounds__(ToBlockedConfig::kThreads)
    to_blocked_dense_kernel(const ToBlockedParams p) {
  ptx::griddepcontrol_wait();  // nothing touches memory before the work before it is done
  const int lane = threadIdx.x % 32;
  const int64_t a = int64_t(blockIdx.x) * ToBlockedConfig::kAtomsPerCta + threadIdx.x / 32;
  if (a >= p.atoms) return;
  int64_t k0, m0;
  atom_corner(p, a, &k0, &m0);
  uint4 out;
  uint8_t* bytes = reinterpret_cast<uint8_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      bytes[4 * i + c] = plain_scale(p, k0 + lane + 32 * i, m0 / kBlock + c);
  }
  ptx::st_global_v4(p.s_col + blocked_offset(k0, m0 / kBlock, p.M / kBlock) + lane * 16, out);
}

__global__ void __launch_bounds__(ToBlockedConfig::kThreads)
    to_blocked_kgroups_kernel(const ToBlockedParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* atom_staging = smem_raw;  // one 512-byte atom
  ptx::griddepcontrol_wait();
  if (blockIdx.x >= p.atom_ctas) {
    zero_fill_slack(p.offs, p.num_groups, p.M, nullptr, p.s_col, p.K, blockIdx.x - p.atom_ctas,
                    p.status);
    return;
  }
  // Warp w plans the places of the CTA's atom w.
  __shared__ TilePlaces places[ToBlockedConfig::kAtomsPerCta];
  const int warp = threadIdx.x / 32;
  const int64_t own = int64_t(blockIdx.x) * ToBlockedConfig::kAtomsPerCta + warp;
  if (own < p.atoms) {
    int64_t k0, m0;
    atom_corner(p, own, &k0, &m0);
    plan_tile_places<kAtomBands>(places[warp], p.offs, p.num_groups, p.M, m0, k0, p.K, false, true);
  }
  const ScaleOut out{nullptr, p.s_col, p.M, p.K};
  for (int u = 0; u < ToBlockedConfig::kAtomsPerCta; ++u) {
    const int64_t a = int64_t(blockIdx.x) * ToBlockedConfig::kAtomsPerCta + u;
    if (a >= p.atoms) break;
    int64_t k0, m0;
    atom_corner(p, a, &k0, &m0);
    // ---- stage ---- thread t: row t % 128, columns t / 128 and t / 128 + 2.
    const int k = threadIdx.x % kAtomRows;
    for (int c = threadIdx.x / kAtomRows; c < kAtomCols; c += blockDim.x / kAtomRows) {
      atom_staging[atom_offset<unsigned>(k, c)] = plain_scale(p, k0 + k, m0 / kBlock + c);
    }
    __syncthreads();
    // ---- place ----
    store_col_scales<ColScales::kKGroups, kAtomBands>(out, m0, k0, atom_staging, places[u], false);
    __syncthreads();  // the staging is reused
  }
}

}  // namespace mxq::kernels

namespace mxq::detail {

void launch_to_blocked(const uint8_t* s_col_plain, const QuantizeParams& p) {
  using namespace kernels;
  ToBlockedParams k{s_col_plain, p.M,     p.K, p.offs, static_cast<int>(p.num_groups),
                    p.s_col,     p.status};
  k.m_atoms = ceil_div(p.M / kBlock, kAtomCols);
  k.atoms = k.m_atoms * ceil_div(p.K, kAtomRows);
  k.atom_ctas = ceil_div(k.atoms, ToBlockedConfig::kAtomsPerCta);
  if (p.offs == nullptr) {
    if (k.atom_ctas == 0) return;
    MXQ_CHECK(k.atom_ctas <= 0x7FFFFFFF, "too many scale atoms for one launch: ", k.atom_ctas);
    launch_dependent(to_blocked_dense_kernel, static_cast<unsigned>(k.atom_ctas),
                     ToBlockedConfig::kThreads, 0, p.stream, k);
  } else {
    const int64_t grid =
        k.atom_ctas + std::max<int64_t>(1, zero_fill_col_ctas(p.M, p.K, p.num_groups));
    MXQ_CHECK(grid <= 0x7FFFFFFF, "too many scale atoms for one launch: ", grid);
    launch_dependent(to_blocked_kgroups_kernel, static_cast<unsigned>(grid),
                     ToBlockedConfig::kThreads, kAtomBytes, p.stream, k);
  }
}

}  // namespace mxq::detail
