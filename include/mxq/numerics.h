// mxq numerics: the MXFP8 block contract (docs/numerics.md §1-§3) as scalar functions usable
// from host code, device code and the CPU reference alike.
//
// One 1x32 or 32x1 block of bf16 values v_i becomes one E8M0 scale byte s and 32 e4m3 bytes:
//   amax = NaN-propagating max |v_i|     (amax_bits_bf16: an integer max of sign-masked bits)
//   s    = e8m0_from_amax(amax, mode)    (RCEIL: round amax/448 up; FLOOR: exponent of amax/256)
//   r    = e8m0_reciprocal(s)            (2^(127-s); s = 254 gives the fp32 subnormal 2^-127)
//   q_i  = e4m3_from_f32(fl32(v_i * r))  (RNE, saturating to +-448, NaN -> 0x7F)
// No flush-to-zero anywhere: never build mxq with fast-math or -ftz=true.
#pragma once

#include <cstdint>
#include <cstring>

#include "mxq/format.h"

#if defined(__CUDACC__)
#define MXQ_HD __host__ __device__ __forceinline__
#else
#define MXQ_HD inline
#endif

namespace mxq {

// How a block's scale follows from its amax: RCEIL and FLOOR give powers of two (MXFP8's E8M0 byte;
// FP8 blockwise's power-of-two factor, "pow2" in the literature, is RCEIL), kFp32 the exact fp32
// factor amax/448 of FP8 blockwise (DeepSeek-V3's rule; docs/numerics.md §13). MXFP8 takes kRceil or
// kFloor; FP8 blockwise takes kFp32 or kRceil.
enum class ScalingMode : int32_t { kRceil = 0, kFloor = 1, kFp32 = 2 };

// Input element types. Every input widens to fp32 exactly before the block math (docs/numerics.md
// §2), so one contract serves all three.
enum class DType : int32_t { kBFloat16 = 0, kFloat16 = 1, kFloat32 = 2 };
constexpr int dtype_bytes(DType t) { return t == DType::kFloat32 ? 4 : 2; }

constexpr int kBlock = Mxfp8::kBlock;     // elements per scale block, both axes
constexpr uint8_t kE8m0Nan = 0xFF;        // scale byte of a block holding NaN or Inf
constexpr uint8_t kE4m3Nan = 0x7F;        // data byte mxq writes for NaN
constexpr uint8_t kE4m3MaxFinite = 0x7E;  // 448
constexpr uint16_t kBf16AbsMask = 0x7FFF;
constexpr uint16_t kBf16Inf = 0x7F80;
constexpr uint32_t kRceilInv448 =
    0x3B124925;  // fp32 rounding of 1/448: RCEIL multiplies, never divides
constexpr uint32_t kFloorInv256 = 0x3B800000;  // 2^-8

MXQ_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MXQ_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// IEEE fp32 sum, rounded to nearest even, never contracted into a fused multiply-add.
MXQ_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Exact IEEE fp32 product, never contracted and never flushed (subnormals are part of the
// contract).
MXQ_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MXQ_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// |v| as bf16 bits. For non-negative bit patterns unsigned order is float order, and every NaN
// pattern (0x7F81..0x7FFF) lies above Inf (0x7F80): an unsigned max over these is the
// NaN-propagating amax.
MXQ_HD uint16_t bf16_abs_bits(uint16_t b) { return uint16_t(b & kBf16AbsMask); }

// NaN-propagating max of |v_i| over n bf16 values (starts at +0), as bf16 bits.
MXQ_HD uint16_t amax_bits_bf16(const uint16_t* v, int n, int64_t stride = 1) {
  uint16_t m = 0;
  for (int i = 0; i < n; ++i) {
    const uint16_t a = bf16_abs_bits(v[i * stride]);
    m = a > m ? a : m;
  }
  return m;
}

// RCEIL: round d up to a power of two without saturation (docs/numerics.md §3 boundary table). Branch-free: a
// normal d rounds up when any mantissa bit is set; a zero/subnormal d (exponent 0) only when d >
// 2^-127; NaN/Inf (exponent 255) and 2^127 < d (254 plus a round-up) both give 255.
MXQ_HD uint8_t e8m0_rceil_from_d(uint32_t d_bits) {
  const uint32_t exponent = (d_bits >> 23) & 0xFF;
  const uint32_t mantissa = d_bits & 0x7FFFFF;
  const uint32_t threshold = exponent == 0 ? 0x400000u : 0u;
  const uint32_t s = exponent + (mantissa > threshold ? 1u : 0u);
  return uint8_t(s > 255u ? 255u : s);
}

// FLOOR: round d toward zero to a power of two; zero and subnormal d give 0.
MXQ_HD uint8_t e8m0_floor_from_d(uint32_t d_bits) {
  const uint32_t exponent = (d_bits >> 23) & 0xFF;
  return exponent == 0xFF ? kE8m0Nan : uint8_t(exponent);
}

// Scale byte from amax given as fp32 (amax >= +0 or NaN/Inf).
MXQ_HD uint8_t e8m0_from_amax(float amax, ScalingMode mode) {
  if (mode == ScalingMode::kRceil) {
    return e8m0_rceil_from_d(f32_bits(mul_rn(amax, f32_from_bits(kRceilInv448))));
  }
  return e8m0_floor_from_d(f32_bits(mul_rn(amax, f32_from_bits(kFloorInv256))));
}

MXQ_HD uint8_t e8m0_from_amax_bf16(uint16_t amax_bits, ScalingMode mode) {
  return e8m0_from_amax(bf16_to_f32(amax_bits), mode);
}

// 2^(s-127) as fp32 (s = 0 is the subnormal 0x00400000); 255 is NaN.
MXQ_HD float e8m0_to_f32(uint8_t s) {
  const uint32_t bits = s == kE8m0Nan ? 0x7FC00000u : (s == 0 ? 0x00400000u : uint32_t(s) << 23);
  return f32_from_bits(bits);
}

// The multiplier r = 2^(127-s) of docs/numerics.md §2 step 4: byte (254 - s) mod 256 read as E8M0.
MXQ_HD float e8m0_reciprocal(uint8_t s) { return e8m0_to_f32(uint8_t(254 - s)); }

// fp32 -> e4m3 (float8_e4m3fn): round to nearest even, finite magnitudes above 448 and +-Inf
// saturate to +-448, NaN -> 0x7F, sign kept (so -0 and negative underflow give 0x80).
MXQ_HD uint8_t e4m3_from_f32(float p) {
  const uint32_t bits = f32_bits(p);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t mag = bits & 0x7FFFFFFF;
  if (mag > 0x7F800000u) return kE4m3Nan;
  if (mag > 0x43E00000u) return uint8_t(sign | kE4m3MaxFinite);  // > 448 (Inf included)
  if (mag < 0x3C800000u) {
    // Below 2^-6, e4m3 is subnormal: codes 0..8 are multiples of 2^-9 (code 8 is the min normal
    // 2^-6). a * 2^9 is exact and < 8; adding 2^23 leaves exactly its round-to-nearest-even
    // integer.
    const float scaled = mul_rn(f32_from_bits(mag), 512.0f);
    const float magic = 8388608.0f;
#if defined(__CUDA_ARCH__)
    const float rounded = __fsub_rn(__fadd_rn(scaled, magic), magic);
#else
    volatile float sum =
        scaled + magic;  // volatile: keep the two roundings apart on every host compiler
    const float rounded = sum - magic;
#endif
    return uint8_t(sign | uint8_t(rounded));
  }
  // Normal: keep 3 mantissa bits with RNE on the whole magnitude (a carry moves into the exponent),
  // then rebias the exponent from 127 to 7.
  const uint32_t rounded = (mag + 0x7FFFFu + ((mag >> 20) & 1u)) >> 20;
  return uint8_t(sign | uint8_t(rounded - (120u << 3)));
}

// e4m3 byte -> fp32, exact.
MXQ_HD float e4m3_to_f32(uint8_t q) {
  const uint32_t sign = uint32_t(q & 0x80) << 24;
  const uint32_t exponent = (q >> 3) & 0xF;
  const uint32_t mantissa = q & 0x7;
  if ((q & 0x7F) == 0x7F) return f32_from_bits(0x7FC00000u | sign);
  if (exponent == 0) {  // subnormal: mantissa * 2^-9
    return f32_from_bits(f32_bits(mul_rn(float(mantissa), f32_from_bits(0x3B000000u))) | sign);
  }
  return f32_from_bits(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// fp32 -> bf16 bits with round to nearest even. Every NaN becomes the canonical 0x7FC0: NaN
// payloads and signs differ between CPU and GPU arithmetic, so mxq never lets them reach its
// outputs.
constexpr uint16_t kBf16CanonicalNan = 0x7FC0;
MXQ_HD uint16_t bf16_from_f32(float f) {
  const uint32_t bits = f32_bits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNan;
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Every fp32 NaN as the canonical 0x7FC00000 (a NaN's sign and payload depend on the hardware that
// made it; mxq's fp32 outputs name one).
MXQ_HD float canonical_nan(float f) { return f != f ? f32_from_bits(0x7FC00000u) : f; }

// fp32 -> fp16 bits with round to nearest even (subnormals kept, overflow to Inf, every NaN the
// canonical 0x7E00): what a cast of an fp32 product to fp16 gives.
constexpr uint16_t kF16CanonicalNan = 0x7E00;
MXQ_HD uint16_t f16_from_f32(float f) {
  const uint32_t bits = f32_bits(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kF16CanonicalNan;
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 rounds to Inf
  if (a >= 0x38800000u) {                                 // normal: rebias, round 13 bits
    const uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
    return uint16_t(sign | ((r >> 13) - (112u << 10)));
  }
  // Subnormal (or zero) in fp16: the value in units of 2^-24, rounded to nearest even.
  const uint32_t exponent = a >> 23;
  const uint32_t mantissa = (a & 0x7FFFFFu) | (exponent != 0 ? 0x800000u : 0u);
  const uint32_t shift = 126u - (exponent != 0 ? exponent : 1u);  // >= 14
  if (shift > 24u) return sign;
  uint32_t q = mantissa >> shift;
  const uint32_t rem = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// fp16 bits -> fp32, exact (subnormals kept; Inf and NaN stay Inf and NaN).
MXQ_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // subnormal: mantissa * 2^-24, exact in fp32
    return f32_from_bits(f32_bits(mul_rn(float(mantissa), f32_from_bits(0x33800000u))) | sign);
  }
  return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// NaN-propagating max of |v_i| over n fp32 values (starts at +0): a NaN anywhere gives NaN, an Inf
// (with no NaN) gives Inf.
MXQ_HD float amax_f32(const float* v, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = f32_from_bits(f32_bits(v[i]) & 0x7FFFFFFFu);
    if (a > m || a != a) m = a;
    if (m != m) break;
  }
  return m;
}

// One whole block from 32 values already widened to fp32: scale byte and 32 data bytes. For bf16
// input it gives the bytes of quantize_block below (the widening is exact either way).
MXQ_HD uint8_t quantize_block_f32(const float* v, ScalingMode mode, uint8_t* q) {
  const uint8_t s = e8m0_from_amax(amax_f32(v, kBlock), mode);
  const float r = e8m0_reciprocal(s);
  for (int i = 0; i < kBlock; ++i) q[i] = e4m3_from_f32(mul_rn(v[i], r));
  return s;
}

// Dequantization of one element: bf16(e4m3(q) * 2^(s-127)), fp32 product rounded once to bf16.
MXQ_HD uint16_t dequantize_element(uint8_t q, uint8_t s) {
  return bf16_from_f32(mul_rn(e4m3_to_f32(q), e8m0_to_f32(s)));
}

// ---- dequantization of two elements at once: the GPU's fast path, same bytes ----
// Every e4m3 value is zero or an fp16 normal (2^-9 .. 448), so the GPU converts code pairs to fp16
// exactly (cvt.rn.f16x2.e4m3x2; f16_from_e4m3 is the host's twin). For a scale s in
// [kDequantExactScaleMin, kDequantExactScaleMax], every nonzero product e4m3(q) * 2^(s-127) lies in
// [2^-121, 1.75 * 2^127]: a bf16 normal of at most 4 significant bits, so dequantize_element rounds
// nothing. Its bf16 bits are the fp16 bits with the exponent moved by s - 15 (fp16 bias 15 to
// bf16 bias 127, plus s - 127) and the mantissa cut to its top 7 bits (the low 3 are zero).
constexpr uint8_t kDequantExactScaleMin = 15;
constexpr uint8_t kDequantExactScaleMax = 246;

MXQ_HD bool dequantize_is_exact(uint8_t s) {
  return s >= kDequantExactScaleMin && s <= kDequantExactScaleMax;
}

// Whether any byte of w is an e4m3 NaN code (0x7F, 0xFF): the low 7 bits plus 1 reach bit 7 only
// from 0x7F, and no carry leaves a byte.
MXQ_HD bool has_e4m3_nan(uint32_t w) {
  return (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
}

// fp16 bits of a non-NaN e4m3 code, exactly (cvt.rn.f16.e4m3 on the GPU).
MXQ_HD uint16_t f16_from_e4m3(uint8_t q) {
  const uint32_t b = f32_bits(e4m3_to_f32(q));
  const uint32_t sign = (b >> 16) & 0x8000u;
  if ((b & 0x7FFFFFFFu) == 0) return uint16_t(sign);
  return uint16_t(sign | ((((b >> 23) & 0xFFu) - 112u) << 10) | ((b >> 13) & 0x3FFu));
}

// dequantize_element of the two fp16 values in f16x2 (low lane first) as bf16x2 bits, for
// dequantize_is_exact(s) and no NaN code.
MXQ_HD uint32_t dequantize_pair_exact(uint32_t f16x2, uint8_t s) {
  const uint32_t sign = f16x2 & 0x80008000u;
  const uint32_t mag = (f16x2 >> 3) & 0x0FFF0FFFu;  // per lane: fp16 exponent, top 7 mantissa bits
  // 0xFFFF in each nonzero lane: mag + 0x7FFF reaches bit 15 exactly when mag > 0 (mag < 0x1000).
  const uint32_t nonzero = (((mag + 0x7FFF7FFFu) & 0x80008000u) >> 15) * 0xFFFFu;
  // Exponent + s - 15 in each lane: s >= 15 keeps the addend non-negative and every sum below
  // 2^15, so no carry crosses lanes; zero lanes stay (signed) zero.
  const uint32_t shift = (uint32_t(s) - 15u) * 0x00800080u;
  return sign | ((mag + shift) & nonzero);
}

// One whole block: scale byte and 32 data bytes from 32 bf16 values at v[i * stride].
MXQ_HD uint8_t quantize_block(const uint16_t* v, int64_t stride, ScalingMode mode, uint8_t* q) {
  const uint8_t s = e8m0_from_amax_bf16(amax_bits_bf16(v, kBlock, stride), mode);
  const float r = e8m0_reciprocal(s);
  for (int i = 0; i < kBlock; ++i) q[i] = e4m3_from_f32(mul_rn(bf16_to_f32(v[i * stride]), r));
  return s;
}

// ---- FP8 blockwise (docs/numerics.md §13): one 128-element block, an fp32 factor ----
// For a block with finite amax: the multiplier m and the stored factor d = fl32(1 / m); the data
// bytes are q_i = e4m3_from_f32(fl32(v_i * m)) (saturating, so |p| > 448 clamps to 448). A block
// holding NaN or Inf gets d = NaN and every data byte 0x7F, under both rules.
//   kFp32: m = fl32(448 / max(amax, 1e-12)), the quotient rounded once (the same as dividing in
//          fp64 and rounding that to fp32: 53 >= 2*24 + 2 bits makes the double rounding
//          innocuous); an all-zero block gets m = fl32(448e12).
//   kRceil: m = e8m0_reciprocal(e8m0_from_amax(amax, kRceil)) = 2^(127-s), so d = 2^(s-127)
//          exactly: §2's multiplier, and the data bytes §2 gives for a 128-element block.
constexpr uint32_t kBlockwiseAmaxFloor = 0x2B8CBCCC;  // fl32(1e-12): amax is clamped below at it
constexpr uint32_t kBlockwiseFactorNan = 0x7FC00000;  // d of a block holding NaN or Inf

MXQ_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// m for a finite amax >= +0 (kFp32 or kRceil; kFloor gives FLOOR's power of two the same way).
MXQ_HD float blockwise_multiplier(float amax, ScalingMode mode) {
  if (mode == ScalingMode::kFp32) {
    const float floor = f32_from_bits(kBlockwiseAmaxFloor);
    return div_rn(448.0f, amax > floor ? amax : floor);
  }
  return e8m0_reciprocal(e8m0_from_amax(amax, mode));
}

// d = fl32(1 / m): what the GEMM multiplies by (x ~ q * d).
MXQ_HD float blockwise_factor(float m) { return div_rn(1.0f, m); }

// One FP8 blockwise block of n values already widened to fp32 (n = 128 for a 1x128 or 128x1
// block, 128 * 128 for a weight tile): the data bytes into q[i * q_stride], d returned. A NaN or
// Inf anywhere gives d = NaN (kBlockwiseFactorNan) and every byte 0x7F.
MXQ_HD float quantize_blockwise_block_f32(const float* v, int n, ScalingMode mode, uint8_t* q,
                                          int64_t q_stride = 1) {
  const float amax = amax_f32(v, n);  // +0 or more, +Inf, or a NaN with the sign bit clear
  if (f32_bits(amax) >= 0x7F800000u) {
    for (int i = 0; i < n; ++i) q[i * q_stride] = kE4m3Nan;
    return f32_from_bits(kBlockwiseFactorNan);
  }
  const float m = blockwise_multiplier(amax, mode);
  for (int i = 0; i < n; ++i) q[i * q_stride] = e4m3_from_f32(mul_rn(v[i], m));
  return blockwise_factor(m);
}

// Dequantization of one FP8 blockwise element: bf16(e4m3(q) * d), the fp32 product rounded once
// (a NaN factor or code gives the canonical bf16 NaN).
MXQ_HD uint16_t dequantize_blockwise_element(uint8_t q, float d) {
  return bf16_from_f32(mul_rn(e4m3_to_f32(q), d));
}

}  // namespace mxq
