// mxq public C++ API: MXFP8 and FP8 blockwise quantization of a bf16, fp16 or fp32 (M, K) tensor
// on raw device pointers and a cudaStream_t. Contract: docs/numerics.md.
//
// Every params struct names its block format (format.h): Format::kMxfp8 (32-element blocks, E8M0
// scale bytes in the blocked 128x4 layout; the default) or Format::kFp8Blockwise (128-element
// blocks, one fp32 factor per block, outer dimension fastest: layout.h factor_shape, §13). The
// scale pointers are raw bytes: E8M0 bytes for MXFP8, fp32 factors for FP8 blockwise.
//
// One entry point quantizes: mxq::quantize(p) runs one kernel that reads x once and writes the
// outputs whose pointers are set — rowwise (q_row, s_row), colwise (q_col, s_col), or all four. A
// null data/scale pair skips that axis. mxq::ref::quantize(p) is the bit-exact CPU reference of
// the same call (host pointers). mxq::quantize_composed(p, workspace) is the three-kernel baseline
// the fused kernel replaces (benchmarks compare against it). mxq::quantize_routed(p) is the MoE
// input stage: gather routed rows of x, pad each expert's rows to 32, quantize the axes whose
// pointers are set, rowwise, colwise or both (below). mxq::grouped_gemm(p) multiplies FP8 blockwise
// operands group by group: the MoE experts' forward, dgrad and wgrad GEMMs (SM90, CUTLASS).
//
//   mxq::QuantizeParams p;
//   p.x = x; p.M = M; p.K = K;                       // bf16, row-major, device memory
//   p.q_row = q_row; p.s_row = s_row;                // bytes: mxq::q_row_shape(M, K).bytes(), ...
//   p.q_col = q_col; p.s_col = s_col;
//   p.stream = stream;
//   mxq::quantize(p);                                // one read of x, four outputs
//
// Every entry point validates its arguments before anything is launched or written and throws
// mxq::Error with a message for users: the op, the argument, the rule and the value
// ("mxq::quantize: K must be a multiple of 32, got 100"). GPU entry points enqueue on
// p.stream and never synchronize; their kernels are launched as programmatic dependents of the
// work before them (scheduled early, touching memory only after that work is done: stream order
// holds as for a plain launch). Pointers must be device memory of the current device: mxq does
// not query pointer attributes per call (that costs microseconds on every call); the torch layer
// checks tensor devices.
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

// Every error mxq raises. what() is the whole message ("mxq::quantize: M must be ..."); message()
// is the part after the op name, so a binding can put its own op name in front.
class Error : public std::runtime_error {
 public:
  enum class Kind {
    kInvalidArgument,  // a bad argument: shape, alignment, pointer, group count, scaling mode
    kUnsupported,      // a missing capability: no CUDA in this build, no code for this device
    kCuda,             // the CUDA runtime failed
  };
  Error(Kind kind, const std::string& op, const std::string& message)
      : std::runtime_error(op.empty() ? message : op + ": " + message),
        kind_(kind),
        message_(message) {}
  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }

 private:
  Kind kind_;
  std::string message_;
};

// Parses the exact strings "rceil", "floor" and "fp32"; anything else throws (no silent fallback).
// Which modes a format takes is checked by the ops: MXFP8 rceil or floor, FP8 blockwise fp32 or
// rceil.
ScalingMode parse_scaling_mode(const std::string& name);
const char* to_string(ScalingMode mode);
// Parses the exact strings "mxfp8" and "fp8_blockwise"; anything else throws.
Format parse_format(const std::string& name);
const char* to_string(Format format);
// "bf16", "fp16" or "fp32": the names the benchmark JSON and the test names use.
const char* to_string(DType dtype);

// Bits of the device status word that grouped ops write on every call (0 = offs well formed).
// A malformed offs is clamped on the device so that no write leaves the outputs, and reported here.
enum StatusBits : int32_t {
  kOffsDecreasing = 1,  // offs[g] < offs[g-1] (or offs[0] < 0)
  kOffsBeyondM = 2,     // offs[g] > M
  kOffsMisaligned = 4,  // a group boundary not a multiple of the format's block (32 or 128)
  // quantize_routed (its own inputs; its offs_p is computed, so the bits above stay 0):
  kIndexOutOfRange = 8,  // an index entry outside [0, T): that routed row is quantized as zeros
                         // (combine: a token_rows or dest entry out of range, contributing 0)
  kCountsNegative = 16,  // a counts entry below 0 (taken as 0)
  kCountsSumNotN = 32,   // counts do not sum to N (routed rows past the counts get dest -1)
};
std::string describe_status(int32_t status);

// ---- quantize: x -> rowwise 1x32 and/or colwise 32x1 (docs/numerics.md §5-§6) ----
struct QuantizeParams {
  const void* x = nullptr;         // (M, K), row-major, 16-byte aligned
  DType dtype = DType::kBFloat16;  // x's element type: bf16, fp16 or fp32
  int64_t M = 0;                   // M and K: multiples of the format's block (32 or 128)
  int64_t K = 0;
  Format format = Format::kMxfp8;
  ScalingMode scaling_mode = ScalingMode::kRceil;
  const int32_t* offs = nullptr;  // optional: grouped (MoE) mode, G cumulative end offsets along M
  int64_t num_groups = 0;         // G; 0 without offs
  uint8_t* q_row = nullptr;       // q_row_shape(M, K): e4m3 (M, K)
  uint8_t* s_row = nullptr;       // s_row_shape(M, K, G): blocked, or M-groups with offs
                                  // (FP8 blockwise: fp32 factor_shape(M, K), with offs too)
  uint8_t* q_col = nullptr;       // q_col_shape(M, K): e4m3 (K, M), row k = column k of x
  uint8_t* s_col = nullptr;       // s_col_shape(M, K, G): blocked, or K-groups with offs
                                  // (FP8 blockwise: fp32 factor_shape(K, M), with offs too)
  int32_t* status = nullptr;      // optional with offs: written with StatusBits on every call
  cudaStream_t stream = nullptr;

  bool rowwise() const { return q_row != nullptr || s_row != nullptr; }
  bool colwise() const { return q_col != nullptr || s_col != nullptr; }
};

// ---- quantize_routed: the MoE input stage, gather by route + pad to 32 + quantize ----
// (docs/numerics.md §12.1.) From x (T, K), index (N) — the source row of each routed row, in
// expert-sorted order — and counts (E) routed rows per expert (sum N), with an optional fp32 scale
// (N) per routed row, builds the padded row space of docs/numerics.md §12 — Mp = padded_rows(N, E)
// rows (layout.h), expert e's rows from P_e = sum_{j<e} roundup(counts_j, 32), its padding rows
// and the tail past offs_p[E-1] zero — and quantizes it as mxq::quantize(padded, offs = offs_p)
// would, from one read of each routed row. Padded row P_e + i (the i-th row of expert e, routed row
// r) holds x[index[r]], or with a scale bf16/fp16(fp32(x[index[r]]) * scale[r]) (fp32 x: the fp32
// product): what a separate multiply hands the quantizer. Also writes offs_p (E) int32, the padded
// group ends, and dest (N) int32, the padded row of each routed row.
//
// On the GPU, index and counts live on the device and are checked there (no host sync): an index
// outside [0, T) reads as a zero row, a negative count counts as 0, counts summing past N are cut
// at N and routed rows past their sum get dest -1; nothing is written outside the outputs, and the
// optional status word reports it (StatusBits; check_status reads it). The CPU reference throws
// for those instead.
enum class IndexType : int32_t { kInt32 = 0, kInt64 = 1 };
struct QuantizeRoutedParams {
  const void* x = nullptr;  // (T, K), row-major, 16-byte aligned
  DType dtype = DType::kBFloat16;
  int64_t T = 0;                // rows of x: any count (a routed row reads one of them)
  int64_t K = 0;                // a multiple of 32
  const void* index = nullptr;  // (N): source row of each routed row, expert-sorted
  IndexType index_type = IndexType::kInt32;
  int64_t N = 0;
  const void* counts = nullptr;  // (E): routed rows per expert, sum N
  IndexType counts_type = IndexType::kInt32;
  int64_t num_experts = 0;         // E, 1 to kMaxGroups
  const float* scale = nullptr;    // optional (N): per routed row factor (gate scores)
  Format format = Format::kMxfp8;  // FP8 blockwise: groups padded to 128, Mp = padded_rows<
                                   // int64_t, Fp8Blockwise>(N, E), factors as in QuantizeParams
  ScalingMode scaling_mode = ScalingMode::kRceil;
  uint8_t* q_row = nullptr;   // q_row_shape(Mp, K)
  uint8_t* s_row = nullptr;   // s_row_shape(Mp, K, E): M-groups over offs_p
  uint8_t* q_col = nullptr;   // q_col_shape(Mp, K): (K, Mp)
  uint8_t* s_col = nullptr;   // s_col_shape(Mp, K, E): K-groups over offs_p
  int32_t* offs_p = nullptr;  // (E): padded group ends
  int32_t* dest = nullptr;    // (N): padded row of each routed row
  void* workspace = nullptr;  // GPU, device memory: quantize_routed_workspace_bytes(N, E, format)
  int32_t* status = nullptr;  // optional (GPU): StatusBits of index and counts, every call
  cudaStream_t stream = nullptr;

  bool rowwise() const { return q_row != nullptr || s_row != nullptr; }
  bool colwise() const { return q_col != nullptr || s_col != nullptr; }
};
// The GPU entry point's scratch: the source row and scale factor of each padded row (8 bytes a row).
// The padded row count, and so the workspace, follows the format's block (32 or 128).
int64_t quantize_routed_workspace_bytes(int64_t N, int64_t num_experts,
                                        Format format = Format::kMxfp8);
// The size rules of quantize_routed (throws as the op would): T, K, N, E.
void check_routed_sizes(int64_t T, int64_t K, int64_t N, int64_t num_experts,
                        Format format = Format::kMxfp8);

// ---- dequantize: e4m3 data (rows, cols) + scales of its (rows, cols/32) blocks -> bf16 ----
// Rowwise: q_row (M, K) with s_row: blocked, or kMGroups with offs (rows are tokens). Colwise:
// q_col (K, M) with s_col: blocked, or kKGroups with offs (cols are tokens; tail tokens give +0).
// out = bf16(e4m3(q) * 2^(s-127)), the fp32 product rounded once; s = 255 gives NaN.
// FP8 blockwise (format kFp8Blockwise, layout kBlocked, no offs): scales are the fp32 factors of
// factor_shape(rows, cols) and out = bf16(e4m3(q) * d), the fp32 product rounded once (q_row with
// d_row, or q_col with d_col: the same layout). Grouped blockwise factors are a dense slice, so they
// dequantize without offs.
enum class ScaleLayout : int32_t { kBlocked = 0, kMGroups = 1, kKGroups = 2 };
struct DequantizeParams {
  const uint8_t* q = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  Format format = Format::kMxfp8;
  ScaleLayout layout = ScaleLayout::kBlocked;
  const int32_t* offs = nullptr;  // the grouped layouts: G cumulative end offsets along the tokens
  int64_t num_groups = 0;
  void* out = nullptr;        // bf16 (rows, cols)
  int32_t* status = nullptr;  // optional with offs: StatusBits on every call (an empty q too)
  cudaStream_t stream = nullptr;
};

// ---- expert weights: W (G, N, K) -> per expert, rowwise along K and colwise along N ----
// (docs/numerics.md §11.) G = 1 is a dense Linear's (N, K) weight. N and K multiples of 32.
enum class WeightScaling : int32_t {
  k1x32 = 0,  // MXFP8: each axis its own 32-element blocks (two scale sets, two byte sets)
  k32x32 =
      1,  // MXFP8: one scale per 32x32 tile: q_col is exactly the per-expert transpose of q_row
  k128x128 = 2,  // FP8 blockwise: one fp32 factor per 128x128 tile; q_col is the per-expert
                 // transpose of q_row; s_row / s_col the tile factors in the forward's and the
                 // dgrad's layout (layout.h weight_factor_shape(G, N, K) / (G, K, N))
};
struct QuantizeWeightParams {
  const void* w = nullptr;  // (G, N, K) row-major, 16-byte aligned
  DType dtype = DType::kBFloat16;
  int64_t G = 0;
  int64_t N = 0;
  int64_t K = 0;
  Format format = Format::kMxfp8;  // FP8 blockwise: N and K multiples of 128, scaling k128x128
  ScalingMode scaling_mode = ScalingMode::kRceil;
  WeightScaling scaling = WeightScaling::k32x32;
  uint8_t* q_row = nullptr;       // (G, N, K) e4m3
  uint8_t* s_row = nullptr;       // weight_s_row_shape(G, N, K)
  uint8_t* q_col = nullptr;       // (G, K, N) e4m3
  uint8_t* s_col = nullptr;       // weight_s_col_shape(G, N, K)
  cudaStream_t stream = nullptr;  // a null data/scale pair skips that axis, as in QuantizeParams

  bool rowwise() const { return q_row != nullptr || s_row != nullptr; }
  bool colwise() const { return q_col != nullptr || s_col != nullptr; }
};
// ---- grouped_gemm: the MoE experts' FP8 blockwise GEMMs (docs/numerics.md §13.6) ----
// One bf16 output from two e4m3 operands quantized as §13.3/§13.4 describe, each multiplied by its
// fp32 factors and accumulated in fp32 (on the GPU, CUTLASS's SM90 grouped GEMM with blockwise
// scaling; SM90 only). The tokens' axis M is split into G groups by offs (G cumulative ends, each a
// multiple of 128, on the device). Two groupings, DeepGEMM's names:
//
//   kMGrouped (forward, dgrad)  out[rows of g] = a[rows of g] · b[g]^T
//     a (M, K) e4m3 row-major, a_scale its 1x128 factors factor_shape(M, K) (strides (1, M));
//     b (G, N, K) e4m3, b_scale its 128x128 tile factors weight_factor_shape(G, N, K) (forward: a
//     weight's q_row / s_row; dgrad: its q_col / s_col, where N and K trade places);
//     out (M, N) bf16; rows past offs[G-1] are written as zeros.
//   kKGrouped (wgrad)           out[g] = a[:, cols of g] · b[:, cols of g]^T
//     a (N, M) e4m3 = dY's q_col, a_scale its 128x1 factors factor_shape(N, M) (strides (1, N));
//     b (K, M) e4m3 = X's q_col, b_scale factor_shape(K, M) (strides (1, K));
//     out (G, N, K) bf16; an empty group's out[g] is zeros.
//
// N and K are multiples of 128, M too; every buffer 16-byte aligned. Every byte of out is written,
// nothing else outside the workspace. The per-group problems are built on the device from offs (no
// host synchronization: the call can be captured in a CUDA graph), into `workspace`:
// grouped_gemm_workspace_bytes(grouping, M, N, K, G) bytes of device memory, a function of the
// shapes alone. A malformed offs is clamped on the device (each end rounded down to 128 and kept in
// [previous end, M]) and reported in the optional status word (StatusBits).
enum class Grouping : int32_t { kMGrouped = 0, kKGrouped = 1 };
struct GroupedGemmParams {
  Grouping grouping = Grouping::kMGrouped;
  const uint8_t* a = nullptr;      // kMGrouped: (M, K); kKGrouped: (N, M)
  const float* a_scale = nullptr;  // kMGrouped: factor_shape(M, K); kKGrouped: factor_shape(N, M)
  const uint8_t* b = nullptr;      // kMGrouped: (G, N, K); kKGrouped: (K, M)
  const float* b_scale = nullptr;  // kMGrouped: weight_factor_shape(G, N, K); kKGrouped:
                                   // factor_shape(K, M)
  const int32_t* offs = nullptr;   // (G): group ends along M
  int64_t num_groups = 0;          // G, 1 to kMaxGroups
  int64_t M = 0;                   // tokens (the padded row space of quantize_routed)
  int64_t N = 0;
  int64_t K = 0;
  void* out = nullptr;        // bf16: kMGrouped (M, N), kKGrouped (G, N, K)
  void* workspace = nullptr;  // GPU: grouped_gemm_workspace_bytes(...) bytes of device memory
  int32_t* status = nullptr;  // optional (GPU): StatusBits of offs, written on every call
  cudaStream_t stream = nullptr;
};
// ---- combine: the MoE layer's routed rows back to their tokens (docs/numerics.md §14) ----
// T tokens each chose top_k experts; routed row r (0 <= r < N = T·top_k) of the expert-sorted order
// lives at padded row dest[r] of y (Mp, D), the experts' bf16 output over quantize_routed's padded
// row space. token_rows (T, top_k) names each token's routed rows, a permutation of [0, N) (the
// torch layer passes the inverse of the routing's sort). Two entry points share these params:
//
//   combine             out (T, D) bf16: for each token, its routed rows in increasing r,
//                       acc = bf16(acc + g_r) from acc = +0, with g_r = y[dest[r]], or, with
//                       scale, bf16(fl32(y[dest[r]]) · scale[r]): what torch's
//                       index_put_(accumulate=True) of the (scaled) rows gives, bit for bit.
//   combine_score_grad  out (T, top_k) fp32: out[t, j] = Σ_d fl32(dout[t, d]) · fl32(y[dest[r], d])
//                       for r = token_rows[t, j], in the order §14 fixes (each lane of 32 sums its
//                       8-element chunks c ≡ lane mod 32 in order, then a butterfly), no FMA: the
//                       gate scores' gradient of the scaled combine.
//
// D a multiple of 8 (16-byte rows); every buffer 16-byte aligned, indices 4-byte. Every byte of
// out is written. A routed row or a dest outside its range contributes nothing (on the GPU; the
// CPU reference throws) and is reported in the optional status word (kIndexOutOfRange).
struct CombineParams {
  const void* y = nullptr;              // (Mp, D) bf16 row-major
  int64_t Mp = 0;                       // rows of y
  int64_t D = 0;                        // a multiple of 8
  const int32_t* dest = nullptr;        // (N): padded row of each routed row
  int64_t N = 0;                        // routed rows, T·top_k
  const int32_t* token_rows = nullptr;  // (T, top_k): each token's routed rows
  int64_t T = 0;
  int64_t top_k = 0;             // 1 to kMaxTopK
  const float* scale = nullptr;  // combine, optional (N): each routed row's factor
  const void* dout = nullptr;    // combine_score_grad: (T, D) bf16, the output's gradient
  void* out = nullptr;           // combine (T, D) bf16; combine_score_grad (T, top_k) fp32
  int32_t* status = nullptr;     // optional (GPU): StatusBits, written on every call
  cudaStream_t stream = nullptr;
};
constexpr int64_t kMaxTopK = 32;
// Parses the exact strings "m_grouped" and "k_grouped"; anything else throws.
Grouping parse_grouping(const std::string& name);
const char* to_string(Grouping grouping);
int64_t grouped_gemm_workspace_bytes(Grouping grouping, int64_t M, int64_t N, int64_t K,
                                     int64_t num_groups);
// The size rules of grouped_gemm (throws as the op would): M, N, K, G.
void check_grouped_gemm_sizes(int64_t M, int64_t N, int64_t K, int64_t num_groups);

// Parses the exact strings "1x32", "32x32" and "128x128"; anything else throws (no silent fallback).
WeightScaling parse_weight_scaling(const std::string& name);
const char* to_string(WeightScaling scaling);

// The size rules of the ops (docs/numerics.md §9) alone, for a caller that sizes outputs without
// calling an op (the torch layer's Meta impls): they throw mxq::Error as the op would.
// num_groups: the length of offs, or -1 without offs. The format sets the block (32 or 128).
void check_sizes(int64_t M, int64_t K, int64_t num_groups,
                 Format format = Format::kMxfp8);  // quantize of x (M, K)
void check_dequantize_sizes(int64_t rows, int64_t cols, int64_t num_groups,
                            Format format = Format::kMxfp8);  // q (rows, cols)
void check_weight_sizes(int64_t G, int64_t N, int64_t K,
                        Format format = Format::kMxfp8);  // quantize_weight of (G, N, K)

// ---- GPU entry points (throw Error::Kind::kUnsupported without CUDA or device code) ----
// The fused kernel: one read of x, the requested axes.
void quantize(const QuantizeParams& p);
// The baseline composition (backend "composed"): rowwise kernel, colwise kernel writing plain
// scales into `workspace` (composed_workspace_bytes(M, K) bytes of device memory), and a kernel
// rearranging those into the blocked layout (to_blocked).
// Both axes are required. Byte-identical to quantize().
void quantize_composed(const QuantizeParams& p, void* workspace);
int64_t composed_workspace_bytes(int64_t M, int64_t K);
void dequantize(const DequantizeParams& p);
void quantize_weight(const QuantizeWeightParams& p);
// Two kernels: one plans the padded row space (offs_p, dest, each padded row's source into the
// workspace, the status word), then the grouped tile kernel gathers rows through that plan.
void quantize_routed(const QuantizeRoutedParams& p);
// Two kernels: one builds the per-group problems from offs into the workspace (and, M-grouped, the
// factors in CUTLASS's per-group layout; the zero rows), then CUTLASS's grouped GEMM. SM90 only.
void grouped_gemm(const GroupedGemmParams& p);
// One kernel each: a warp per token (docs/numerics.md §14).
void combine(const CombineParams& p);
void combine_score_grad(const CombineParams& p);

// Host-side checker for users who want an exception: copies offs to the host (synchronizes the
// stream) and throws mxq::Error describing the first malformed entry.
void validate_offs(const int32_t* offs_device, int64_t num_groups, int64_t M, cudaStream_t stream,
                   Format format = Format::kMxfp8);
// The same rules on host memory (what validate_offs runs after its copy).
void validate_offs_host(const int32_t* offs, int64_t num_groups, int64_t M,
                        Format format = Format::kMxfp8);
// Reads a status word written by a grouped op (synchronizes) and throws if it is not 0.
void check_status(const int32_t* status_device, cudaStream_t stream);

// True when mxq was built with CUDA and a device with code in this build is present.
bool gpu_available();
// Build facts: version, CUDA toolkit, architectures compiled.
std::string build_info();
const char* version();

// ---- limits (validated; docs/numerics.md §9): M, K multiples of kDimAlign (layout.h) ----
constexpr int64_t kMaxDim = 2147483647;

namespace ref {
// The bit-exact CPU reference: same params, host pointers, stream ignored. Multithreaded.
void quantize(const QuantizeParams& p);
void dequantize(const DequantizeParams& p);
void quantize_weight(const QuantizeWeightParams& p);
// Gathers, scales and pads into a host buffer, then ref::quantize with offs_p (docs/numerics.md
// §12.1); throws for an index out of range or counts that are negative or do not sum to N. The
// workspace is not used (may be null); a status word is written 0.
void quantize_routed(const QuantizeRoutedParams& p);
// The emulated GEMM (docs/numerics.md §13.6): each operand dequantized (e4m3 value x factor, fp32),
// an fp32 dot product per output in increasing contraction order, rounded once to bf16. Throws for
// a malformed offs; the workspace is not used (may be null); a status word is written 0.
void grouped_gemm(const GroupedGemmParams& p);
// The GPU's combine and combine_score_grad bit for bit (the same sums in the same order). Throws
// for a routed row or dest out of range; a status word is written 0.
void combine(const CombineParams& p);
void combine_score_grad(const CombineParams& p);
}  // namespace ref

}  // namespace mxq
