// Device helpers shared by the kernel families: the launch, packed block math, data stores, and
// the resolution of device-side group offsets (grouped / MoE mode) that every grouped kernel
// performs the same way. docs/performance.md describes the design these kernels share.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/check.h"
#include "mxq/layout.h"
#include "mxq/numerics.h"
#include "ptx.cuh"

namespace mxq::kernels {

// ---- launch ----
//
// Every mxq kernel is launched as a programmatic dependent of the work before it on the stream
// (programmatic stream serialization): its CTAs may be scheduled as that work's last CTAs exit, and
// each kernel's first statement, ptx::griddepcontrol_wait(), holds them until that work has
// completed and its writes are visible. So every read and write happens when it would after a plain
// launch; what is saved is part of the gap between two kernels. Captured in a CUDA graph, the
// dependency becomes a programmatic edge. No kernel lets its dependents in earlier
// (griddepcontrol.launch_dependents; docs/performance.md, "Programmatic dependent launch").
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), unsigned ctas, int threads, int smem_bytes,
                      cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute programmatic{};
  programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  programmatic.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  config.attrs = &programmatic;
  config.numAttrs = 1;
  (void)cudaLaunchKernelEx(&config, kernel, args...);
  MXQ_CHECK_CUDA(cudaGetLastError());  // the launch's error, also cleared for the next call
}

constexpr uint32_t kAbsMask2 = 0x7FFF7FFFu;
constexpr uint32_t kNanWord = 0x7F7F7F7Fu;  // four e4m3 NaN bytes

// ---- packed block math (bf16, fp16 and fp32 inputs) ----
//
// Every input type shares the block math: |v| is the sign-masked bit pattern, and for non-negative
// patterns unsigned order is value order with every NaN above Inf, so an unsigned max is the
// NaN-propagating amax (two 16-bit lanes per word for bf16 and fp16, one fp32 per word). Only
// widening to fp32 differs (a shift for bf16, cvt for fp16; both exact; fp32 is already there).

template <DType kIn>
struct Widen;
template <>
struct Widen<DType::kBFloat16> {
  static __device__ __forceinline__ float lo(uint32_t w) { return __uint_as_float(w << 16); }
  static __device__ __forceinline__ float hi(uint32_t w) {
    return __uint_as_float(w & 0xFFFF0000u);
  }
};
template <>
struct Widen<DType::kFloat16> {
  static __device__ __forceinline__ float lo(uint32_t w) { return ptx::cvt_f32_f16(w & 0xFFFFu); }
  static __device__ __forceinline__ float hi(uint32_t w) { return ptx::cvt_f32_f16(w >> 16); }
};

// One step of a running amax over words of input bits: m = max(m, |w|) lane-wise (16-bit types:
// both halves of the word; fp32: the word). Start from m = 0; amax_fold gives block_scale's input.
template <DType kIn>
__device__ __forceinline__ uint32_t amax_step(uint32_t m, uint32_t w) {
  if constexpr (kIn == DType::kFloat32) {
    return max(m, w & 0x7FFFFFFFu);
  } else {
    return ptx::max_u16x2(m, w & kAbsMask2);
  }
}
// The amax bit pattern of a running amax word: the larger 16-bit lane, or the fp32 word itself.
template <DType kIn>
__device__ __forceinline__ uint32_t amax_fold(uint32_t m) {
  if constexpr (kIn == DType::kFloat32) {
    return m;
  } else {
    return max(m & 0xFFFFu, m >> 16);
  }
}

// Scale byte, multiplier and NaN mask of one block from its amax (the input's bit pattern, as
// amax_fold gives it: 16-bit in the low half, or fp32). NOTES: a NaN/Inf block (s = 255) is
// written as 0x7F bytes through `nan` (all ones) with plain bit operations, not a conditional,
// which ptxas turns into a branch around the conversion (docs/performance.md, "NaN blocks").
struct BlockScale {
  uint8_t s;
  float r;
  uint32_t nan;
  __device__ __forceinline__ uint32_t select(uint32_t q) const {
    return (q & ~nan) | (kNanWord & nan);
  }
};
template <DType kIn, ScalingMode kMode>
__device__ __forceinline__ BlockScale block_scale(uint32_t amax_bits) {
  float amax;
  if constexpr (kIn == DType::kFloat32) {
    amax = __uint_as_float(amax_bits);
  } else {
    amax = Widen<kIn>::lo(amax_bits);
  }
  const uint8_t s = e8m0_from_amax(amax, kMode);
  return {s, e8m0_reciprocal(s), s == kE8m0Nan ? 0xFFFFFFFFu : 0u};
}

// Four e4m3 bytes from two words of two 16-bit values each (element order kept: w0.lo, w0.hi,
// w1.lo, w1.hi).
template <DType kIn>
__device__ __forceinline__ uint32_t quantize_words(uint32_t w0, uint32_t w1, float r) {
  using W = Widen<kIn>;
  const uint32_t lo = ptx::cvt_e4m3x2(mul_rn(W::hi(w0), r), mul_rn(W::lo(w0), r));
  const uint32_t hi = ptx::cvt_e4m3x2(mul_rn(W::hi(w1), r), mul_rn(W::lo(w1), r));
  return lo | (hi << 16);
}
// Four e4m3 bytes from four fp32 words v[0..3] (element order kept).
__device__ __forceinline__ uint32_t quantize_words_f32(const uint32_t* v, float r) {
  const uint32_t lo =
      ptx::cvt_e4m3x2(mul_rn(__uint_as_float(v[1]), r), mul_rn(__uint_as_float(v[0]), r));
  const uint32_t hi =
      ptx::cvt_e4m3x2(mul_rn(__uint_as_float(v[3]), r), mul_rn(__uint_as_float(v[2]), r));
  return lo | (hi << 16);
}

// ---- one 32-element piece: its amax and its 32 bytes at a given scale ----
// Both formats build their blocks from these: an MXFP8 block is one piece, an FP8 blockwise block
// four (blockwise.cuh). Row pieces come as the 4 chunks of a staged 16-bit row, column pieces as
// the 16 words ldmatrix.trans hands over (two elements each, element order).
template <DType kIn>
__device__ __forceinline__ uint32_t row_piece_amax(const uint4 (&v)[4]) {
  uint32_t m2 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m2 = ptx::max_u16x2(m2, ptx::max_u16x2(ptx::max_u16x2(v[i].x & kAbsMask2, v[i].y & kAbsMask2),
                                           ptx::max_u16x2(v[i].z & kAbsMask2, v[i].w & kAbsMask2)));
  }
  return amax_fold<kIn>(m2);
}
template <DType kIn>
__device__ __forceinline__ void convert_row_piece(const uint4 (&v)[4], const BlockScale& bs,
                                                  uint4 (&q)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    q[h] = make_uint4(bs.select(quantize_words<kIn>(v[2 * h].x, v[2 * h].y, bs.r)),
                      bs.select(quantize_words<kIn>(v[2 * h].z, v[2 * h].w, bs.r)),
                      bs.select(quantize_words<kIn>(v[2 * h + 1].x, v[2 * h + 1].y, bs.r)),
                      bs.select(quantize_words<kIn>(v[2 * h + 1].z, v[2 * h + 1].w, bs.r)));
  }
}
template <DType kIn>
__device__ __forceinline__ uint32_t col_piece_amax(const uint32_t (&w)[16]) {
  uint32_t m2 = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) m2 = amax_step<kIn>(m2, w[i]);
  return amax_fold<kIn>(m2);
}
template <DType kIn>
__device__ __forceinline__ void convert_col_piece(const uint32_t (&w)[16], const BlockScale& bs,
                                                  uint4 (&q)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t* v = w + 8 * h;
    q[h] = make_uint4(bs.select(quantize_words<kIn>(v[0], v[1], bs.r)),
                      bs.select(quantize_words<kIn>(v[2], v[3], bs.r)),
                      bs.select(quantize_words<kIn>(v[4], v[5], bs.r)),
                      bs.select(quantize_words<kIn>(v[6], v[7], bs.r)));
  }
}

// fp32 pieces (32 words): amax as an unsigned max of the sign-masked patterns (NaN above Inf, as
// for 16-bit input; written out rather than through amax_step<kFloat32>, whose commuted max
// operands ptxas schedules in another order on sm_90a), and the 32 bytes.
__device__ __forceinline__ uint32_t f32_piece_amax(const uint32_t (&v)[32]) {
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) m = max(m, v[i] & 0x7FFFFFFFu);
  return m;
}
__device__ __forceinline__ void convert_f32_piece(const uint32_t (&v)[32], const BlockScale& bs,
                                                  uint4 (&q)[2]) {
  uint32_t* words = reinterpret_cast<uint32_t*>(q);
#pragma unroll
  for (int w = 0; w < 8; ++w) words[w] = bs.select(quantize_words_f32(v + 4 * w, bs.r));
}

// ---- data stores ----

// One 16-byte global store, .cs (streaming) when kStreaming. Only the expert-weight kernel streams
// its stores; the activation kernels store plainly (docs/performance.md, "Stores").
template <bool kStreaming = false>
__device__ __forceinline__ void store16(void* ptr, uint4 v) {
  if constexpr (kStreaming) {
    ptx::st_global_cs_v4(ptr, v);
  } else {
    ptx::st_global_v4(ptr, v);
  }
}

// Lanes 2i and 2i+1 each hold 32 bytes, q[0] and q[1] (the e4m3 bytes of one block, or dequantize's
// 16 bf16 of half a block), and their pieces are adjacent in one output row. The lanes exchange
// half a piece so that each 16-byte store of the pair completes one 32-byte sector: the even lane
// stores its first half and, one piece on, its neighbour's first half; the odd lane its
// neighbour's second half, then its own second half. q_pair = the even lane's piece + 16 * (lane is
// odd); the stores into the pair's first and second piece happen only where first / second say the
// piece lies inside the output. Every lane of the warp calls it (shuffles). kStreaming: .cs stores
// (store16).
template <bool kStreaming = false>
__device__ __forceinline__ void store_block_pair(uint8_t* q_pair, const uint4 (&q)[2], bool first,
                                                 bool second) {
  const bool odd = threadIdx.x & 1;
  const uint4 send = odd ? q[0] : q[1];
  uint4 recv;
  recv.x = __shfl_xor_sync(0xFFFFFFFFu, send.x, 1);
  recv.y = __shfl_xor_sync(0xFFFFFFFFu, send.y, 1);
  recv.z = __shfl_xor_sync(0xFFFFFFFFu, send.z, 1);
  recv.w = __shfl_xor_sync(0xFFFFFFFFu, send.w, 1);
  if (first) store16<kStreaming>(q_pair, odd ? recv : q[0]);
  if (second) store16<kStreaming>(q_pair + sizeof(q), odd ? q[1] : recv);
}

// ---- grouped mode: the groups' segments ----
//
// NOTES: offs lives on the device, so it is checked there. Each end is clamped to [0, M] and
// rounded down to a multiple of kGroupAlign, and groups are taken as the running maximum of those
// ends. A malformed offs therefore still describes ordered, in-bounds, aligned groups that
// partition [0, M) with the tail — nothing can be written outside the outputs — and the status
// word reports what was wrong. The layouts then need two prefix sums over the groups: each M-groups
// segment's first blocked atom-row, each K-group's first padded scale column.
//
// A CTA needs them only for the few segments its tile's 32-row bands fall in, so one warp scans
// offs (scan_groups: warp-wide prefix max and sums, no table, no CTA barrier) and hands each band
// its segment as it passes, while the other warps go on with their tiles.

__device__ __forceinline__ int32_t sanitized_offset(int32_t v, int64_t M) {
  const int64_t clamped = v < 0 ? 0 : (v > M ? M : v);
  return static_cast<int32_t>(clamped - clamped % kGroupAlign);
}

// One group's rows [begin, end), or the tail's (the rows after the last group, to M), and where
// its scales start: its first blocked atom-row (M-groups) and first padded scale column (K-groups;
// for the tail, where the slack starts).
struct Segment {
  int64_t begin, end;
  int32_t row_atom, col_base;
  bool tail;
};

// Inclusive scan of one int32 per lane over a warp (every lane calls it).
template <typename Op>
__device__ __forceinline__ int32_t warp_inclusive_scan(int32_t v, Op op) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t n = __shfl_up_sync(0xFFFFFFFFu, v, d);
    if (lane >= d) v = op(v, n);
  }
  return v;
}

// Every lane of one warp calls it. Passes of 32 * kPer groups: lane l owns groups
// [kPer l, kPer l + kPer) of the pass (its loads all in flight at once); warp scans give the ends
// (running max) and the two prefix sums, carried from pass to pass. visit(segment) runs on the
// owning lane for every group, then on lane 0 for the tail. Returns the tail segment (its row_atom
// and col_base: the totals).
template <int kPer, typename Visit>
__device__ __forceinline__ Segment scan_groups_by(const int32_t* offs, int G, int64_t M,
                                                  Visit&& visit) {
  constexpr int kPass = 32 * kPer;
  const int lane = threadIdx.x & 31;
  const auto max_op = [](int32_t a, int32_t b) { return max(a, b); };
  const auto plus = [](int32_t a, int32_t b) { return a + b; };
  const auto atom_rows = [](int32_t n) { return static_cast<int32_t>(ceil_div(n, kAtomRows)); };
  const auto padded_cols = [](int32_t n) {
    return static_cast<int32_t>(round_up(n / kBlock, kAtomCols));
  };
  int32_t last_end = 0, rows_done = 0, cols_done = 0;  // carried from the earlier passes
  for (int pass = 0; pass < G; pass += kPass) {
    const int g0 = pass + kPer * lane;
    int32_t e[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) e[i] = g0 + i < G ? sanitized_offset(offs[g0 + i], M) : 0;
    int32_t run = last_end;
#pragma unroll
    for (int i = 0; i < kPer; ++i) e[i] = run = max(run, e[i]);
    const int32_t run_all = warp_inclusive_scan(run, max_op);
    int32_t before = __shfl_up_sync(0xFFFFFFFFu, run_all, 1);  // the ends of the lanes before
    if (lane == 0) before = last_end;
    int32_t rows = 0, cols = 0, prev = before;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      e[i] = max(e[i], before);
      if (g0 + i < G) {
        rows += atom_rows(e[i] - prev);
        cols += padded_cols(e[i] - prev);
      }
      prev = e[i];
    }
    const int32_t rows_all = warp_inclusive_scan(rows, plus);
    const int32_t cols_all = warp_inclusive_scan(cols, plus);
    Segment seg{before, before, rows_done + rows_all - rows, cols_done + cols_all - cols, false};
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (g0 + i < G) {
        seg.end = e[i];
        visit(static_cast<const Segment&>(seg));
        seg.row_atom += atom_rows(e[i] - static_cast<int32_t>(seg.begin));
        seg.col_base += padded_cols(e[i] - static_cast<int32_t>(seg.begin));
        seg.begin = e[i];
      }
    }
    last_end = __shfl_sync(0xFFFFFFFFu, run_all, 31);
    rows_done += __shfl_sync(0xFFFFFFFFu, rows_all, 31);
    cols_done += __shfl_sync(0xFFFFFFFFu, cols_all, 31);
  }
  const Segment tail{last_end, M, rows_done, cols_done, true};
  if (lane == 0) visit(tail);
  return tail;
}

// The scan with as few groups per lane as G allows: its sequential part (a lane's groups, one after
// another) is kPer deep, and every grouped CTA's planning waits for it (docs/performance.md,
// "Grouped (MoE)").
template <typename Visit>
__device__ __forceinline__ Segment scan_groups(const int32_t* offs, int G, int64_t M,
                                               Visit&& visit) {
  if (G <= 32) return scan_groups_by<1>(offs, G, M, visit);
  if (G <= 64) return scan_groups_by<2>(offs, G, M, visit);
  return scan_groups_by<8>(offs, G, M, visit);
}

// The segment holding each of the kBands 32-row bands [m0 + 32c, m0 + 32c + 32) that lie below M,
// into segment[c] (shared memory; a band lies in exactly one segment). One warp calls it; the
// segments are the warp's to read when it returns.
template <int kBands>
__device__ __forceinline__ void locate_bands(const int32_t* offs, int G, int64_t M, int64_t m0,
                                             Segment* segment) {
  scan_groups(offs, G, M, [&](const Segment& s) {
    if (s.end <= m0 || s.begin >= m0 + kBands * kBlock) return;
#pragma unroll
    for (int c = 0; c < kBands; ++c) {
      const int64_t m = m0 + int64_t(c) * kBlock;
      if (s.begin <= m && m < s.end) segment[c] = s;
    }
  });
  __syncwarp();
}

// StatusBits describing offs, by one warp; kAlign: the format's block (32 or 128).
template <int kAlign = kGroupAlign>
__device__ __forceinline__ int32_t offs_status_warp(const int32_t* offs, int num_groups,
                                                    int64_t M) {
  int32_t status = 0;
  for (int g = threadIdx.x & 31; g < num_groups; g += 32) {
    const int32_t v = offs[g];
    const int32_t prev = g > 0 ? offs[g - 1] : 0;
    if (v < prev) status |= kOffsDecreasing;
    if (v > M) status |= kOffsBeyondM;
    if (v % kAlign != 0) status |= kOffsMisaligned;
  }
  return __reduce_or_sync(0xFFFFFFFFu, status);
}

// Grouped launches append zero-fill CTAs after their work CTAs. Slack is every byte after the last
// K-group's region of s_col (the tail's colwise scales are zeroed, not placed), and every s_row byte
// after the last M-groups segment, which lies in the allocation's last 128*G rows (the segments
// take at least roundup(M,128) rows). Each zero-fill CTA takes one 64 KiB span of s_col, then of
// those s_row rows; zero-fill CTA 0 also writes the status word.
constexpr int64_t kZeroSpan = 64 * 1024;
__host__ __device__ constexpr int64_t zero_fill_col_ctas(int64_t M, int64_t K, int64_t G) {
  return ceil_div(s_col_shape(M, K, G).bytes(), kZeroSpan);
}
__host__ __device__ constexpr int64_t zero_fill_row_ctas(int64_t K, int64_t G) {
  return ceil_div(kAtomRows * G * round_up(K / kBlock, kAtomCols), kZeroSpan);
}

__device__ __forceinline__ void zero_range(uint8_t* p, int64_t begin, int64_t end) {
  // begin and end are multiples of 16 (atoms, spans, allocation ends): 16-byte stores tile it.
  for (int64_t i = begin + threadIdx.x * 16; i < end; i += blockDim.x * 16) {
    ptx::st_global_v4(p + i, make_uint4(0, 0, 0, 0));
  }
}

// Zero-fill CTA z (0-based among them): s_row / s_col null when that axis is not written. Every
// warp scans offs for the totals itself (no barrier).
__device__ __forceinline__ void zero_fill_slack(const int32_t* offs, int G, int64_t M,
                                                uint8_t* s_row, uint8_t* s_col, int64_t K,
                                                int64_t z, int32_t* status) {
  const Segment tail = scan_groups(offs, G, M, [](const Segment&) {});
  if (z == 0 && status != nullptr && threadIdx.x < 32) {
    const int32_t bits = offs_status_warp(offs, G, M);
    if (threadIdx.x == 0) *status = bits;
  }
  const int64_t col_ctas = s_col != nullptr ? zero_fill_col_ctas(M, K, G) : 0;
  if (z < col_ctas) {
    const int64_t total = s_col_shape(M, K, G).bytes();
    const int64_t slack = int64_t(tail.col_base) * round_up(K, kAtomRows);
    zero_range(s_col, max(slack, z * kZeroSpan), min(total, (z + 1) * kZeroSpan));
  } else if (s_row != nullptr) {
    const int64_t cols = round_up(K / kBlock, kAtomCols);
    const int64_t region = round_up(M, kAtomRows) * cols;  // the last 128*G rows
    const int64_t total = s_row_shape(M, K, G).bytes();
    const int64_t span = region + (z - col_ctas) * kZeroSpan;
    // The first blocked row past the tail segment: every s_row byte from there on is slack.
    const int64_t rows_used = (tail.row_atom + ceil_div(M - tail.begin, kAtomRows)) * kAtomRows;
    zero_range(s_row, max(rows_used * cols, span), min(total, span + kZeroSpan));
  }
}

}  // namespace mxq::kernels
