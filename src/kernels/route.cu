// The routing plan of quantize_routed (docs/numerics.md §12, §12.1): from counts (E) and index (N) on
// the device, the padded row space's group ends offs_p (E) int32, each routed row's padded row dest
// (N) int32, and each padded row's source (RouteEntry: the row of x and the scale factor, or -1 for
// a zero row) for the routed tile kernels, which gather through it. The padded row space is laid out
// twice more, on purpose: by the CPU reference (src/ref/routed.cpp), the one this plan must equal
// byte for byte, and in torch by the Python layer (python/mxq) for the paths that pad outside this
// op.
//
// Every CTA scans counts itself (E <= 1024: a few microseconds of L2 reads, no second launch and no
// grid-wide barrier), then takes kRowsPerCta padded rows: the expert of padded row m is the first e
// with offs_p[e] > m (a binary search in shared memory), and row i of expert e is routed row
// begin_e + i while i < count_e, else padding.
//
// NOTES: index and counts are checked here, since the host cannot read them without a sync. A
// negative count counts as 0 and counts running past N are cut at N, so the groups always fit the
// Mp rows; an index outside [0, T) gives a zero row (never a read outside x); routed rows past the
// counts' sum get dest -1. Each is reported by a StatusBits bit OR-ed into the status word, which
// the host clears before the launch. offs_p is therefore always well formed for the tile kernel.
#include <cuda_runtime.h>

#include <type_traits>

#include "common.cuh"
#include "dispatch.h"
#include "quantize.h"

namespace mxq::kernels {
namespace {

constexpr int kPlanThreads = 256;
constexpr int kGroupsPerThread = kMaxGroups / kPlanThreads;  // 4
constexpr int kRowsPerThread = 4;
constexpr int kRowsPerCta = kPlanThreads * kRowsPerThread;  // 1024 padded rows
static_assert(kGroupsPerThread * kPlanThreads == kMaxGroups, "a thread scans whole groups");
static_assert(kPlanThreads % 32 == 0 && kPlanThreads / 32 <= 32, "one warp scans the warp sums");

struct PlanShared {
  int32_t begin[kMaxGroups];  // first routed row of expert e
  int32_t count[kMaxGroups];  // its routed rows, after the clamps
  int32_t end_p[kMaxGroups];  // offs_p[e]
  int64_t warp_sum[kPlanThreads / 32];
};

// Exclusive prefix sum of one int64 per thread over the CTA; `total` gets the sum of all. Every
// thread calls it (two barriers).
__device__ __forceinline__ int64_t cta_exclusive_scan(int64_t v, int64_t* warp_sum,
                                                      int64_t& total) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int64_t inc = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int64_t n = __shfl_up_sync(0xFFFFFFFFu, inc, d);
    if (lane >= d) inc += n;
  }
  if (lane == 31) warp_sum[warp] = inc;
  __syncthreads();
  int64_t before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kPlanThreads / 32; ++w) {
    before += w < warp ? warp_sum[w] : 0;
    total += warp_sum[w];
  }
  __syncthreads();  // warp_sum is reused by the next scan
  return before + inc - v;
}

template <typename Int>
__device__ __forceinline__ int64_t load_int(const void* p, int64_t i) {
  return static_cast<const Int*>(p)[i];
}

// kAlign: the format's block, to which each group is padded (32: MXFP8, 128: FP8 blockwise).
template <bool kIndex64, bool kCounts64, int kAlign>
__global__ void __launch_bounds__(kPlanThreads) route_plan_kernel(const RoutePlanParams p) {
  using Index = std::conditional_t<kIndex64, int64_t, int32_t>;
  using Count = std::conditional_t<kCounts64, int64_t, int32_t>;
  __shared__ PlanShared sh;
  ptx::griddepcontrol_wait();  // nothing touches memory before the work before it is done

  // ---- counts: clamp, two prefix sums (routed rows, padded rows) ----
  const int t = threadIdx.x;
  int64_t clamped[kGroupsPerThread];
  int64_t local = 0;
  bool negative = false, over = false;
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int e = t * kGroupsPerThread + i;
    const int64_t c = e < p.E ? load_int<Count>(p.counts, e) : 0;
    negative |= c < 0;
    over |= c > p.N;
    clamped[i] = c < 0 ? 0 : (c > p.N ? p.N : c);
    local += clamped[i];
  }
  int64_t total = 0;
  int64_t start = cta_exclusive_scan(local, sh.warp_sum, total);  // before this thread's groups
  int64_t padded[kGroupsPerThread];
  int64_t local_p = 0;
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    const int64_t b = min(start, p.N);
    const int64_t n = min(start + clamped[i], p.N) - b;  // cut at N
    start += clamped[i];
    const int e = t * kGroupsPerThread + i;
    if (e < p.E) {
      sh.begin[e] = static_cast<int32_t>(b);
      sh.count[e] = static_cast<int32_t>(n);
    }
    padded[i] = round_up(n, kAlign);
    local_p += padded[i];
  }
  int64_t total_p = 0;
  int64_t end_p = cta_exclusive_scan(local_p, sh.warp_sum, total_p);
#pragma unroll
  for (int i = 0; i < kGroupsPerThread; ++i) {
    end_p += padded[i];
    const int e = t * kGroupsPerThread + i;
    if (e < p.E) {
      sh.end_p[e] = static_cast<int32_t>(end_p);
      if (blockIdx.x == 0) p.offs_p[e] = static_cast<int32_t>(end_p);
    }
  }
  // CTA 0 reports the counts (a count above N is cut, so it also breaks the sum).
  const bool any_negative = __syncthreads_or(negative);
  const bool any_over = __syncthreads_or(over);
  int32_t bad = 0;
  if (blockIdx.x == 0 && t == 0) {
    if (any_negative) bad |= kCountsNegative;
    if (any_over || total != p.N) bad |= kCountsSumNotN;
  }
  const int32_t rows_routed = static_cast<int32_t>(min(total, p.N));
  const int32_t rows_used = static_cast<int32_t>(total_p);

  // ---- padded rows: source, scale, dest ----
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int64_t m = int64_t(blockIdx.x) * kRowsPerCta + j * kPlanThreads + t;
    if (m >= p.Mp) break;
    RouteEntry out{-1, 1.f};
    if (m < rows_used) {
      int lo = 0, hi = p.E - 1;  // the first expert whose padded end lies past m
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (sh.end_p[mid] > m) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      const int32_t n = sh.count[lo];
      const int64_t i = m - (sh.end_p[lo] - round_up(n, kAlign));
      if (i < n) {
        const int64_t r = sh.begin[lo] + i;
        const int64_t src = load_int<Index>(p.index, r);
        if (src >= 0 && src < p.T) {
          out = {static_cast<int32_t>(src), p.scale != nullptr ? p.scale[r] : 1.f};
        } else {
          bad |= kIndexOutOfRange;
        }
        p.dest[r] = static_cast<int32_t>(m);
      }
    }
    *reinterpret_cast<int2*>(p.route + m) = make_int2(out.row, __float_as_int(out.scale));
  }
  // Routed rows past the counts' sum have no padded row.
  for (int64_t r = rows_routed + int64_t(blockIdx.x) * kPlanThreads + t; r < p.N;
       r += int64_t(gridDim.x) * kPlanThreads) {
    p.dest[r] = -1;
  }
  if (p.status != nullptr && bad != 0) atomicOr(p.status, bad);
}

}  // namespace

void launch_route_plan(const RoutePlanParams& p, cudaStream_t stream) {
  const int64_t ctas = ceil_div(p.Mp, kRowsPerCta);  // Mp >= 32: at least one
  MXQ_CHECK(ctas <= 0x7FFFFFFF, "too many padded rows for one launch: ", p.Mp);
  dispatch_bool(p.index64, [&](auto i) {
    dispatch_bool(p.counts64, [&](auto c) {
      dispatch<Mxfp8::kBlock, Fp8Blockwise::kBlock>(p.align, [&](auto a) {
        launch_dependent(
            route_plan_kernel<decltype(i)::value, decltype(c)::value, decltype(a)::value>,
            static_cast<unsigned>(ctas), kPlanThreads, 0, stream, p);
      });
    });
  });
}

}  // namespace mxq::kernels
