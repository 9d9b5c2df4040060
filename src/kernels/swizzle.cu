// Colwise scale swizzle, the third kernel of the composed path (the baseline the fused kernel
// replaces): plain S_col (K, M/32) -> the dense blocked layout, or the K-groups layout from device
// offs with every byte after the last group's region zeroed (docs/numerics.md §5-§6).
//
// One warp moves one 128x4 atom: lane l holds rows l, l+32, l+64, l+96 of the atom (one 4-byte word
// each, the atom's 4 scale columns), which are exactly the 16 bytes at l*16 of the blocked atom, so
// the store of a warp is one contiguous 512-byte line group.
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"

namespace mxq::kernels {

struct SwizzleConfig {
  static constexpr int kThreads = 256;
  static constexpr int kAtomsPerCta = kThreads / 32;
  static_assert(kAtomRows == 4 * 32 && kAtomCols == 4, "a lane moves 4 rows of 4 scale bytes");
};

struct SwizzleKernelParams {
  const uint8_t* s_plain;
  int64_t M, K;
  const int32_t* offs;
  int num_groups;
  uint8_t* s_col;
  int32_t* status;
  int64_t atoms;
  int64_t atom_ctas;  // CTAs past this zero-fill the K-groups slack
};

template <bool kGrouped>
__global__ void __launch_bounds__(SwizzleConfig::kThreads)
    swizzle_kernel(const SwizzleKernelParams p) {
  if constexpr (kGrouped) {
    if (blockIdx.x >= p.atom_ctas) {
      zero_fill_slack(p.s_col, p.offs, p.num_groups, p.M, p.K, blockIdx.x - p.atom_ctas, p.status);
      return;
    }
  }
  const int lane = threadIdx.x % 32;
  const int64_t atom = int64_t(blockIdx.x) * SwizzleConfig::kAtomsPerCta + threadIdx.x / 32;
  if (atom >= p.atoms) return;
  const int64_t m_atoms = p.M / kTile;
  const int64_t k0 = atom / m_atoms * kAtomRows;
  const int64_t m0 = atom % m_atoms * kTile;  // tokens; scale columns m0/32 .. m0/32+3
  const int64_t cols = p.M / kBlock;

  // ---- load ---- rows k0 + lane + 32*i, 4 scale columns each.
  uint4 out;
  uint32_t* words = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] =
        *reinterpret_cast<const uint32_t*>(p.s_plain + (k0 + lane + 32 * i) * cols + m0 / kBlock);
  }
  // ---- place ----
  int64_t dst = blocked_offset(k0, m0 / kBlock, cols);
  if constexpr (kGrouped) {
    const GroupSpan span = find_group_warp(p.offs, p.num_groups, p.M, m0);
    if (span.end <= span.begin) return;  // the uncovered tail: zeroed by the slack fill
    dst = kgroups_atom_offset(span, p.K, k0, m0);
  }
  // ---- store ----
  ptx::st_global_v4(p.s_col + dst + lane * 16, out);
}

}  // namespace mxq::kernels

namespace mxq::detail {

void launch_swizzle_col_scales(const uint8_t* s_col_plain, const QuantizeParams& p) {
  using namespace kernels;
  SwizzleKernelParams k{s_col_plain, p.M,      p.K, p.offs, static_cast<int>(p.num_groups),
                        p.s_col,     p.status, 0,   0};
  k.atoms = (p.M / kTile) * (p.K / kAtomRows);
  k.atom_ctas = ceil_div(k.atoms, SwizzleConfig::kAtomsPerCta);
  const bool grouped = p.offs != nullptr;
  const int64_t grid = k.atom_ctas + (grouped ? zero_fill_ctas(p.M, p.K, p.num_groups) : 0);
  MXQ_CHECK(grid <= 0x7FFFFFFF, "too many scale atoms for one launch: ", grid);
  if (grid == 0) return;
  auto kernel = grouped ? swizzle_kernel<true> : swizzle_kernel<false>;
  kernel<<<static_cast<unsigned>(grid), SwizzleConfig::kThreads, 0, p.stream>>>(k);
  MXQ_CHECK_CUDA(cudaGetLastError());
}

}  // namespace mxq::detail
