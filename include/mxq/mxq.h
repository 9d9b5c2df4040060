// mxq public C++ API: MXFP8 quantization of a bf16 (M, K) tensor on raw device pointers and a
// cudaStream_t.
//
// Every op has a params struct with named fields. The GPU entry points (namespace mxq) enqueue work
// on params.stream and never synchronize; the bit-exact CPU reference (namespace mxq::ref) takes
// the same structs with host pointers. Every op validates its arguments first and throws mxq::Error
// naming the argument and the offending value; nothing is written when it throws. Contract:
// docs/numerics.md.
//
//   mxq::DualParams p;
//   p.x = x; p.M = M; p.K = K;                       // bf16, row-major, device memory
//   p.q_row = q_row; p.s_row = s_row;                // sizes: mxq::q_row_shape(M, K).bytes(), ...
//   p.q_col = q_col; p.s_col = s_col;
//   p.stream = stream;
//   mxq::quantize_dual(p);                           // one read of x, four outputs
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "mxq/layout.h"
#include "mxq/numerics.h"

// The CUDA runtime's own declaration, repeated so this header needs no CUDA headers.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace mxq {

// Thrown for every invalid argument and every CUDA failure; what() names the argument and its
// value.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the exact strings "rceil" and "floor"; anything else throws (no silent fallback).
ScaleRounding parse_scale_rounding(const std::string& name);
const char* to_string(ScaleRounding rule);

// Bits of the device status word that grouped kernels write on every call (0 = offs well formed).
// A malformed offs is clamped on the device so that no write leaves the outputs, and reported here.
enum StatusBits : int32_t {
  kOffsDecreasing = 1,  // offs[g] < offs[g-1] (or offs[0] < 0)
  kOffsBeyondM = 2,     // offs[g] > M
  kOffsMisaligned = 4,  // a group boundary not a multiple of kGroupAlign
};
constexpr int64_t kGroupAlign = 128;  // group sizes must be multiples of this (seed scope, SPEC §6)
std::string describe_status(int32_t status);

// ---- x -> rowwise 1x32: q_row (M, K) e4m3 and s_row blocked (s_row_shape) ----
struct RowwiseParams {
  const void* x = nullptr;  // bf16 (M, K), row-major
  int64_t M = 0;
  int64_t K = 0;
  ScaleRounding rounding = ScaleRounding::kRceil;
  uint8_t* q_row = nullptr;
  uint8_t* s_row = nullptr;
  cudaStream_t stream = nullptr;
};

// ---- x -> colwise 32x1: q_col (K, M) e4m3 (row k = column k of x) and plain S_col (K, M/32) ----
struct ColwiseParams {
  const void* x = nullptr;
  int64_t M = 0;
  int64_t K = 0;
  ScaleRounding rounding = ScaleRounding::kRceil;
  uint8_t* q_col = nullptr;
  uint8_t* s_col_plain = nullptr;  // s_col_plain_shape(M, K), row-major
  cudaStream_t stream = nullptr;
};

// ---- plain colwise scales S_col (K, M/32) -> blocked (offs absent) or K-groups layout ----
struct SwizzleParams {
  const uint8_t* s_col_plain = nullptr;
  int64_t M = 0;  // tokens: S_col has M/32 columns
  int64_t K = 0;  // S_col rows
  const int32_t* offs =
      nullptr;  // optional: G cumulative token end offsets (device memory on the GPU)
  int64_t num_groups = 0;
  uint8_t* s_col = nullptr;   // s_col_shape(M, K, num_groups)
  int32_t* status = nullptr;  // optional (grouped): written with StatusBits on every call
  cudaStream_t stream = nullptr;
};

// ---- x -> all four outputs (SPEC §5-§6): fused (quantize_dual) or composed
// (quantize_dual_composed) ----
struct DualParams {
  const void* x = nullptr;
  int64_t M = 0;
  int64_t K = 0;
  ScaleRounding rounding = ScaleRounding::kRceil;
  const int32_t* offs = nullptr;  // optional: grouped mode
  int64_t num_groups = 0;
  uint8_t* q_row = nullptr;
  uint8_t* s_row = nullptr;  // s_row_shape(M, K)
  uint8_t* q_col = nullptr;
  uint8_t* s_col = nullptr;   // s_col_shape(M, K, num_groups)
  int32_t* status = nullptr;  // optional (grouped): written with StatusBits on every call
  cudaStream_t stream = nullptr;
};

// ---- e4m3 data (rows, cols) + blocked scales of (rows, cols/32) -> bf16 (rows, cols) ----
// Rowwise: q_row (M, K) with s_row. Colwise: q_col (K, M) with s_col; pass offs for the K-groups
// layout. out = bf16(e4m3(q) * 2^(s-127)), the fp32 product rounded once; s = 255 gives NaN.
struct DequantizeParams {
  const uint8_t* q = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const int32_t* offs = nullptr;  // optional: scales in the K-groups layout (cols are tokens)
  int64_t num_groups = 0;
  void* out = nullptr;        // bf16 (rows, cols)
  int32_t* status = nullptr;  // optional (grouped)
  cudaStream_t stream = nullptr;
};

// ---- GPU entry points (throw if mxq was built without CUDA or the device has no code) ----
void quantize_rowwise(const RowwiseParams& p);
void quantize_colwise(const ColwiseParams& p);
void swizzle_col_scales(const SwizzleParams& p);
void quantize_dual(const DualParams& p);
// The three-kernel composition: rowwise, colwise into `workspace`, swizzle. workspace holds
// composed_workspace_bytes(M, K) bytes of device memory.
void quantize_dual_composed(const DualParams& p, void* workspace);
int64_t composed_workspace_bytes(int64_t M, int64_t K);
void dequantize(const DequantizeParams& p);

// Host-side checker for users who want an exception: copies offs to the host (synchronizes the
// stream) and throws mxq::Error describing the first malformed entry.
void validate_offs(const int32_t* offs_device, int64_t num_groups, int64_t M, cudaStream_t stream);
// Reads a status word written by a grouped op (synchronizes) and throws if it is not 0.
void check_status(const int32_t* status_device, cudaStream_t stream);

// True when mxq was built with CUDA and a device with code in this build is present.
bool gpu_available();
// Build facts: version, CUDA toolkit, architectures compiled.
std::string build_info();

// ---- alignment each path needs (validated; SPEC §9) ----
constexpr int64_t kCpuAlign = 32;  // the reference: M and K multiples of 32
constexpr int64_t kGpuAlign =
    128;  // the kernels: M and K multiples of 128 (one 128x128 tile per CTA)
constexpr int64_t kMaxDim = 2147483647;

namespace ref {
// The bit-exact CPU reference: same params, host pointers, stream ignored. Multithreaded.
void quantize_rowwise(const RowwiseParams& p);
void quantize_colwise(const ColwiseParams& p);
void swizzle_col_scales(const SwizzleParams& p);
void quantize_dual(const DualParams& p);
void dequantize(const DequantizeParams& p);
}  // namespace ref

}  // namespace mxq
