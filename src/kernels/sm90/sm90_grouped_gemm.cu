// mxq::grouped_gemm on SM90 (docs/numerics.md §13.6): CUTLASS 4.2.0's pointer-array (grouped) FP8
// GEMM with blockwise scaling, the collective of
// cutlass/gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp,
// e4m3 x e4m3 with fp32 factors, fp32 accumulation (the factors applied per 128-deep K block as the
// collective promotes its accumulators), bf16 out.
//
//   M-grouped: group g computes out[s_g:e_g, :] (rows, N) = a[s_g:e_g, :] (rows, K) . b[g] (N, K)^T
//   K-grouped: group g computes out[g] (N, K) = a[:, s_g:e_g] (N, cols) . b[:, s_g:e_g] (K, cols)^T
//
// Both are CUTLASS's "TN" GEMM (A and B K-major, the only FP8 GMMA operand order), D row-major. One
// kernel (prepare_groups) turns offs into the per-group problems on the device, then CUTLASS runs.
//
// NOTES: how our factor layouts reach CUTLASS.
//  - In the grouped kernel the collective ignores Arguments::layout_SFA / layout_SFB: load_init
//    (the header above, lines 429-434, called per group from tensors_perform_update, lines
//    1221-1227) rebuilds each group's factor layout from the group's problem shape with
//    ScaleConfig::tile_atom_to_shape_SFA/SFB (cutlass/detail/blockwise_scale_layout.hpp), i.e.
//    MN-major with the *group's* extent as the outer stride. So only a per-group pointer is ours.
//  - K-grouped: a's factors (N, M/128) strides (1, N) sliced at column s_g/128 are exactly that
//    layout for M' = N (stride N), and b's (K, M/128) strides (1, K) for N' = K: no copy.
//  - M-grouped: a's factors (M, K/128) have the outer stride M, not the group's rows, and b's tile
//    factors are row-major with rows padded to roundup(K/128, 4) (§13.4). prepare_groups copies both
//    into the workspace in the layout above: a's M*K/128 floats (1/32 of a's bytes) and b's
//    G*(N/128)*(K/128) floats. Nothing else is copied.
#include <cuda_runtime.h>

#include "../../common/check.h"
#include "../grouped_gemm.h"
#include "../launch.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace mxq::kernels {

constexpr int kBlock = 128;  // FP8 blockwise block; N, K, M and every group end are multiples

// ---- the GEMM types: one instantiation per grouping ----
// At namespace scope: assembled inside a class template, CUTLASS 4.2.0's epilogue builder does not
// parse with g++ (a dependent name without `typename` in Sm90TmaBuilderImpl).
using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;  // (BLK_M, BLK_N, BLK_K)
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K)
using ElementAB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // (M, K), K fastest
using LayoutB = cutlass::layout::ColumnMajor;  // (N, K), K fastest
using LayoutD = cutlass::layout::RowMajor;     // (M, N), N fastest
constexpr int kAlignAB = 16;                   // elements: 16 bytes of e4m3
constexpr int kAlignD = 8;                     // elements: 16 bytes of bf16

using Epilogue = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD,
    ElementD, LayoutD*, kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float, void>>::CollectiveOp;

// Factor granularity (M, N, K): a's factors cover 1x128 in both groupings; b's a 128x128 tile
// (M-grouped: the weight) or 1x128 (K-grouped: X's 128x1 colwise blocks, seen as (K, M)).
template <int kScaleN>
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleN, kBlock>;

template <class Scale>
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB,
    cute::tuple<LayoutA*, decltype(Scale::deduce_layoutSFA())*>, kAlignAB, ElementAB,
    cute::tuple<LayoutB*, decltype(Scale::deduce_layoutSFB())*>, kAlignAB, float, TileShape,
    ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;

using MGroupedKernel =
    cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop<ScaleConfig<kBlock>>, Epilogue>;
using KGroupedKernel =
    cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop<ScaleConfig<1>>, Epilogue>;

template <Grouping kGrouping>
struct GemmConfig {
  using Kernel =
      std::conditional_t<kGrouping == Grouping::kMGrouped, MGroupedKernel, KGroupedKernel>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using ElementA = ElementAB;
  using ElementD = kernels::ElementD;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  static_assert(sizeof(Shape) <= detail::kGroupSlotBytes &&
                    sizeof(StrideA) <= detail::kGroupSlotBytes &&
                    sizeof(StrideB) <= detail::kGroupSlotBytes &&
                    sizeof(StrideD) <= detail::kGroupSlotBytes,
                "a per-group record outgrew its slot in the workspace (grouped_gemm.h)");
  static_assert(Kernel::CollectiveMainloop::ScaleGranularityK == kBlock,
                "one factor per 128-deep K block");
};

// The per-group arrays CUTLASS reads, carved from the workspace (grouped_gemm.h).
template <Grouping kGrouping>
struct GroupArrays {
  using C = GemmConfig<kGrouping>;
  typename C::Shape* shape;
  const typename C::ElementA** a;
  const typename C::ElementA** b;
  const float** sfa;
  const float** sfb;
  typename C::ElementD** d;
  typename C::StrideA* stride_a;
  typename C::StrideB* stride_b;
  typename C::StrideD* stride_d;
};

struct PrepareArgs {
  const uint8_t* a;
  const float* a_scale;
  const uint8_t* b;
  const float* b_scale;
  const int32_t* offs;
  int num_groups;
  int64_t M, N, K;
  __nv_bfloat16* out;
  float* a_factors;  // M-grouped: a's factors, group by group (workspace)
  float* b_factors;  // M-grouped: b's tile factors, (N/128, K/128) N fastest per group (workspace)
  int32_t* status;
};

constexpr int kPrepareThreads = 256;
constexpr int kPrepareBlocksPerGroup = 16;  // grid (16, G + 1): the copies and zero fills of one
                                            // group spread over 16 CTAs

// ---- helpers ----
// The clamped end of group g (offs rounded down to 128, kept in [previous end, M]): a running max,
// so every group reads the same ends its neighbours do.
__device__ __forceinline__ int64_t group_end(const int32_t* offs, int g, int64_t M) {
  int64_t end = 0;
  for (int j = 0; j <= g; ++j) {
    const int64_t e = offs[j] < 0 ? 0 : int64_t(offs[j]) / kBlock * kBlock;
    end = e > end ? e : end;
  }
  return end < M ? end : M;
}

__device__ __forceinline__ int32_t offs_status(const int32_t* offs, int num_groups, int64_t M) {
  int32_t status = 0;
  int64_t prev = 0;
  for (int g = 0; g < num_groups; ++g) {
    const int64_t e = offs[g];
    if (e < prev) status |= kOffsDecreasing;
    if (e > M) status |= kOffsBeyondM;
    if (e % kBlock != 0) status |= kOffsMisaligned;
    prev = e > prev ? e : prev;
  }
  return status;
}

// Zeros bf16 out[begin, end) (element offsets, multiples of 8: 16-byte stores), CTA `cta` of
// `ctas` taking its share.
__device__ __forceinline__ void zero_fill(__nv_bfloat16* out, int64_t begin, int64_t end,
                                          int64_t cta, int64_t ctas) {
  uint4* dst = reinterpret_cast<uint4*>(out + begin);
  const int64_t n = (end - begin) / 8;
  for (int64_t i = cta * blockDim.x + threadIdx.x; i < n; i += ctas * blockDim.x) {
    dst[i] = make_uint4(0, 0, 0, 0);
  }
}

// A K-major operand's or a row-major D's stride (mode 0: the leading dimension, mode 1: 1).
template <class Stride>
__device__ __forceinline__ Stride leading(int64_t ld) {
  Stride stride{};
  cute::get<0>(stride) = ld;
  return stride;
}

// ---- prepare_groups: offs -> per-group problems; the factor copies; the zero fills ----
// blockIdx.y = g < G: group g; blockIdx.y = G: the status word. M-grouped, every CTA zeros a share
// of the tail rows.
template <Grouping kGrouping>
__global__ void __launch_bounds__(kPrepareThreads)
    prepare_groups_kernel(PrepareArgs p, GroupArrays<kGrouping> arrays) {
  using C = GemmConfig<kGrouping>;
  const int g = blockIdx.y;
  const bool first_thread = blockIdx.x == 0 && threadIdx.x == 0;
  if (kGrouping == Grouping::kMGrouped) {
    // The tail rows (up to 127 per group in the padded row space: tens of MB) by every CTA.
    zero_fill(p.out, group_end(p.offs, p.num_groups - 1, p.M) * p.N, p.M * p.N,
              int64_t(g) * gridDim.x + blockIdx.x, int64_t(gridDim.y) * gridDim.x);
  }
  if (g == p.num_groups) {
    if (first_thread && p.status != nullptr) *p.status = offs_status(p.offs, p.num_groups, p.M);
    return;
  }
  const int64_t start = g == 0 ? 0 : group_end(p.offs, g - 1, p.M);
  const int64_t end = group_end(p.offs, g, p.M);
  const int64_t len = end - start;  // rows (M-grouped) or contraction (K-grouped) of group g
  const auto* a = reinterpret_cast<const typename C::ElementA*>(p.a);
  const auto* b = reinterpret_cast<const typename C::ElementA*>(p.b);
  auto* out = reinterpret_cast<typename C::ElementD*>(p.out);
  const int64_t kb = p.K / kBlock;
  const int64_t nb = p.N / kBlock;

  if constexpr (kGrouping == Grouping::kMGrouped) {
    if (first_thread) {
      arrays.shape[g] = {int(len), int(p.N), int(p.K)};
      arrays.a[g] = a + start * p.K;
      arrays.b[g] = b + g * p.N * p.K;
      arrays.sfa[g] = p.a_factors + start * kb;
      arrays.sfb[g] = p.b_factors + g * nb * kb;
      arrays.d[g] = out + start * p.N;
      arrays.stride_a[g] = leading<typename C::StrideA>(p.K);
      arrays.stride_b[g] = leading<typename C::StrideB>(p.K);
      arrays.stride_d[g] = leading<typename C::StrideD>(p.N);
    }
    const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    // a's factors: [j * M + m] (outer stride M) -> [start * kb + j * len + (m - start)].
    for (int64_t i = tid; i < len * kb; i += step) {
      const int64_t j = i / len;
      const int64_t m = start + i % len;
      p.a_factors[start * kb + i] = p.a_scale[j * p.M + m];
    }
    // b's tile factors: row-major (nb, roundup(kb, 4)) -> (nb, kb) N fastest.
    const int64_t kb_padded = (kb + 3) / 4 * 4;
    for (int64_t i = tid; i < nb * kb; i += step) {
      const int64_t tk = i / nb;
      const int64_t tn = i % nb;
      p.b_factors[g * nb * kb + i] = p.b_scale[(g * nb + tn) * kb_padded + tk];
    }
  } else {
    if (first_thread) {
      // An empty group gets no tiles (M' = 0) and its out[g] is zeroed below.
      arrays.shape[g] = {len == 0 ? 0 : int(p.N), int(p.K), int(len)};
      arrays.a[g] = a + start;
      arrays.b[g] = b + start;
      arrays.sfa[g] = p.a_scale + start / kBlock * p.N;
      arrays.sfb[g] = p.b_scale + start / kBlock * p.K;
      arrays.d[g] = out + g * p.N * p.K;
      // a (N, M) and b (K, M) row-major: the group's columns with leading dimension M.
      arrays.stride_a[g] = leading<typename C::StrideA>(p.M);
      arrays.stride_b[g] = leading<typename C::StrideB>(p.M);
      arrays.stride_d[g] = leading<typename C::StrideD>(p.K);
    }
    if (len == 0) zero_fill(p.out, g * p.N * p.K, (g + 1) * p.N * p.K, blockIdx.x, gridDim.x);
  }
}

// ---- host ----
template <Grouping kGrouping>
void run_grouped_gemm(const GroupedGemmParams& p, int sm_count) {
  using C = GemmConfig<kGrouping>;
  const auto layout = detail::grouped_gemm_workspace(p.grouping, p.M, p.N, p.K, p.num_groups);
  auto* ws = static_cast<char*>(p.workspace);
  auto array = [&](int i) { return ws + i * layout.group_array_bytes; };
  GroupArrays<kGrouping> arrays{reinterpret_cast<typename C::Shape*>(array(0)),
                                reinterpret_cast<const typename C::ElementA**>(array(1)),
                                reinterpret_cast<const typename C::ElementA**>(array(2)),
                                reinterpret_cast<const float**>(array(3)),
                                reinterpret_cast<const float**>(array(4)),
                                reinterpret_cast<typename C::ElementD**>(array(5)),
                                reinterpret_cast<typename C::StrideA*>(array(6)),
                                reinterpret_cast<typename C::StrideB*>(array(7)),
                                reinterpret_cast<typename C::StrideD*>(array(8))};
  const PrepareArgs args{p.a,
                         p.a_scale,
                         p.b,
                         p.b_scale,
                         p.offs,
                         int(p.num_groups),
                         p.M,
                         p.N,
                         p.K,
                         static_cast<__nv_bfloat16*>(p.out),
                         reinterpret_cast<float*>(ws + layout.a_factors),
                         reinterpret_cast<float*>(ws + layout.b_factors),
                         p.status};
  const dim3 grid(kPrepareBlocksPerGroup, unsigned(p.num_groups) + 1);
  prepare_groups_kernel<kGrouping><<<grid, kPrepareThreads, 0, p.stream>>>(args, arrays);
  MXQ_CHECK_CUDA(cudaGetLastError());
  if (p.M == 0) return;  // no group has rows: the zero fills were all there was to write

  typename C::Gemm::Arguments gemm_args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {int(p.num_groups), arrays.shape, nullptr},  // the shapes live on the device only
      // layout_SFA / layout_SFB (nullptr): unused by the grouped collective (NOTES above).
      {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b, arrays.sfa, nullptr, arrays.sfb,
       nullptr},
      {{}, nullptr, arrays.stride_d, arrays.d, arrays.stride_d}};
  gemm_args.epilogue.thread.alpha = 1.0f;
  gemm_args.epilogue.thread.beta = 0.0f;
  cudaGetDevice(&gemm_args.hw_info.device_id);
  gemm_args.hw_info.sm_count = sm_count < detail::kMaxGemmCtas ? sm_count : detail::kMaxGemmCtas;

  typename C::Gemm gemm;
  const cutlass::Status fits = gemm.can_implement(gemm_args);
  MXQ_CHECK_SUPPORTED(fits == cutlass::Status::kSuccess,
                      "CUTLASS cannot run this grouped GEMM: ", cutlassGetStatusString(fits));
  const size_t cutlass_bytes = C::Gemm::get_workspace_size(gemm_args);
  MXQ_CHECK_SUPPORTED(int64_t(cutlass_bytes) <= detail::kCutlassWorkspaceBytes,
                      "CUTLASS's workspace needs ", cutlass_bytes, " bytes, more than the ",
                      detail::kCutlassWorkspaceBytes, " reserved (src/kernels/grouped_gemm.h)");
  const cutlass::Status status = gemm.initialize(gemm_args, ws + layout.cutlass, p.stream);
  MXQ_CHECK_SUPPORTED(status == cutlass::Status::kSuccess,
                      "CUTLASS refused the grouped GEMM: ", cutlassGetStatusString(status));
  const cutlass::Status ran = gemm.run(p.stream);
  MXQ_CHECK_CUDA(cudaGetLastError());
  MXQ_CHECK_SUPPORTED(ran == cutlass::Status::kSuccess,
                      "CUTLASS failed to launch: ", cutlassGetStatusString(ran));
}

}  // namespace mxq::kernels

namespace mxq::detail {

void launch_grouped_gemm(const GroupedGemmParams& p) {
  int device = 0;
  MXQ_CHECK_CUDA(cudaGetDevice(&device));
  int major = 0;
  int minor = 0;
  MXQ_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MXQ_CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  // sm_90a code runs on compute capability 9.0 only.
  MXQ_CHECK_SUPPORTED(major == 9 && minor == 0, "needs an SM90 GPU (H100, H200); device ", device,
                      " is compute capability ", major, ".", minor);
  const int sm_count = multiprocessor_count();
  if (p.grouping == Grouping::kMGrouped) {
    kernels::run_grouped_gemm<Grouping::kMGrouped>(p, sm_count);
  } else {
    kernels::run_grouped_gemm<Grouping::kKGrouped>(p, sm_count);
  }
}

}  // namespace mxq::detail
