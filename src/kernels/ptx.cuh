// The only file with inline PTX: one wrapper per instruction, each naming its PTX ISA section. mxq
// compiles for sm_90a and sm_100a only; every wrapper here exists on both (sm_90 and later), and
// the host refuses other devices before any launch (require_supported_device).
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "mxq kernels need sm_90 or later (max.u16x2, cvt.satfinite.e4m3x2.f32, cvt.f16x2.e4m3x2)"
#endif

namespace mxq::ptx {

// ld (9.7.9.8): 16-byte read-only global load that does not allocate in L1 (the data is streamed
// exactly once), under a predicate: 16 zero bytes when `pred` is false (nothing is read then).
__device__ __forceinline__ uint4 ld_global_nc_v4_if(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %5, 0;\n\t"
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(int(pred)));
  return v;
}

// cp.async (non-bulk asynchronous copy): 16 bytes global -> shared, cached in L2 only (.cg); with
// `in` false nothing is read and 16 zero bytes are written (src-size 0). wait_all: until every
// cp.async of this thread has completed (its shared-memory writes are then visible to the thread;
// a barrier makes them visible to others).
__device__ __forceinline__ void cp_async_cg_16(void* smem, const void* gmem, bool in) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(in ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// griddepcontrol (9.7.13.13): programmatic dependent launch. wait: until every grid this one
// depends on has completed and its memory operations are visible to this grid (at once for a launch
// without a programmatic dependency). launch_dependents: the grids launched as this grid's
// programmatic dependents may be scheduled once every CTA of this grid has issued it or exited;
// they still wait for this grid's end before they touch memory. mxq's kernels leave it implicit (at
// exit: common.cuh launch_dependent says why); the GPU tests' kernel before an mxq launch issues it
// at its start.
__device__ __forceinline__ void griddepcontrol_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// st (9.7.9.10): 16-byte global stores.
__device__ __forceinline__ void st_global_v4(void* ptr, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// The same 16-byte store with .cs (cache streaming: the data is written once and not read back,
// so its lines are evicted first).
__device__ __forceinline__ void st_global_cs_v4(void* ptr, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// bar (9.7.13.1): named barrier kId (1..15; 0 is __syncthreads) over `threads` threads, a
// multiple of 32 given by whole warps; orders the shared-memory accesses of the participants. The
// id is an immediate so that ptxas reserves only the barriers a kernel names (a register id
// reserves all 16).
template <int kId>
__device__ __forceinline__ void bar_sync(int threads) {
  static_assert(kId >= 1 && kId <= 15, "named barriers 1..15 (0 is __syncthreads)");
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "r"(threads) : "memory");
}

// ldmatrix (9.7.14.5.15): four 8x8 matrices of 16-bit elements from shared memory, transposed.
// Lane 8i+j supplies the 16-byte-aligned address of row j of matrix i; register i of lane t then
// holds column t/4 of matrix i at rows 2*(t%4) (low half) and 2*(t%4)+1 (high half).
__device__ __forceinline__ uint4 ldmatrix_x4_trans(const void* smem_row) {
  uint4 v;
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// max (9.7.3.10, packed u16x2, sm_90): lane-wise unsigned max of two 16-bit pairs. On sign-masked
// bf16 bits this is the NaN-propagating |max| (numerics.h, bf16_abs_bits).
__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// cvt (9.7.9.21): two fp32 -> two e4m3 bytes, round to nearest even, saturating finite values to
// +-448. The low byte comes from `lo`, the high byte from `hi` (little-endian: lo is the lower
// address). NaN blocks never reach here (the kernels write 0x7F for them), so the NaN encoding of
// cvt does not matter.
__device__ __forceinline__ uint16_t cvt_e4m3x2(float hi, float lo) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

// cvt (9.7.9.21): two e4m3 codes -> two fp16, exactly (every e4m3 value is an fp16 normal or
// zero). The low byte becomes the low half (as cvt_e4m3x2 packs them).
__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint16_t codes) {
  uint32_t d;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(d) : "h"(codes));
  return d;
}

// cvt (9.7.9.21): one fp16 (the low 16 bits of `h`) -> fp32, exact (subnormals kept, NaN stays
// NaN).
__device__ __forceinline__ float cvt_f32_f16(uint32_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<uint16_t>(h)));
  return f;
}

// cvt (9.7.9.21): two fp32 -> two bf16 / two fp16, round to nearest even (no flush: subnormals
// kept; overflow to Inf). `hi` becomes the high half, `lo` the low half.
__device__ __forceinline__ uint32_t cvt_rn_bf16x2_f32(float hi, float lo) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ uint32_t cvt_rn_f16x2_f32(float hi, float lo) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

}  // namespace mxq::ptx
