// mxq as PyTorch ops: the TORCH_LIBRARY(mxq) schemas and one impl per op, registered for the CPU,
// CUDA and Meta dispatch keys. The only file of the project with torch headers. It adapts tensors
// to the C++ API (include/mxq/mxq.h) and computes nothing itself:
//
//   quantize(x)             -> (q_row, s_row, q_col, s_col)   mxq::quantize, fused (one kernel)
//   quantize.out(x, *, q_row, s_row, q_col, s_col) -> ()     mxq::quantize into the caller's outputs
//                              (a pair left out skips its axis; no allocation)
//   quantize_rowwise(x)     -> (q_row, s_row)                 mxq::quantize, colwise pair null
//   quantize_colwise(x)     -> (q_col, s_col)                 mxq::quantize, rowwise pair null
//   quantize_composed(x)    -> (q_row, s_row, q_col, s_col)   mxq::quantize_composed (baseline;
//                              MXFP8 only)
//   dequantize(q, scales, offs, layout, format) -> bf16 (rows, cols); layout "blocked", "m_groups" (q_row
//                              with grouped s_row) or "k_groups" (q_col.t() with grouped s_col)
//   validate_offs(offs, M, format) -> ()                     synchronizing offs checker
//   quantize_routed(x, index, counts, scale, scaling_mode, rowwise, colwise, format)
//                           -> (q_row, s_row, q_col, s_col, offs_p, dest)   mxq::quantize_routed
//   quantize_weight(w, scaling_mode, weight_scaling, rowwise, colwise, format)
//                           -> (q_row, s_row, q_col, s_col)   mxq::quantize_weight (expert weights)
//   grouped_mm_fp8_blockwise(a, a_scale, b, b_scale, offs, grouping) -> bf16   mxq::grouped_gemm
//                              (the MoE experts' FP8 blockwise GEMMs; CUDA: SM90 only)
//   combine(y, dest, token_rows, scale) -> bf16 (T, D)             mxq::combine
//   combine_score_grad(dout, y, dest, token_rows) -> fp32 (T, top_k) mxq::combine_score_grad
//                              (the MoE layer's routed rows back to their tokens, and the gate
//                              scores' gradient of that)
// Every quantize op takes (Tensor x, int block_size=32, str scaling_mode="rceil", Tensor? offs,
// str format="mxfp8"); every op names its block format last, "mxfp8" (the default, so calls
// written before FP8 blockwise keep their meaning) or "fp8_blockwise" (block_size 128).
//
// Outputs (docs/numerics.md §5-§6, §13), x bf16, fp16 or fp32 (M, K) contiguous, shapes from
// include/mxq/layout.h:
//   q_row  float8_e4m3fn   (M, K), contiguous
//   s_row  float8_e8m0fnu  s_row_shape(M, K, G): blocked, or the M-groups layout with offs
//          float32         FP8 blockwise: factor_shape(M, K) = (M, K/128), strides (1, M), with
//                          offs too (a group's factors are a slice)
//   q_col  float8_e4m3fn   logical (M, K), strides (1, M): the row-major (K, M) array the kernels
//                          write (row k = column k of x); q_col.t() is that array, contiguous
//   s_col  float8_e8m0fnu  s_col_shape(M, K, G): blocked, or the K-groups layout with offs
//          float32         FP8 blockwise: factor_shape(K, M) = (K, M/128), strides (1, K)
// FP8 blockwise's factors are what torch.nn.functional.scaled_mm's BlockWise1x128 takes as they
// are: s_row with q_row (the forward's and dgrad's left operand), s_col with q_col.t() (wgrad's).
//
// Dispatch: one impl per op (a Meta instance of it makes no core call). It checks what only the torch layer can see
// (dtype, rank, contiguity, devices), allocates (empty_output: CUDA-graph capturable) from the
// layout.h formulas — with SymInts, so the Meta impl works under torch.compile with dynamic shapes —
// and makes one core call: the bit-exact reference mxq::ref::* for CPU
// tensors (so op(x.cpu()) is the oracle for op(x.cuda())), the GPU entry point on the current
// stream for CUDA tensors. The core validates everything else (alignment, limits, group count);
// its size rules also run before allocating, where the sizes are known (check_known_sizes).
// Grouped CUDA calls pass no status word: a malformed offs is clamped on the device without a
// report; mxq.validate_offs is the synchronizing checker.
//
// Errors: a wrong dtype raises TypeError, every other argument mistake ValueError, a missing
// capability or a CUDA failure RuntimeError — the same class and text on CPU and CUDA. Messages
// start with the op ("mxq.quantize: ...") once.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <array>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "mxq/mxq.h"

#ifdef MXQ_TORCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mxq::torch_ext {
namespace {

using at::Tensor;
using c10::SymInt;
using OptTensor = std::optional<Tensor>;
using Quant2 = std::tuple<Tensor, Tensor>;
using Quant4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;

// An output on `like`'s device. The shapes are SymInts for the Meta instance (torch.compile traces
// with symbolic sizes). A CUDA output comes straight from the caching allocator (graph-capturable,
// as at::empty), without a dispatcher round trip per output: that round trip is part of the eager
// per-call cost (docs/performance.md, "Eager cost").
Tensor empty_output(const Tensor& like, c10::SymIntArrayRef sizes, at::ScalarType dtype,
                    c10::SymIntArrayRef strides = {}) {  // strides: none for contiguous
#ifdef MXQ_TORCH_WITH_CUDA
  if (like.is_cuda()) {
    const c10::IntArrayRef n = C10_AS_INTARRAYREF_SLOW(sizes);
    return strides.empty() ? Tensor(at::detail::empty_cuda(n, dtype, like.device(), std::nullopt))
                           : Tensor(at::detail::empty_strided_cuda(
                                 n, C10_AS_INTARRAYREF_SLOW(strides), dtype, like.device()));
  }
#endif
  const auto options = like.options().dtype(dtype);
  return strides.empty() ? at::empty_symint(sizes, options)
                         : at::empty_strided_symint(sizes, strides, options);
}

// Runs a core call; its mxq::Error becomes the torch error of its kind, named after the op.
template <typename F>
void call_core(const char* op, F&& f) {
  try {
    f();
  } catch (const mxq::Error& e) {
    TORCH_CHECK_VALUE(e.kind() != Error::Kind::kInvalidArgument, op, ": ", e.message());
    TORCH_CHECK(false, op, ": ", e.message());
  }
}

cudaStream_t current_stream(const Tensor& t) {
#ifdef MXQ_TORCH_WITH_CUDA
  if (t.is_cuda()) return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
  (void)t;
  return nullptr;
}

// The device guard of a CUDA call (nothing for CPU and Meta tensors).
struct DeviceGuard {
#ifdef MXQ_TORCH_WITH_CUDA
  explicit DeviceGuard(const Tensor& t)
      : guard(t.is_cuda() ? t.device() : std::optional<c10::Device>()) {}
  c10::cuda::OptionalCUDAGuard guard;
#else
  explicit DeviceGuard(const Tensor&) {}
#endif
};

// A dtype as Python prints it ("torch.float64"), not c10's name ("Double").
std::string torch_dtype(at::ScalarType t) {
  return "torch." + std::string(c10::getDtypeNames(t).first);
}

void check_offs(const char* op, const OptTensor& offs, const Tensor& x, const char* x_name) {
  if (!offs.has_value()) return;
  const Tensor& o = *offs;
  TORCH_CHECK_TYPE(o.scalar_type() == at::kInt, op, ": offs must be torch.int32, got ",
                   torch_dtype(o.scalar_type()));
  TORCH_CHECK_VALUE(o.dim() == 1, op, ": offs must be 1-D (G,), got a ", o.dim(),
                    "-D tensor of shape ", o.sym_sizes());
  TORCH_CHECK_VALUE(o.is_contiguous(), op, ": offs must be contiguous, got strides ",
                    o.sym_strides());
  TORCH_CHECK_VALUE(o.device() == x.device(), op, ": offs must be on ", x_name, "'s device (",
                    x.device(), "), got ", o.device());
}

// An empty offs tensor has no storage (a null pointer), which the core would read as "no groups";
// it stands for "grouped, G = 0", so it gets a pointer of its own, which the core rejects (G must
// be at least 1) before anything could read it.
const int32_t* offs_ptr(const OptTensor& offs) {
  static const int32_t kNoGroups = 0;
  if (!offs.has_value()) return nullptr;
  return offs->numel() == 0 ? &kNoGroups : offs->const_data_ptr<int32_t>();
}
uint8_t* bytes(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

// The core's size rules where the sizes are known (not symbolic): before any output is allocated,
// so the Meta instance refuses what the op refuses (mxq.empty_quantized, tracing with static
// shapes) instead of sizing outputs for a shape no call accepts. `check` is a core check_*sizes.
template <typename Check>
void check_known_sizes(const char* op, Check check, std::initializer_list<SymInt> sizes) {
  std::array<int64_t, 3> v{};
  size_t i = 0;
  for (const SymInt& s : sizes) {
    const std::optional<int64_t> n = s.maybe_as_int();
    if (!n.has_value()) return;
    v[i++] = *n;
  }
  call_core(op, [&] { check(v[0], v[1], v[2]); });
}

// ---- the block format and its options ----

// What the torch layer needs of a block format (include/mxq/format.h).
struct FormatSpec {
  Format format;
  const char* name;           // the schemas' string
  int64_t block;              // elements per scale block: block_size of the quantize ops
  at::ScalarType scale_type;  // E8M0 bytes, or fp32 factors
  bool outer_major;           // scales stored outer dimension fastest (strides (1, rows))
};

constexpr FormatSpec kMxfp8Spec{Format::kMxfp8, "mxfp8", Mxfp8::kBlock, at::kFloat8_e8m0fnu, false};
constexpr FormatSpec kBlockwiseSpec{Format::kFp8Blockwise, "fp8_blockwise", Fp8Blockwise::kBlock,
                                    at::kFloat, true};

FormatSpec check_format(const char* op, c10::string_view name) {
  TORCH_CHECK_VALUE(name == "mxfp8" || name == "fp8_blockwise", op,
                    ": format must be \"mxfp8\" or \"fp8_blockwise\", got \"", name, "\"");
  return name == "mxfp8" ? kMxfp8Spec : kBlockwiseSpec;
}

// The scale rules a format takes (docs/numerics.md §3, §13): MXFP8 "rceil" or "floor" (its
// messages unchanged from before FP8 blockwise), FP8 blockwise "fp32" or "rceil". Checked here, not
// by the core, so the Meta instance refuses what the op refuses.
ScalingMode check_scaling_mode(const char* op, c10::string_view name, const FormatSpec& f) {
  if (f.format == Format::kMxfp8) {
    TORCH_CHECK_VALUE(
        name == "rceil" || name == "floor", op,
        ": scaling_mode must be \"rceil\" or \"floor\", got \"", name, "\"",
        name == "fp32" ? " (\"fp32\" is FP8 blockwise's rule: format=\"fp8_blockwise\")" : "");
    return name == "rceil" ? ScalingMode::kRceil : ScalingMode::kFloor;
  }
  TORCH_CHECK_VALUE(name == "fp32" || name == "rceil", op,
                    ": scaling_mode must be \"fp32\" or \"rceil\" for format \"", f.name,
                    "\", got \"", name, "\"");
  return name == "fp32" ? ScalingMode::kFp32 : ScalingMode::kRceil;
}

// A scale output: MXFP8's blocked bytes are contiguous, FP8 blockwise's factors outer-major.
Tensor scale_output(const Tensor& like, const FormatSpec& f, const std::array<SymInt, 2>& sizes) {
  if (!f.outer_major) return empty_output(like, sizes, f.scale_type);
  return empty_output(like, sizes, f.scale_type, {SymInt(1), sizes[0]});
}

// ---- quantize ----

std::optional<DType> input_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return DType::kBFloat16;
    case at::kHalf:
      return DType::kFloat16;
    case at::kFloat:
      return DType::kFloat32;
    default:
      return std::nullopt;
  }
}

// Which quantize op a call is: both axes in one kernel, one axis, or the three-kernel baseline (the
// same names as the C++ tests' Path; the kernels' Variant, src/kernels/quantize.h, is what one
// launch writes).
enum class Path { kFused, kRowwise, kColwise, kComposed };

struct Outputs {
  Tensor q_row, s_row, q_col, s_col;
};

// What every quantize op checks of its inputs (the core checks the values), and the output shapes
// from layout.h: q_col has the logical (M, K) of q_row, strides (1, M) over the physical (K, M) array.
struct QuantizeCall {
  DType dtype;
  FormatSpec format;
  ScalingMode scaling_mode;
  std::array<SymInt, 2> q, s_row, s_col;  // q: (M, K), the logical shape of q_row and of q_col
};

// x of a quantize op: a contiguous 2-D bf16 / fp16 / fp32 tensor; `shape` names its dimensions.
DType check_x(const char* op, const Tensor& x, const char* shape) {
  const std::optional<DType> dtype = input_dtype(x.scalar_type());
  TORCH_CHECK_TYPE(dtype.has_value(), op,
                   ": x must be torch.bfloat16, torch.float16 or torch.float32, got ",
                   torch_dtype(x.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() == 2, op, ": x must be 2-D ", shape, ", got a ", x.dim(),
                    "-D tensor of shape ", x.sym_sizes());
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": x must be contiguous (row-major), got strides ",
                    x.sym_strides(), " for shape ", x.sym_sizes());
  return *dtype;
}

QuantizeCall check_quantize_input(const char* op, const Tensor& x, int64_t block_size,
                                  c10::string_view scaling_mode, const OptTensor& offs,
                                  c10::string_view format) {
  const DType dtype = check_x(op, x, "(M, K)");
  const FormatSpec f = check_format(op, format);
  if (f.format == Format::kMxfp8) {
    TORCH_CHECK_VALUE(block_size == f.block, op, ": block_size must be ", f.block, ", got ",
                      block_size);
  } else {
    TORCH_CHECK_VALUE(block_size == f.block, op, ": block_size must be ", f.block, " for format \"",
                      f.name, "\", got ", block_size);
  }
  const ScalingMode mode = check_scaling_mode(op, scaling_mode, f);
  check_offs(op, offs, x, "x");

  const SymInt M = x.sym_size(0), K = x.sym_size(1);
  const bool grouped = offs.has_value();
  const SymInt G = grouped ? offs->sym_size(0) : SymInt(0);
  check_known_sizes(op, [&](int64_t m, int64_t k, int64_t g) { check_sizes(m, k, g, f.format); },
                    {M, K, grouped ? G : SymInt(-1)});
  if (f.format == Format::kFp8Blockwise) {
    // The factors of grouped mode are the dense ones (each group's a slice): no G in the shapes.
    const auto s_row = factor_shape(M, K);
    const auto s_col = factor_shape(K, M);
    return {dtype, f, mode, {M, K}, {s_row.rows, s_row.cols}, {s_col.rows, s_col.cols}};
  }
  const auto s_row = s_row_shape(M, K, G, grouped);
  const auto s_col = s_col_shape(M, K, G, grouped);
  return {dtype, f, mode, {M, K}, {s_row.rows, s_row.cols}, {s_col.rows, s_col.cols}};
}

// One core call writing the outputs present in `o` (an absent pair skips its axis).
void run_quantize(const char* op, Path path, const Tensor& x, const QuantizeCall& call,
                  const OptTensor& offs, const Outputs& o) {
  QuantizeParams p;
  p.x = x.const_data_ptr();
  p.dtype = call.dtype;
  p.M = x.size(0);
  p.K = x.size(1);
  p.format = call.format.format;
  p.scaling_mode = call.scaling_mode;
  p.offs = offs_ptr(offs);
  p.num_groups = offs.has_value() ? offs->size(0) : 0;
  if (o.q_row.defined()) {
    p.q_row = bytes(o.q_row);
    p.s_row = bytes(o.s_row);
  }
  if (o.q_col.defined()) {
    p.q_col = bytes(o.q_col);
    p.s_col = bytes(o.s_col);
  }
  const DeviceGuard guard(x);
  p.stream = current_stream(x);
  call_core(op, [&] {
    if (!x.is_cuda()) {
      ref::quantize(p);
    } else if (path != Path::kComposed) {
      mxq::quantize(p);
    } else {
      // Stream-ordered workspace from the caching allocator (graph-capturable); freed after
      // enqueueing, which is safe because every later use of the block is ordered after this
      // stream's work.
      const Tensor ws = empty_output(x, {SymInt(composed_workspace_bytes(p.M, p.K))}, at::kByte);
      mxq::quantize_composed(p, ws.data_ptr());
    }
  });
}

Outputs quantize_impl(const char* op, Path path, bool meta, const Tensor& x, int64_t block_size,
                      c10::string_view scaling_mode, const OptTensor& offs,
                      c10::string_view format) {
  const QuantizeCall call = check_quantize_input(op, x, block_size, scaling_mode, offs, format);
  // The composed path is MXFP8's three-kernel baseline (rowwise, colwise, swizzle); FP8 blockwise
  // has no scale swizzle, so there is nothing for it to compare against.
  TORCH_CHECK_VALUE(path != Path::kComposed || call.format.format == Format::kMxfp8, op,
                    ": format \"", call.format.name,
                    "\" has no composed path (the three-kernel baseline is MXFP8's); use "
                    "mxq.quantize");
  Outputs o;
  if (path != Path::kColwise) {
    o.q_row = empty_output(x, call.q, at::kFloat8_e4m3fn);
    o.s_row = scale_output(x, call.format, call.s_row);
  }
  if (path != Path::kRowwise) {
    // The (K, M) storage seen as (M, K): strides (1, M), M = 0 included.
    o.q_col = empty_output(x, call.q, at::kFloat8_e4m3fn, {SymInt(1), call.q[0]});
    o.s_col = scale_output(x, call.format, call.s_col);
  }
  if (!meta) run_quantize(op, path, x, call, offs, o);
  return o;
}

// ---- quantize.out: the fused op into the caller's outputs ----
//
// Each output must be what quantize returns for these inputs (dtype, shape, q_row / s_row / s_col
// contiguous, q_col's transpose contiguous), on x's device, overlapping neither x nor another
// output; the rowwise pair and the colwise pair are each given whole or left out (that axis is
// skipped), and at least one is given. Nothing is written before every check has passed. Without
// allocations the eager call costs about what a native elementwise op does (docs/performance.md,
// "Eager cost").

// t (rows, cols) is the transpose of a contiguous (cols, rows) array: strides (1, rows), a dimension of
// size 1 taking any stride, as is_contiguous has it (t.t().is_contiguous() without making the view,
// which would cost the eager call a dispatch).
bool is_transpose_contiguous(const Tensor& t) {
  const auto sizes = t.sym_sizes();
  const auto strides = t.sym_strides();
  return t.sym_numel() == 0 ||
         ((sizes[0] == 1 || strides[0] == 1) && (sizes[1] == 1 || strides[1] == sizes[0]));
}

// transposed: the strides (1, rows) that quantize gives q_col and FP8 blockwise's factors, named
// in the message as `strides` ("(1, M)"); nullptr: contiguous.
void check_output(const char* op, const char* name, const Tensor& t, const Tensor& x,
                  at::ScalarType dtype, const std::array<SymInt, 2>& sizes,
                  const char* transposed) {
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, op, ": ", name, " must be ", torch_dtype(dtype),
                   ", got ", torch_dtype(t.scalar_type()));
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " must be on x's device (",
                    x.device(), "), got ", t.device());
  const bool shape_ok = t.dim() == 2 && t.sym_size(0)
                                            .sym_eq(sizes[0])
                                            .sym_and(t.sym_size(1).sym_eq(sizes[1]))
                                            .expect_true(__FILE__, __LINE__);
  TORCH_CHECK_VALUE(shape_ok, op, ": ", name, " must have shape [", sizes[0], ", ", sizes[1],
                    "], got ", t.sym_sizes());
  if (transposed != nullptr) {
    TORCH_CHECK_VALUE(is_transpose_contiguous(t), op, ": ", name, " must have strides ", transposed,
                      " (", name, ".t() contiguous, as quantize returns it), got ",
                      t.sym_strides());
  } else {
    TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous, got strides ",
                      t.sym_strides());
  }
}

template <bool kMeta>
void quantize_out(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                  const OptTensor& offs, c10::string_view format, const OptTensor& q_row,
                  const OptTensor& s_row, const OptTensor& q_col, const OptTensor& s_col) {
  constexpr const char* op = "mxq.quantize";
  const QuantizeCall call = check_quantize_input(op, x, block_size, scaling_mode, offs, format);
  const bool outer_major = call.format.outer_major;
  TORCH_CHECK_VALUE(q_row.has_value() == s_row.has_value(), op,
                    ": out must give q_row and s_row together (or neither, to skip the rowwise "
                    "axis)");
  TORCH_CHECK_VALUE(q_col.has_value() == s_col.has_value(), op,
                    ": out must give q_col and s_col together (or neither, to skip the colwise "
                    "axis)");
  TORCH_CHECK_VALUE(q_row.has_value() || q_col.has_value(), op,
                    ": out must give at least one pair of outputs, got none");
  Outputs o;
  if (q_row.has_value()) {
    check_output(op, "q_row", *q_row, x, at::kFloat8_e4m3fn, call.q, nullptr);
    check_output(op, "s_row", *s_row, x, call.format.scale_type, call.s_row,
                 outer_major ? "(1, M)" : nullptr);
    o.q_row = *q_row;
    o.s_row = *s_row;
  }
  if (q_col.has_value()) {
    check_output(op, "q_col", *q_col, x, at::kFloat8_e4m3fn, call.q, "(1, M)");
    check_output(op, "s_col", *s_col, x, call.format.scale_type, call.s_col,
                 outer_major ? "(1, K)" : nullptr);
    o.q_col = *q_col;
    o.s_col = *s_col;
  }
  if (kMeta) return;
  // Real memory only: a meta tensor has none (and may have symbolic sizes).
  const std::array<std::pair<const char*, const Tensor*>, 5> tensors{{{"x", &x},
                                                                      {"q_row", &o.q_row},
                                                                      {"s_row", &o.s_row},
                                                                      {"q_col", &o.q_col},
                                                                      {"s_col", &o.s_col}}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t j = i + 1; j < tensors.size(); ++j) {
      const Tensor &a = *tensors[i].second, &b = *tensors[j].second;
      TORCH_CHECK_VALUE(
          !a.defined() || !b.defined() || at::get_overlap_status(a, b) == at::MemOverlapStatus::No,
          op, ": ", tensors[j].first, " must not overlap ", tensors[i].first);
    }
  }
  run_quantize(op, Path::kFused, x, call, offs, o);
}

// The ops. kMeta: the Meta key's instance, which allocates and makes no core call.
template <bool kMeta>
Quant4 quantize(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                const OptTensor& offs, c10::string_view format) {
  Outputs o =
      quantize_impl("mxq.quantize", Path::kFused, kMeta, x, block_size, scaling_mode, offs, format);
  return {o.q_row, o.s_row, o.q_col, o.s_col};
}

template <bool kMeta>
Quant4 quantize_composed(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                         const OptTensor& offs, c10::string_view format) {
  Outputs o = quantize_impl("mxq.quantize_composed", Path::kComposed, kMeta, x, block_size,
                            scaling_mode, offs, format);
  return {o.q_row, o.s_row, o.q_col, o.s_col};
}

template <bool kMeta>
Quant2 quantize_rowwise(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                        const OptTensor& offs, c10::string_view format) {
  Outputs o = quantize_impl("mxq.quantize_rowwise", Path::kRowwise, kMeta, x, block_size,
                            scaling_mode, offs, format);
  return {o.q_row, o.s_row};
}

template <bool kMeta>
Quant2 quantize_colwise(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                        const OptTensor& offs, c10::string_view format) {
  Outputs o = quantize_impl("mxq.quantize_colwise", Path::kColwise, kMeta, x, block_size,
                            scaling_mode, offs, format);
  return {o.q_col, o.s_col};
}

// ---- dequantize ----

template <bool kMeta>
Tensor dequantize(const Tensor& q, const Tensor& scales, const OptTensor& offs,
                  c10::string_view layout_name, c10::string_view format) {
  constexpr const char* op = "mxq.dequantize";
  const FormatSpec f = check_format(op, format);
  const ScaleLayout layout = layout_name == "blocked"    ? ScaleLayout::kBlocked
                             : layout_name == "m_groups" ? ScaleLayout::kMGroups
                                                         : ScaleLayout::kKGroups;
  TORCH_CHECK_VALUE(
      layout_name == "blocked" || layout_name == "m_groups" || layout_name == "k_groups", op,
      ": layout must be \"blocked\", \"m_groups\" or \"k_groups\", got \"", layout_name, "\"");
  TORCH_CHECK_VALUE((layout == ScaleLayout::kBlocked) == !offs.has_value(), op,
                    layout == ScaleLayout::kBlocked
                        ? ": the blocked layout takes no offs (pass layout=\"m_groups\" for "
                          "rowwise data or \"k_groups\" for colwise data)"
                        : ": the grouped layouts need offs");
  // FP8 blockwise's grouped factors are a slice of the dense ones: only the blocked layout.
  TORCH_CHECK_VALUE(f.format == Format::kMxfp8 || layout == ScaleLayout::kBlocked, op,
                    ": format \"", f.name, "\" takes layout \"blocked\" without offs (its grouped ",
                    "factors are a slice of the dense ones), got \"", layout_name, "\"");
  TORCH_CHECK_TYPE(q.scalar_type() == at::kFloat8_e4m3fn, op,
                   ": q must be torch.float8_e4m3fn, got ", torch_dtype(q.scalar_type()));
  TORCH_CHECK_VALUE(q.dim() == 2, op, ": q must be 2-D (rows, cols), got a ", q.dim(),
                    "-D tensor of shape ", q.sym_sizes());
  TORCH_CHECK_VALUE(q.is_contiguous(), op, ": q must be contiguous (rows, cols), got strides ",
                    q.sym_strides(), " for shape ", q.sym_sizes(),
                    "; for colwise data pass q_col.t(), the (K, M) array");
  TORCH_CHECK_TYPE(scales.scalar_type() == f.scale_type, op, ": scales must be ",
                   torch_dtype(f.scale_type),
                   f.format == Format::kMxfp8 ? "" : " for format \"fp8_blockwise\"", ", got ",
                   torch_dtype(scales.scalar_type()));
  if (f.outer_major) {
    TORCH_CHECK_VALUE(scales.dim() == 2 && is_transpose_contiguous(scales), op,
                      ": scales must be a 2-D tensor with strides (1, rows) (the factors quantize "
                      "returns), got shape ",
                      scales.sym_sizes(), " strides ", scales.sym_strides());
  } else {
    TORCH_CHECK_VALUE(scales.dim() == 2 && scales.is_contiguous(), op,
                      ": scales must be a contiguous 2-D tensor, got shape ", scales.sym_sizes(),
                      " strides ", scales.sym_strides());
  }
  TORCH_CHECK_VALUE(scales.device() == q.device(), op, ": scales must be on q's device (",
                    q.device(), "), got ", scales.device());
  check_offs(op, offs, q, "q");
  // The scales of q's (rows, cols/32) blocks: blocked, the M-groups allocation of s_row (rows are
  // tokens: (M, K) = (rows, cols)) or the K-groups allocation of s_col ((M, K) = (cols, rows)).
  const SymInt rows = q.sym_size(0), cols = q.sym_size(1);
  const bool grouped = offs.has_value();
  const SymInt G = grouped ? offs->sym_size(0) : SymInt(0);
  check_known_sizes(
      op, [&](int64_t r, int64_t c, int64_t g) { check_dequantize_sizes(r, c, g, f.format); },
      {rows, cols, grouped ? G : SymInt(-1)});
  const auto want = f.format == Format::kFp8Blockwise ? factor_shape(rows, cols)
                    : layout == ScaleLayout::kMGroups ? s_row_shape(rows, cols, G, true)
                                                      : s_col_shape(cols, rows, G, grouped);
  const c10::SymBool shape_ok =
      scales.sym_size(0).sym_eq(want.rows).sym_and(scales.sym_size(1).sym_eq(want.cols));
  TORCH_CHECK_VALUE(shape_ok.expect_true(__FILE__, __LINE__), op, ": scales must have shape [",
                    want.rows, ", ", want.cols, "] for q of shape ", q.sym_sizes(), " (",
                    layout_name, " layout), got ", scales.sym_sizes());
  Tensor out = empty_output(q, {rows, cols}, at::kBFloat16);
  if (kMeta) return out;

  DequantizeParams p;
  p.q = static_cast<const uint8_t*>(q.const_data_ptr());
  p.scales = static_cast<const uint8_t*>(scales.const_data_ptr());
  p.rows = q.size(0);
  p.cols = q.size(1);
  p.format = f.format;
  p.layout = layout;
  p.offs = offs_ptr(offs);
  p.num_groups = grouped ? offs->size(0) : 0;
  p.out = out.data_ptr();
  const DeviceGuard guard(q);
  p.stream = current_stream(q);
  call_core(op, [&] { q.is_cuda() ? mxq::dequantize(p) : ref::dequantize(p); });
  return out;
}

// ---- quantize_weight: expert weights (docs/numerics.md §11) ----
//
// w bf16, fp16 or fp32, contiguous: (G, N, K), or (N, K) for a dense weight (G = 1, 2-D outputs).
// N and K multiples of 32 (the core checks). Outputs, shapes from include/mxq/layout.h:
//            3-D w (G, N, K)                          2-D w (N, K)
//   q_row    (G, N, K) contiguous                     (N, K) contiguous
//   s_row    weight_s_row_shape(G, N, K):             s_row_shape(N, K): blocked
//            (G, roundup(N,128)*roundup(K/32,4))      (roundup(N,128), roundup(K/32,4))
//   q_col    logical (G, N, K), strides (N*K, 1, N):  logical (N, K), strides (1, N)
//            the physical (G, K, N) array             the physical (K, N) array
//   s_col    weight_s_col_shape(G, N, K):             s_col_shape(N, K): blocked
//            (G, roundup(K,128)*roundup(N/32,4))      (roundup(K,128), roundup(N/32,4))
// These are the operands torch._scaled_grouped_mm takes for a 3-D mat_b (and torch._scaled_mm
// for a 2-D one): mat_b = q_row.transpose(-2, -1) with s_row (forward, contraction over K), or
// mat_b = q_col with s_col (dgrad, contraction over N); both are column-major in their last two
// dimensions. A skipped axis (rowwise=False or colwise=False) gives empty tensors (shape (0,)) of
// the output dtypes in its two places.
//
// FP8 blockwise (format "fp8_blockwise", weight_scaling "128x128", N and K multiples of 128): one
// fp32 factor per 128x128 tile; q_row and q_col as above (q_col the per-expert transpose of q_row),
// the factors contiguous, padding 0 (layout.h weight_factor_shape):
//   s_row    (G, N/128, roundup(K/128, 4)) / (N/128, roundup(K/128, 4)): tile (tn, tk) at [.., tn, tk]
//   s_col    (G, K/128, roundup(N/128, 4)) / (K/128, roundup(N/128, 4)): tile (tn, tk) at [.., tk, tn]
// For torch.nn.functional.scaled_mm (BlockWise128x128, 2-D w): the forward takes mat_b =
// q_row.t() with scale_b = s_row[:, :K/128].t(); dgrad takes mat_b = q_col with scale_b =
// s_col[:, :N/128].t() (cuBLASLt's 128x128 scales: the contraction's tiles fastest, their count
// padded to a multiple of 4).

template <bool kMeta>
Quant4 quantize_weight(const Tensor& w, c10::string_view scaling_mode,
                       c10::string_view weight_scaling, bool rowwise, bool colwise,
                       c10::string_view format) {
  constexpr const char* op = "mxq.quantize_weight";
  const std::optional<DType> dtype = input_dtype(w.scalar_type());
  TORCH_CHECK_TYPE(dtype.has_value(), op,
                   ": w must be torch.bfloat16, torch.float16 or torch.float32, got ",
                   torch_dtype(w.scalar_type()));
  TORCH_CHECK_VALUE(w.dim() == 2 || w.dim() == 3, op,
                    ": w must be 2-D (N, K) or 3-D (G, N, K), got a ", w.dim(),
                    "-D tensor of shape ", w.sym_sizes());
  TORCH_CHECK_VALUE(w.is_contiguous(), op, ": w must be contiguous (row-major), got strides ",
                    w.sym_strides(), " for shape ", w.sym_sizes());
  const FormatSpec f = check_format(op, format);
  const ScalingMode mode = check_scaling_mode(op, scaling_mode, f);
  WeightScaling scaling = WeightScaling::k128x128;
  if (f.format == Format::kMxfp8) {
    TORCH_CHECK_VALUE(
        weight_scaling == "1x32" || weight_scaling == "32x32", op,
        ": weight_scaling must be \"1x32\" or \"32x32\", got \"", weight_scaling, "\"",
        weight_scaling == "128x128" ? " (\"128x128\" is FP8 blockwise's: format=\"fp8_blockwise\")"
                                    : "");
    scaling = weight_scaling == "1x32" ? WeightScaling::k1x32 : WeightScaling::k32x32;
  } else {
    TORCH_CHECK_VALUE(weight_scaling == "128x128", op,
                      ": weight_scaling must be \"128x128\" for format \"", f.name, "\", got \"",
                      weight_scaling, "\"");
  }
  TORCH_CHECK_VALUE(rowwise || colwise, op,
                    ": at least one of rowwise and colwise must be True, got both False");

  const bool experts = w.dim() == 3;
  const SymInt G = experts ? w.sym_size(0) : SymInt(1);
  const SymInt N = w.sym_size(-2), K = w.sym_size(-1);
  check_known_sizes(op,
                    [&](int64_t g, int64_t n, int64_t k) { check_weight_sizes(g, n, k, f.format); },
                    {G, N, K});
  const auto skipped = [&](at::ScalarType t) { return empty_output(w, {SymInt(0)}, t); };
  Tensor q_row = skipped(at::kFloat8_e4m3fn), s_row = skipped(f.scale_type);
  Tensor q_col = skipped(at::kFloat8_e4m3fn), s_col = skipped(f.scale_type);
  if (f.format == Format::kFp8Blockwise) {
    // Per expert, layout.h weight_factor_shape's count as the row-major (outer/128,
    // roundup(inner/128, 4)) matrix it is.
    const auto factors = [&](const SymInt& outer, const SymInt& inner) {
      const SymInt rows = outer / Fp8Blockwise::kBlock;
      const SymInt cols = round_up(inner / Fp8Blockwise::kBlock, 4);
      return experts ? empty_output(w, {G, rows, cols}, at::kFloat)
                     : empty_output(w, {rows, cols}, at::kFloat);
    };
    if (rowwise) {
      q_row = experts ? empty_output(w, {G, N, K}, at::kFloat8_e4m3fn)
                      : empty_output(w, {N, K}, at::kFloat8_e4m3fn);
      s_row = factors(N, K);
    }
    if (colwise) {
      q_col = experts ? empty_output(w, {G, N, K}, at::kFloat8_e4m3fn, {N * K, SymInt(1), N})
                      : empty_output(w, {N, K}, at::kFloat8_e4m3fn, {SymInt(1), N});
      s_col = factors(K, N);
    }
  } else {
    if (rowwise) {
      if (experts) {
        const auto s = weight_s_row_shape(G, N, K);
        q_row = empty_output(w, {G, N, K}, at::kFloat8_e4m3fn);
        s_row = empty_output(w, {s.rows, s.cols}, at::kFloat8_e8m0fnu);
      } else {
        const auto q = q_row_shape(N, K);
        const auto s = s_row_shape(N, K);
        q_row = empty_output(w, {q.rows, q.cols}, at::kFloat8_e4m3fn);
        s_row = empty_output(w, {s.rows, s.cols}, at::kFloat8_e8m0fnu);
      }
    }
    if (colwise) {
      // Each expert's physical (K, N) array seen as its logical (N, K): strides (1, N).
      if (experts) {
        const auto s = weight_s_col_shape(G, N, K);
        q_col = empty_output(w, {G, N, K}, at::kFloat8_e4m3fn, {N * K, SymInt(1), N});
        s_col = empty_output(w, {s.rows, s.cols}, at::kFloat8_e8m0fnu);
      } else {
        const auto q = q_col_shape(N, K);
        const auto s = s_col_shape(N, K, SymInt(0), false);
        q_col = empty_output(w, {q.cols, q.rows}, at::kFloat8_e4m3fn, {SymInt(1), q.cols});
        s_col = empty_output(w, {s.rows, s.cols}, at::kFloat8_e8m0fnu);
      }
    }
  }
  if (kMeta) return {q_row, s_row, q_col, s_col};

  QuantizeWeightParams p;
  p.w = w.const_data_ptr();
  p.dtype = *dtype;
  p.G = experts ? w.size(0) : 1;
  p.N = w.size(-2);
  p.K = w.size(-1);
  p.format = f.format;
  p.scaling_mode = mode;
  p.scaling = scaling;
  if (rowwise) {
    p.q_row = bytes(q_row);
    p.s_row = bytes(s_row);
  }
  if (colwise) {
    p.q_col = bytes(q_col);
    p.s_col = bytes(s_col);
  }
  const DeviceGuard guard(w);
  p.stream = current_stream(w);
  call_core(op, [&] { w.is_cuda() ? mxq::quantize_weight(p) : ref::quantize_weight(p); });
  return {q_row, s_row, q_col, s_col};
}

// ---- quantize_routed: the MoE input stage (docs/numerics.md §12.1) ----
//
// x (T, K) bf16, fp16 or fp32 contiguous; index (N,) int32 or int64; counts (E,) int32 or int64;
// scale (N,) fp32 or None; all on x's device. Outputs over Mp = padded_rows(N, E) rows (known from
// the shapes: no sync): q_row (Mp, K), s_row s_row_shape(Mp, K, E) (M-groups over offs_p), q_col
// logical (Mp, K) strides (1, Mp), s_col s_col_shape(Mp, K, E) (K-groups), offs_p (E,) int32,
// dest (N,) int32. A skipped axis gives empty tensors (shape (0,)) in its two places. The CPU
// dispatch (the reference) raises ValueError for an index out of range or counts that are negative
// or do not sum to N; CUDA checks them on the device without a report (no status word, as for
// grouped offs): a bad index reads as a zero row, bad counts are clamped, nothing is written
// outside the outputs.

void check_route_tensor(const char* op, const char* name, const Tensor& t, const Tensor& x,
                        std::initializer_list<at::ScalarType> dtypes, const char* dtype_names) {
  bool dtype_ok = false;
  for (at::ScalarType d : dtypes) dtype_ok |= t.scalar_type() == d;
  TORCH_CHECK_TYPE(dtype_ok, op, ": ", name, " must be ", dtype_names, ", got ",
                   torch_dtype(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 1, op, ": ", name, " must be 1-D, got a ", t.dim(),
                    "-D tensor of shape ", t.sym_sizes());
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous, got strides ",
                    t.sym_strides());
  TORCH_CHECK_VALUE(t.device() == x.device(), op, ": ", name, " must be on x's device (",
                    x.device(), "), got ", t.device());
}

using Routed6 = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;

template <bool kMeta>
Routed6 quantize_routed(const Tensor& x, const Tensor& index, const Tensor& counts,
                        const OptTensor& scale, c10::string_view scaling_mode, bool rowwise,
                        bool colwise, c10::string_view format) {
  constexpr const char* op = "mxq.quantize_routed";
  const DType dtype = check_x(op, x, "(T, K)");
  check_route_tensor(op, "index", index, x, {at::kInt, at::kLong}, "torch.int32 or torch.int64");
  check_route_tensor(op, "counts", counts, x, {at::kInt, at::kLong}, "torch.int32 or torch.int64");
  if (scale.has_value()) {
    check_route_tensor(op, "scale", *scale, x, {at::kFloat}, "torch.float32");
    const bool n_ok = scale->sym_size(0).sym_eq(index.sym_size(0)).expect_true(__FILE__, __LINE__);
    TORCH_CHECK_VALUE(n_ok, op, ": scale must have one entry per routed row (", index.sym_size(0),
                      ",), got shape ", scale->sym_sizes());
  }
  const FormatSpec f = check_format(op, format);
  const ScalingMode mode = check_scaling_mode(op, scaling_mode, f);
  TORCH_CHECK_VALUE(rowwise || colwise, op,
                    ": at least one of rowwise and colwise must be True, got both False");
  const bool blockwise = f.format == Format::kFp8Blockwise;

  const SymInt T = x.sym_size(0), K = x.sym_size(1);
  const SymInt N = index.sym_size(0), E = counts.sym_size(0);
  {
    std::array<int64_t, 4> v{};
    bool known = true;
    size_t i = 0;
    for (const SymInt& s : {T, K, N, E}) {
      const std::optional<int64_t> n = s.maybe_as_int();
      known &= n.has_value();
      v[i++] = n.value_or(0);
    }
    if (known) call_core(op, [&] { check_routed_sizes(v[0], v[1], v[2], v[3], f.format); });
  }
  // FP8 blockwise pads every group to 128 rows; its factors are the dense layout's (quantize's).
  const SymInt Mp = blockwise ? padded_rows<SymInt, Fp8Blockwise>(N, E) : padded_rows(N, E);
  const auto skipped = [&](at::ScalarType t) { return empty_output(x, {SymInt(0)}, t); };
  Tensor q_row = skipped(at::kFloat8_e4m3fn), s_row = skipped(f.scale_type);
  Tensor q_col = skipped(at::kFloat8_e4m3fn), s_col = skipped(f.scale_type);
  if (rowwise) {
    const auto s = blockwise ? factor_shape(Mp, K) : s_row_shape(Mp, K, E, true);
    q_row = empty_output(x, {Mp, K}, at::kFloat8_e4m3fn);
    s_row = scale_output(x, f, {s.rows, s.cols});
  }
  if (colwise) {
    const auto s = blockwise ? factor_shape(K, Mp) : s_col_shape(Mp, K, E, true);
    q_col = empty_output(x, {Mp, K}, at::kFloat8_e4m3fn, {SymInt(1), Mp});
    s_col = scale_output(x, f, {s.rows, s.cols});
  }
  Tensor offs_p = empty_output(x, {E}, at::kInt);
  Tensor dest = empty_output(x, {N}, at::kInt);
  if (kMeta) return {q_row, s_row, q_col, s_col, offs_p, dest};

  QuantizeRoutedParams p;
  p.x = x.const_data_ptr();
  p.dtype = dtype;
  p.T = x.size(0);
  p.K = x.size(1);
  p.index = index.const_data_ptr();
  p.index_type = index.scalar_type() == at::kLong ? IndexType::kInt64 : IndexType::kInt32;
  p.N = index.size(0);
  p.counts = counts.const_data_ptr();
  p.counts_type = counts.scalar_type() == at::kLong ? IndexType::kInt64 : IndexType::kInt32;
  p.num_experts = counts.size(0);
  p.scale = scale.has_value() ? scale->const_data_ptr<float>() : nullptr;
  p.format = f.format;
  p.scaling_mode = mode;
  if (rowwise) {
    p.q_row = bytes(q_row);
    p.s_row = bytes(s_row);
  }
  if (colwise) {
    p.q_col = bytes(q_col);
    p.s_col = bytes(s_col);
  }
  p.offs_p = offs_p.data_ptr<int32_t>();
  p.dest = dest.data_ptr<int32_t>();
  const DeviceGuard guard(x);
  p.stream = current_stream(x);
  call_core(op, [&] {
    if (!x.is_cuda()) {
      ref::quantize_routed(p);
      return;
    }
    // Stream-ordered scratch from the caching allocator (graph-capturable), as for the composed
    // path's workspace.
    const Tensor ws = empty_output(
        x, {SymInt(quantize_routed_workspace_bytes(p.N, p.num_experts, p.format))}, at::kByte);
    p.workspace = ws.data_ptr();
    mxq::quantize_routed(p);
  });
  return {q_row, s_row, q_col, s_col, offs_p, dest};
}

// ---- validate_offs: the one offs checker, synchronizing for CUDA tensors ----

void validate_offs(const Tensor& offs, int64_t M, c10::string_view format) {
  constexpr const char* op = "mxq.validate_offs";
  const FormatSpec f = check_format(op, format);
  TORCH_CHECK_TYPE(offs.scalar_type() == at::kInt, op, ": offs must be torch.int32, got ",
                   torch_dtype(offs.scalar_type()));
  TORCH_CHECK_VALUE(offs.dim() == 1, op, ": offs must be 1-D (G,), got a ", offs.dim(),
                    "-D tensor of shape ", offs.sizes());
  const Tensor o = offs.contiguous();
  const DeviceGuard guard(o);
  call_core(op, [&] {
    if (o.is_cuda()) {
      mxq::validate_offs(o.const_data_ptr<int32_t>(), o.size(0), M, current_stream(o), f.format);
    } else {
      mxq::validate_offs_host(o.const_data_ptr<int32_t>(), o.size(0), M, f.format);
    }
  });
}

// ---- grouped_mm_fp8_blockwise: the experts' FP8 blockwise GEMMs (docs/numerics.md §13.6) ----
//
// The operands as quantize, quantize_routed and quantize_weight (format "fp8_blockwise") return
// them; offs (G,) int32, the group ends along the tokens M (quantize_routed's offs_p).
//   grouping "m_grouped" (forward, dgrad): a = q_row (M, K), a_scale = s_row (M, K/128) strides
//     (1, M); b (G, N, K) contiguous with b_scale (G, N/128, roundup(K/128, 4)): a weight's q_row
//     and s_row (forward), or its q_col.transpose(-2, -1) (the (G, K, N) array) and s_col (dgrad).
//     Returns (M, N) bf16, rows past offs[-1] zero.
//   grouping "k_grouped" (wgrad): a = dY's q_col.t() (N, M) contiguous, a_scale = dY's s_col (N,
//     M/128) strides (1, N); b = X's q_col.t() (K, M), b_scale = X's s_col (K, M/128) strides (1,
//     K). Returns (G, N, K) bf16, an empty group's slice zero.
// CPU: the emulated GEMM of the reference (dequantize, fp32 sums, bf16); CUDA: CUTLASS's SM90
// kernel (fp32 accumulation in another order: equal within the tolerance §13.6 states).
template <bool kMeta>
Tensor grouped_mm_fp8_blockwise(const Tensor& a, const Tensor& a_scale, const Tensor& b,
                                const Tensor& b_scale, const Tensor& offs,
                                c10::string_view grouping_name) {
  constexpr const char* op = "mxq.grouped_mm_fp8_blockwise";
  Grouping grouping{};
  call_core(op, [&] { grouping = parse_grouping(std::string(grouping_name)); });
  const bool m_grouped = grouping == Grouping::kMGrouped;
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"a", a}, {"b", b}}) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat8_e4m3fn, op, ": ", name,
                     " must be torch.float8_e4m3fn, got ", torch_dtype(t.scalar_type()));
  }
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor&>{"a_scale", a_scale}, {"b_scale", b_scale}}) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat, op, ": ", name, " must be torch.float32, got ",
                     torch_dtype(t.scalar_type()));
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor&>{"a_scale", a_scale},
                                {"b", b},
                                {"b_scale", b_scale},
                                {"offs", offs}}) {
    TORCH_CHECK_VALUE(t.device() == a.device(), op, ": ", name, " must be on a's device (",
                      a.device(), "), got ", t.device());
  }
  check_offs(op, offs, a, "a");
  TORCH_CHECK_VALUE(a.dim() == 2 && a.is_contiguous(), op, ": a must be a contiguous 2-D tensor (",
                    m_grouped ? "q_row (M, K)" : "q_col.t(), the (N, M) array", "), got shape ",
                    a.sym_sizes(), " strides ", a.sym_strides());
  const int b_dim = m_grouped ? 3 : 2;
  TORCH_CHECK_VALUE(b.dim() == b_dim && b.is_contiguous(), op, ": b must be a contiguous ", b_dim,
                    "-D tensor (",
                    m_grouped ? "(G, N, K): a weight's q_row, or q_col.transpose(-2, -1)"
                              : "q_col.t(), the (K, M) array",
                    "), got shape ", b.sym_sizes(), " strides ", b.sym_strides());
  const SymInt G = offs.sym_size(0);
  // (M, N, K) of the GEMMs; the operand that repeats a size must agree.
  const SymInt M = m_grouped ? a.sym_size(0) : a.sym_size(1);
  const SymInt N = m_grouped ? b.sym_size(1) : a.sym_size(0);
  const SymInt K = m_grouped ? a.sym_size(1) : b.sym_size(0);
  const SymInt b_len = m_grouped ? b.sym_size(2) : b.sym_size(1);
  const SymInt& want_len = m_grouped ? K : M;
  TORCH_CHECK_VALUE(b_len.sym_eq(want_len).expect_true(__FILE__, __LINE__), op, ": b must have ",
                    m_grouped ? "K" : "M", "=", want_len,
                    " in its last dimension (a's columns), got shape ", b.sym_sizes());
  TORCH_CHECK_VALUE(!m_grouped || b.sym_size(0).sym_eq(G).expect_true(__FILE__, __LINE__), op,
                    ": b must have one matrix per group (G=", G, ", offs' length), got shape ",
                    b.sym_sizes());
  std::array<std::optional<int64_t>, 4> known{M.maybe_as_int(), N.maybe_as_int(), K.maybe_as_int(),
                                              G.maybe_as_int()};
  if (known[0] && known[1] && known[2] && known[3]) {
    call_core(op, [&] { check_grouped_gemm_sizes(*known[0], *known[1], *known[2], *known[3]); });
  }
  // The factors: a's and (k_grouped) b's outer-major (strides (1, rows)), the weight's contiguous.
  const auto check_factors = [&](const char* name, const Tensor& t, const SymInt& rows,
                                 const SymInt& inner) {
    const SymInt cols = inner / Fp8Blockwise::kBlock;
    const bool ok = t.dim() == 2 && t.sym_size(0)
                                        .sym_eq(rows)
                                        .sym_and(t.sym_size(1).sym_eq(cols))
                                        .expect_true(__FILE__, __LINE__);
    TORCH_CHECK_VALUE(ok && is_transpose_contiguous(t), op, ": ", name, " must have shape [", rows,
                      ", ", cols, "] and strides (1, ", rows,
                      ") (the factors quantize returns), got shape ", t.sym_sizes(), " strides ",
                      t.sym_strides());
  };
  if (m_grouped) {
    check_factors("a_scale", a_scale, M, K);
    const SymInt rows = N / Fp8Blockwise::kBlock;
    const SymInt cols = round_up(K / Fp8Blockwise::kBlock, 4);
    const bool ok = b_scale.dim() == 3 && b_scale.sym_size(0)
                                              .sym_eq(G)
                                              .sym_and(b_scale.sym_size(1).sym_eq(rows))
                                              .sym_and(b_scale.sym_size(2).sym_eq(cols))
                                              .expect_true(__FILE__, __LINE__);
    TORCH_CHECK_VALUE(ok && b_scale.is_contiguous(), op, ": b_scale must be contiguous of shape [",
                      G, ", ", rows, ", ", cols,
                      "] (quantize_weight's s_row, or s_col for dgrad), got shape ",
                      b_scale.sym_sizes(), " strides ", b_scale.sym_strides());
  } else {
    check_factors("a_scale", a_scale, N, M);
    check_factors("b_scale", b_scale, K, M);
  }
  Tensor out = m_grouped ? empty_output(a, {M, N}, at::kBFloat16)
                         : empty_output(a, {G, N, K}, at::kBFloat16);
  if (kMeta) return out;

  GroupedGemmParams p;
  p.grouping = grouping;
  p.a = static_cast<const uint8_t*>(a.const_data_ptr());
  p.a_scale = a_scale.const_data_ptr<float>();
  p.b = static_cast<const uint8_t*>(b.const_data_ptr());
  p.b_scale = b_scale.const_data_ptr<float>();
  p.offs = offs_ptr(offs);
  p.num_groups = offs.size(0);
  p.M = M.expect_int();
  p.N = N.expect_int();
  p.K = K.expect_int();
  p.out = out.data_ptr();
  const DeviceGuard guard(a);
  p.stream = current_stream(a);
  call_core(op, [&] {
    if (!a.is_cuda()) return ref::grouped_gemm(p);
    const int64_t bytes = grouped_gemm_workspace_bytes(p.grouping, p.M, p.N, p.K, p.num_groups);
    const Tensor workspace = empty_output(a, {SymInt(bytes)}, at::kByte);
    p.workspace = workspace.data_ptr();
    mxq::grouped_gemm(p);
  });
  return out;
}

// ---- combine, combine_score_grad: the routed rows back to their tokens (docs/numerics.md §14) ----
//
// y (Mp, D) bf16 contiguous, the experts' output over the padded rows; dest (N,) int32, the padded
// row of each routed row (quantize_routed's); token_rows (T, top_k) int32 contiguous, each token's
// routed rows (N = T·top_k); all on y's device. combine: scale (N,) fp32 or None, returns (T, D)
// bf16; combine_score_grad: dout (T, D) bf16 contiguous, returns (T, top_k) fp32. The CPU dispatch
// (the reference) raises ValueError for a routed row or dest out of range; CUDA checks them on the
// device without a report (no status word, as for quantize_routed): such a row contributes 0.

void check_combine_args(const char* op, const Tensor& y, const Tensor& dest,
                        const Tensor& token_rows) {
  TORCH_CHECK_TYPE(y.scalar_type() == at::kBFloat16, op, ": y must be torch.bfloat16, got ",
                   torch_dtype(y.scalar_type()));
  TORCH_CHECK_VALUE(y.dim() == 2 && y.is_contiguous(), op,
                    ": y must be a contiguous 2-D tensor (Mp, D), got shape ", y.sym_sizes(),
                    " strides ", y.sym_strides());
  check_route_tensor(op, "dest", dest, y, {at::kInt}, "torch.int32");
  TORCH_CHECK_TYPE(token_rows.scalar_type() == at::kInt, op,
                   ": token_rows must be torch.int32, got ", torch_dtype(token_rows.scalar_type()));
  TORCH_CHECK_VALUE(token_rows.dim() == 2 && token_rows.is_contiguous(), op,
                    ": token_rows must be a contiguous 2-D tensor (T, top_k), got shape ",
                    token_rows.sym_sizes(), " strides ", token_rows.sym_strides());
  TORCH_CHECK_VALUE(token_rows.device() == y.device(), op, ": token_rows must be on y's device (",
                    y.device(), "), got ", token_rows.device());
  const SymInt N = token_rows.sym_size(0) * token_rows.sym_size(1);
  TORCH_CHECK_VALUE(dest.sym_size(0).sym_eq(N).expect_true(__FILE__, __LINE__), op,
                    ": dest must have one entry per routed row (T*top_k = ", N, "), got shape ",
                    dest.sym_sizes());
  const std::optional<int64_t> D = y.sym_size(1).maybe_as_int();
  TORCH_CHECK_VALUE(!D || *D % 8 == 0, op, ": y's width D must be a multiple of 8, got ", *D);
  const std::optional<int64_t> k = token_rows.sym_size(1).maybe_as_int();
  TORCH_CHECK_VALUE(!k || (*k >= 1 && *k <= kMaxTopK), op,
                    ": top_k (token_rows.shape[1]) must be in [1, ", kMaxTopK, "], got ", *k);
}

// The sizes and pointers both ops share (a real call: no symbolic sizes left).
CombineParams combine_params(const Tensor& y, const Tensor& dest, const Tensor& token_rows) {
  CombineParams p;
  p.y = y.const_data_ptr();
  p.Mp = y.size(0);
  p.D = y.size(1);
  p.dest = dest.const_data_ptr<int32_t>();
  p.N = dest.size(0);
  p.token_rows = token_rows.const_data_ptr<int32_t>();
  p.T = token_rows.size(0);
  p.top_k = token_rows.size(1);
  p.stream = current_stream(y);
  return p;
}

template <bool kMeta>
Tensor combine(const Tensor& y, const Tensor& dest, const Tensor& token_rows,
               const OptTensor& scale) {
  constexpr const char* op = "mxq.combine";
  check_combine_args(op, y, dest, token_rows);
  if (scale.has_value()) check_route_tensor(op, "scale", *scale, y, {at::kFloat}, "torch.float32");
  TORCH_CHECK_VALUE(!scale.has_value() ||
                        scale->sym_size(0).sym_eq(dest.sym_size(0)).expect_true(__FILE__, __LINE__),
                    op, ": scale must have one entry per routed row (", dest.sym_size(0),
                    ",), got shape ", scale.has_value() ? scale->sym_sizes() : y.sym_sizes());
  Tensor out = empty_output(y, {token_rows.sym_size(0), y.sym_size(1)}, at::kBFloat16);
  if (kMeta) return out;
  const DeviceGuard guard(y);
  CombineParams p = combine_params(y, dest, token_rows);
  p.scale = scale.has_value() ? scale->const_data_ptr<float>() : nullptr;
  p.out = out.data_ptr();
  call_core(op, [&] { y.is_cuda() ? mxq::combine(p) : ref::combine(p); });
  return out;
}

template <bool kMeta>
Tensor combine_score_grad(const Tensor& dout, const Tensor& y, const Tensor& dest,
                          const Tensor& token_rows) {
  constexpr const char* op = "mxq.combine_score_grad";
  check_combine_args(op, y, dest, token_rows);
  TORCH_CHECK_TYPE(dout.scalar_type() == at::kBFloat16, op, ": dout must be torch.bfloat16, got ",
                   torch_dtype(dout.scalar_type()));
  TORCH_CHECK_VALUE(dout.device() == y.device(), op, ": dout must be on y's device (", y.device(),
                    "), got ", dout.device());
  const bool shape_ok = dout.dim() == 2 && dout.sym_size(0)
                                               .sym_eq(token_rows.sym_size(0))
                                               .sym_and(dout.sym_size(1).sym_eq(y.sym_size(1)))
                                               .expect_true(__FILE__, __LINE__);
  TORCH_CHECK_VALUE(shape_ok && dout.is_contiguous(), op,
                    ": dout must be contiguous of shape [T, D] = [", token_rows.sym_size(0), ", ",
                    y.sym_size(1), "], got shape ", dout.sym_sizes(), " strides ",
                    dout.sym_strides());
  Tensor out = empty_output(y, {token_rows.sym_size(0), token_rows.sym_size(1)}, at::kFloat);
  if (kMeta) return out;
  const DeviceGuard guard(y);
  CombineParams p = combine_params(y, dest, token_rows);
  p.dout = dout.const_data_ptr();
  p.out = out.data_ptr();
  call_core(op, [&] { y.is_cuda() ? mxq::combine_score_grad(p) : ref::combine_score_grad(p); });
  return out;
}

}  // namespace
}  // namespace mxq::torch_ext

// NOTES: needs_fixed_stride_order on every op: q_col's strides (1, M) are not the default ones, and
// every op requires contiguous inputs, so inductor must hand them over with the strides eager mode
// sees.
// `format` comes last in every schema, with the default "mxfp8": calls written before FP8
// blockwise, positional or by name, keep their meaning.
#define MXQ_QUANT_X                                                                  \
  "Tensor x, int block_size=32, str scaling_mode=\"rceil\", Tensor? offs=None, str " \
  "format=\"mxfp8\""
#define MXQ_QUANT_ARGS "(" MXQ_QUANT_X ")"
#define MXQ_QUANT_ARGS_OUT                                                        \
  "(" MXQ_QUANT_X                                                                 \
  ", *, Tensor(a!)? q_row=None, Tensor(b!)? s_row=None, Tensor(c!)? q_col=None, " \
  "Tensor(d!)? s_col=None)"
TORCH_LIBRARY(mxq, m) {
  const std::vector<at::Tag> tags{at::Tag::needs_fixed_stride_order, at::Tag::pt2_compliant_tag};
  m.def("quantize" MXQ_QUANT_ARGS " -> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col)",
        tags);
  m.def("quantize.out" MXQ_QUANT_ARGS_OUT " -> ()", tags);
  m.def("quantize_composed" MXQ_QUANT_ARGS
        " -> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col)",
        tags);
  m.def("quantize_rowwise" MXQ_QUANT_ARGS " -> (Tensor q_row, Tensor s_row)", tags);
  m.def("quantize_colwise" MXQ_QUANT_ARGS " -> (Tensor q_col, Tensor s_col)", tags);
  m.def(
      "dequantize(Tensor q, Tensor scales, Tensor? offs=None, str layout=\"blocked\", "
      "str format=\"mxfp8\") -> Tensor",
      tags);
  m.def("validate_offs(Tensor offs, int M, str format=\"mxfp8\") -> ()");
  m.def(
      "quantize_weight(Tensor w, str scaling_mode=\"rceil\", str weight_scaling=\"32x32\", "
      "bool rowwise=True, bool colwise=True, str format=\"mxfp8\") "
      "-> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col)",
      tags);
  m.def(
      "quantize_routed(Tensor x, Tensor index, Tensor counts, Tensor? scale=None, "
      "str scaling_mode=\"rceil\", bool rowwise=True, bool colwise=True, "
      "str format=\"mxfp8\") "
      "-> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col, Tensor offs_p, Tensor dest)",
      tags);
  m.def(
      "grouped_mm_fp8_blockwise(Tensor a, Tensor a_scale, Tensor b, Tensor b_scale, Tensor offs, "
      "str grouping=\"m_grouped\") -> Tensor",
      tags);
  m.def("combine(Tensor y, Tensor dest, Tensor token_rows, Tensor? scale=None) -> Tensor", tags);
  m.def("combine_score_grad(Tensor dout, Tensor y, Tensor dest, Tensor token_rows) -> Tensor",
        tags);
}
#undef MXQ_QUANT_ARGS_OUT
#undef MXQ_QUANT_ARGS
#undef MXQ_QUANT_X

// One impl per op: CPU and CUDA share an instance (it tells the devices apart), Meta has its own.
#define MXQ_REGISTER_IMPLS(m, meta)                                                    \
  m.impl("quantize", &mxq::torch_ext::quantize<meta>);                                 \
  m.impl("quantize.out", &mxq::torch_ext::quantize_out<meta>);                         \
  m.impl("quantize_composed", &mxq::torch_ext::quantize_composed<meta>);               \
  m.impl("quantize_rowwise", &mxq::torch_ext::quantize_rowwise<meta>);                 \
  m.impl("quantize_colwise", &mxq::torch_ext::quantize_colwise<meta>);                 \
  m.impl("dequantize", &mxq::torch_ext::dequantize<meta>);                             \
  m.impl("quantize_weight", &mxq::torch_ext::quantize_weight<meta>);                   \
  m.impl("quantize_routed", &mxq::torch_ext::quantize_routed<meta>);                   \
  m.impl("grouped_mm_fp8_blockwise", &mxq::torch_ext::grouped_mm_fp8_blockwise<meta>); \
  m.impl("combine", &mxq::torch_ext::combine<meta>);                                   \
  m.impl("combine_score_grad", &mxq::torch_ext::combine_score_grad<meta>)

TORCH_LIBRARY_IMPL(mxq, CPU, m) {
  MXQ_REGISTER_IMPLS(m, false);
  m.impl("validate_offs", &mxq::torch_ext::validate_offs);
}
TORCH_LIBRARY_IMPL(mxq, Meta, m) { MXQ_REGISTER_IMPLS(m, true); }
#ifdef MXQ_TORCH_WITH_CUDA
TORCH_LIBRARY_IMPL(mxq, CUDA, m) {
  MXQ_REGISTER_IMPLS(m, false);
  m.impl("validate_offs", &mxq::torch_ext::validate_offs);
}
#endif
#undef MXQ_REGISTER_IMPLS
