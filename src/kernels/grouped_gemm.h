// The workspace of mxq::grouped_gemm (docs/numerics.md §13.6), shared by the host API (its size
// from the shapes alone) and the SM90 launcher (where each part lies). No CUDA or CUTLASS headers:
// the per-group records are sized by a bound here that the launcher static_asserts its types fit.
//
//   [ per-group arrays: kGroupArrays x roundup(G * kGroupSlotBytes, 256) ]  problem shapes, pointers
//                                                                           and strides of each group
//   [ CUTLASS's own workspace: kCutlassWorkspaceBytes ]                     its TMA descriptors per SM
//   [ M-grouped: a's factors per group, M * K/128 fp32 ]                    CUTLASS's per-group layout
//   [ M-grouped: b's factors, G * N/128 * K/128 fp32 ]                      (why: §13.6)
#pragma once

#include <cstdint>

#include "mxq/mxq.h"

namespace mxq::detail {

constexpr int64_t kGroupArrays = 9;       // shapes, 5 pointer arrays, 3 stride arrays
constexpr int64_t kGroupSlotBytes = 16;   // the largest element of those arrays
constexpr int64_t kWorkspaceAlign = 256;  // every part starts 256-byte aligned
// The persistent kernel's grid is at most this many CTAs (an H100 SXM's SMs), so its workspace
// (a few TMA descriptors per CTA) has a bound that does not depend on the device.
constexpr int kMaxGemmCtas = 132;
constexpr int64_t kCutlassWorkspaceBytes = int64_t{1} << 19;

constexpr int64_t round_up_bytes(int64_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

struct GroupedGemmWorkspace {
  int64_t group_array_bytes = 0;  // one of the kGroupArrays arrays
  int64_t cutlass = 0;            // offsets from the workspace's start
  int64_t a_factors = 0;
  int64_t b_factors = 0;
  int64_t total = 0;
};

constexpr GroupedGemmWorkspace grouped_gemm_workspace(Grouping grouping, int64_t M, int64_t N,
                                                      int64_t K, int64_t num_groups) {
  GroupedGemmWorkspace w;
  w.group_array_bytes = round_up_bytes(num_groups * kGroupSlotBytes);
  w.cutlass = kGroupArrays * w.group_array_bytes;
  w.a_factors = w.cutlass + kCutlassWorkspaceBytes;
  w.b_factors = w.a_factors;
  w.total = w.a_factors;
  if (grouping == Grouping::kMGrouped) {
    w.b_factors = w.a_factors + round_up_bytes(M * (K / 128) * 4);
    w.total = w.b_factors + round_up_bytes(num_groups * (N / 128) * (K / 128) * 4);
  }
  return w;
}

}  // namespace mxq::detail
