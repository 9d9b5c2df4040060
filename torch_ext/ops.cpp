// mxq as PyTorch ops: the TORCH_LIBRARY(mxq) schemas and their CPU, CUDA and Meta impls. The only
// file of the project with torch headers; it adapts tensors to the C++ API (include/mxq/mxq.h) and
// computes nothing itself.
//
//   quantize_1x32(x)                -> (q_row, s_row)                rowwise kernel
//   quantize_32x1(x)                -> (q_col, s_col)                colwise kernel + swizzle
//   quantize_1x32_32x1(x)           -> (q_row, s_row, q_col, s_col)  fused kernel (quantize_dual)
//   quantize_1x32_32x1_composed(x)  -> (q_row, s_row, q_col, s_col)  rowwise + colwise + swizzle
//   dequantize(q, scales, offs)     -> bf16 (rows, cols)             e4m3 + blocked scales
// Every quantize op takes (Tensor x, int block_size=32, str scaling_mode="rceil",
// Tensor? offs=None).
//
// Outputs (SPEC §5-§6), x bf16 (M, K) contiguous:
//   q_row  float8_e4m3fn   (M, K), contiguous
//   s_row  float8_e8m0fnu  s_row_shape(M, K): blocked (M-groups with offs: the same bytes for
//                          128-multiple groups)
//   q_col  float8_e4m3fn   logical (M, K), strides (1, M): the row-major (K, M) array the kernels
//                          write (row k = column k of x); q_col.t() is that array, contiguous
//   s_col  float8_e8m0fnu  s_col_shape(M, K, G): blocked, or the K-groups layout with offs
// quantize_32x1 returns the blocked s_col (what a block-scaled GEMM reads), not the plain S_col: it
// runs the colwise kernel into an at::empty workspace, then the swizzle (the composed path's
// colwise half). One op rather than a layout flag: every consumer of colwise data wants it blocked.
//
// Dispatch: CUDA impls take a device guard and the current stream, allocate with at::empty (CUDA-
// graph capturable) and never synchronize; grouped kernels get status = nullptr, so a malformed
// offs is clamped on the device without a report (mxq.validate_offs is the synchronizing checker).
// CPU impls run the bit-exact reference mxq::ref::*, so op(x.cpu()) is the oracle for op(x.cuda());
// the reference checks offs on the host and raises. Meta impls compute shapes, dtypes and strides
// from SymInts (torch.compile with dynamic shapes); one allocation helper per output serves all
// three dispatch keys, so they cannot disagree.
//
// Errors: wrong dtypes raise TypeError, bad values ValueError, wrong devices and everything the
// core reports (mxq::Error, rethrown with its text) RuntimeError. Every message starts with the op
// and names the argument.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "mxq/mxq.h"

#ifdef MXQ_TORCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace mxq::torch_ext {
namespace {

using at::Tensor;
using c10::SymInt;
using OptTensor = std::optional<Tensor>;
using Quant2 = std::tuple<Tensor, Tensor>;
using Quant4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;

// A check that also holds for symbolic sizes (Meta under torch.compile): a condition on SymInts
// becomes a runtime assertion there instead of a specialization.
#define MXQ_SYM_CHECK_VALUE(cond, ...) \
  TORCH_CHECK_VALUE((cond).expect_true(__FILE__, __LINE__), __VA_ARGS__)

// Runs a call into the C++ core and rethrows its mxq::Error as a torch error with the same text.
template <typename F>
void call_core(const char* op, F&& f) {
  try {
    f();
  } catch (const mxq::Error& e) {
    TORCH_CHECK(false, op, ": ", e.what());
  }
}

// ---- argument checks shared by every dispatch key ----

struct QuantArgs {
  ScaleRounding rounding;
  SymInt M, K, G;  // G = 0 without offs
};

QuantArgs check_quant_args(const char* op, const Tensor& x, int64_t block_size,
                           c10::string_view scaling_mode, const OptTensor& offs) {
  TORCH_CHECK_TYPE(x.scalar_type() == at::kBFloat16, op, ": x must be bfloat16, got ",
                   x.scalar_type());
  TORCH_CHECK_VALUE(x.dim() == 2, op, ": x must be 2-D (M, K), got a ", x.dim(),
                    "-D tensor of shape ", x.sym_sizes());
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": x must be contiguous (row-major), got strides ",
                    x.sym_strides(), " for shape ", x.sym_sizes());
  TORCH_CHECK_VALUE(block_size == kBlock, op, ": block_size must be ", kBlock, ", got ",
                    block_size);
  QuantArgs a{ScaleRounding::kRceil, x.sym_size(0), x.sym_size(1), SymInt(0)};
  try {
    a.rounding = parse_scale_rounding(std::string(scaling_mode));
  } catch (const mxq::Error&) {
    TORCH_CHECK_VALUE(false, op, ": scaling_mode must be \"rceil\" or \"floor\", got \"",
                      scaling_mode, "\"");
  }
  if (offs.has_value()) {
    const Tensor& o = *offs;
    TORCH_CHECK_TYPE(o.scalar_type() == at::kInt, op, ": offs must be int32, got ",
                     o.scalar_type());
    TORCH_CHECK_VALUE(o.dim() == 1, op, ": offs must be 1-D (G,), got a ", o.dim(),
                      "-D tensor of shape ", o.sym_sizes());
    TORCH_CHECK_VALUE(o.is_contiguous(), op, ": offs must be contiguous, got strides ",
                      o.sym_strides());
    a.G = o.sym_size(0);
    MXQ_SYM_CHECK_VALUE(a.G.sym_ge(1), op,
                        ": offs must hold at least one group end offset, got G=", a.G);
    MXQ_SYM_CHECK_VALUE(a.G.sym_le(kMaxGroups), op, ": offs must hold at most ", kMaxGroups,
                        " groups, got G=", a.G);
  }
  return a;
}

struct DequantArgs {
  SymInt rows, cols, G;
};

DequantArgs check_dequant_args(const char* op, const Tensor& q, const Tensor& scales,
                               const OptTensor& offs) {
  TORCH_CHECK_TYPE(q.scalar_type() == at::kFloat8_e4m3fn, op, ": q must be float8_e4m3fn, got ",
                   q.scalar_type());
  TORCH_CHECK_VALUE(q.dim() == 2, op, ": q must be 2-D (rows, cols), got a ", q.dim(),
                    "-D tensor of shape ", q.sym_sizes());
  TORCH_CHECK_VALUE(q.is_contiguous(), op, ": q must be contiguous (rows, cols), got strides ",
                    q.sym_strides(), " for shape ", q.sym_sizes(),
                    "; for colwise data pass q_col.t(), the (K, M) array");
  TORCH_CHECK_TYPE(scales.scalar_type() == at::kFloat8_e8m0fnu, op,
                   ": scales must be float8_e8m0fnu, got ", scales.scalar_type());
  TORCH_CHECK_VALUE(scales.dim() == 2 && scales.is_contiguous(), op,
                    ": scales must be a contiguous 2-D tensor, got shape ", scales.sym_sizes(),
                    " strides ", scales.sym_strides());
  DequantArgs a{q.sym_size(0), q.sym_size(1), SymInt(0)};
  MXQ_SYM_CHECK_VALUE((a.cols % kBlock).sym_eq(0), op, ": q.size(1) (cols) must be a multiple of ",
                      kBlock, ", got ", a.cols);
  if (offs.has_value()) {
    const Tensor& o = *offs;
    TORCH_CHECK_TYPE(o.scalar_type() == at::kInt, op, ": offs must be int32, got ",
                     o.scalar_type());
    TORCH_CHECK_VALUE(o.dim() == 1 && o.is_contiguous(), op,
                      ": offs must be a contiguous 1-D tensor (G,), got shape ", o.sym_sizes());
    a.G = o.sym_size(0);
    MXQ_SYM_CHECK_VALUE(a.G.sym_ge(1), op,
                        ": offs must hold at least one group end offset, got G=", a.G);
    MXQ_SYM_CHECK_VALUE(a.G.sym_le(kMaxGroups), op, ": offs must hold at most ", kMaxGroups,
                        " groups, got G=", a.G);
  }
  // Blocked scales of the (rows, cols/32) matrix, or the K-groups allocation (cols are tokens).
  const SymInt want_rows = (a.rows + (kAtomRows - 1)) / kAtomRows * kAtomRows;
  const SymInt want_cols = offs.has_value()
                               ? a.cols / kBlock + kAtomCols * a.G
                               : (a.cols / kBlock + (kAtomCols - 1)) / kAtomCols * kAtomCols;
  MXQ_SYM_CHECK_VALUE(
      scales.sym_size(0).sym_eq(want_rows).sym_and(scales.sym_size(1).sym_eq(want_cols)), op,
      ": scales must have shape [", want_rows, ", ", want_cols, "] for q of shape ", q.sym_sizes(),
      offs.has_value() ? " (K-groups layout)" : " (blocked layout)", ", got ", scales.sym_sizes());
  return a;
}

// ---- output allocation: one helper per output, used by every dispatch key ----

SymInt round_up(const SymInt& v, int64_t m) { return (v + (m - 1)) / m * m; }

at::TensorOptions fp8_options(const Tensor& x, at::ScalarType t) { return x.options().dtype(t); }

Tensor alloc_q_row(const Tensor& x, const QuantArgs& a) {
  return at::empty_symint({a.M, a.K}, fp8_options(x, at::kFloat8_e4m3fn));
}
Tensor alloc_s_row(const Tensor& x, const QuantArgs& a) {
  return at::empty_symint({round_up(a.M, kAtomRows), round_up(a.K / kBlock, kAtomCols)},
                          fp8_options(x, at::kFloat8_e8m0fnu));
}
// Logical (M, K) over the physical row-major (K, M) array: strides (1, M) for every M, zero
// included.
Tensor alloc_q_col(const Tensor& x, const QuantArgs& a) {
  return at::empty_strided_symint({a.M, a.K}, {SymInt(1), a.M}, fp8_options(x, at::kFloat8_e4m3fn));
}
Tensor alloc_s_col(const Tensor& x, const QuantArgs& a, bool grouped) {
  const SymInt cols = grouped ? a.M / kBlock + kAtomCols * a.G : round_up(a.M / kBlock, kAtomCols);
  return at::empty_symint({round_up(a.K, kAtomRows), cols}, fp8_options(x, at::kFloat8_e8m0fnu));
}

// The real impls size their buffers with the core's own helpers too: the SymInt formulas above must
// agree.
void assert_sizes(const Tensor& t, Shape2d want, const char* name) {
  TORCH_INTERNAL_ASSERT(t.size(0) == want.rows && t.size(1) == want.cols, "mxq: ", name,
                        " allocated as ", t.sizes(), " but the core expects [", want.rows, ", ",
                        want.cols, "]");
}

uint8_t* bytes(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }
const int32_t* offs_ptr(const OptTensor& offs) {
  return offs.has_value() ? offs->const_data_ptr<int32_t>() : nullptr;
}

// The four outputs of a dual op, plus the concrete sizes the core takes.
struct Outputs {
  Tensor q_row, s_row, q_col, s_col;
  int64_t M = 0, K = 0, G = 0;
};

Outputs alloc_outputs(const Tensor& x, const QuantArgs& a, bool grouped, bool row, bool col) {
  Outputs o;
  o.M = x.size(0);
  o.K = x.size(1);
  o.G = grouped ? a.G.expect_int() : 0;
  if (row) {
    o.q_row = alloc_q_row(x, a);
    o.s_row = alloc_s_row(x, a);
    assert_sizes(o.s_row, s_row_shape(o.M, o.K), "s_row");
  }
  if (col) {
    o.q_col = alloc_q_col(x, a);
    o.s_col = alloc_s_col(x, a, grouped);
    assert_sizes(o.s_col, s_col_shape(o.M, o.K, o.G), "s_col");
  }
  return o;
}

// ---- the device each dispatch key expects ----

void check_cpu(const char* op, const Tensor& x, const OptTensor& offs, const char* x_name = "x") {
  TORCH_CHECK(x.is_cpu(), op, ": ", x_name, " must be a CPU tensor on this path, got ", x.device());
  if (offs.has_value()) {
    TORCH_CHECK(offs->is_cpu(), op, ": offs must be on the same device as ", x_name, " (cpu), got ",
                offs->device());
  }
}

// The four outputs of a two-axis op as the core's params. No status word: the device check of offs
// stays silent in the op; mxq.validate_offs raises for those who want an exception.
DualParams dual_params(const Tensor& x, const QuantArgs& a, const OptTensor& offs, const Outputs& o,
                       cudaStream_t stream) {
  DualParams p;
  p.x = x.const_data_ptr();
  p.M = o.M;
  p.K = o.K;
  p.rounding = a.rounding;
  p.offs = offs_ptr(offs);
  p.num_groups = o.G;
  p.q_row = bytes(o.q_row);
  p.s_row = bytes(o.s_row);
  p.q_col = bytes(o.q_col);
  p.s_col = bytes(o.s_col);
  p.stream = stream;
  return p;
}

// How a two-axis op runs: one fused pass, or the rowwise, colwise and swizzle steps.
enum class Dual { kNone, kFused, kComposed };

// ---- CPU: the bit-exact reference ----

// The composed op's CPU impl composes the reference's rowwise, colwise and swizzle steps, while the
// fused op's runs ref::quantize_dual, which places colwise scales directly: composed == fused on
// the CPU is then a cross-check of the reference's own placement.
Outputs run_cpu(const char* op, const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                const OptTensor& offs, bool row, bool col, Dual dual) {
  const QuantArgs a = check_quant_args(op, x, block_size, scaling_mode, offs);
  check_cpu(op, x, offs);
  Outputs o = alloc_outputs(x, a, offs.has_value(), row, col);
  call_core(op, [&] {
    if (dual == Dual::kFused) {
      ref::quantize_dual(dual_params(x, a, offs, o, nullptr));
      return;
    }
    if (row) {
      ref::quantize_rowwise(
          {x.const_data_ptr(), o.M, o.K, a.rounding, bytes(o.q_row), bytes(o.s_row), nullptr});
    }
    if (col) {
      Tensor plain = at::empty({composed_workspace_bytes(o.M, o.K)}, x.options().dtype(at::kByte));
      ref::quantize_colwise(
          {x.const_data_ptr(), o.M, o.K, a.rounding, bytes(o.q_col), bytes(plain), nullptr});
      ref::swizzle_col_scales({bytes(plain), o.M, o.K, offs_ptr(offs), o.G, bytes(o.s_col),
                               /*status=*/nullptr, nullptr});
    }
  });
  return o;
}

DequantizeParams dequant_params(const Tensor& q, const Tensor& scales, const OptTensor& offs,
                                const Tensor& out) {
  DequantizeParams p;
  p.q = static_cast<const uint8_t*>(q.const_data_ptr());
  p.scales = static_cast<const uint8_t*>(scales.const_data_ptr());
  p.rows = q.size(0);
  p.cols = q.size(1);
  p.offs = offs_ptr(offs);
  p.num_groups = offs.has_value() ? offs->size(0) : 0;
  p.out = out.data_ptr();
  return p;
}

Tensor dequantize_cpu(const Tensor& q, const Tensor& scales, const OptTensor& offs) {
  constexpr const char* op = "mxq::dequantize";
  const DequantArgs a = check_dequant_args(op, q, scales, offs);
  check_cpu(op, q, offs, "q");
  TORCH_CHECK(scales.is_cpu(), op, ": scales must be on the same device as q (cpu), got ",
              scales.device());
  Tensor out = at::empty_symint({a.rows, a.cols}, q.options().dtype(at::kBFloat16));
  call_core(op, [&] { ref::dequantize(dequant_params(q, scales, offs, out)); });
  return out;
}

// ---- Meta: shapes, dtypes and strides only ----

Quant2 quantize_1x32_meta(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                          const OptTensor& offs) {
  const QuantArgs a = check_quant_args("mxq::quantize_1x32", x, block_size, scaling_mode, offs);
  return {alloc_q_row(x, a), alloc_s_row(x, a)};
}

Quant2 quantize_32x1_meta(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                          const OptTensor& offs) {
  const QuantArgs a = check_quant_args("mxq::quantize_32x1", x, block_size, scaling_mode, offs);
  return {alloc_q_col(x, a), alloc_s_col(x, a, offs.has_value())};
}

Quant4 dual_meta(const char* op, const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                 const OptTensor& offs) {
  const QuantArgs a = check_quant_args(op, x, block_size, scaling_mode, offs);
  return {alloc_q_row(x, a), alloc_s_row(x, a), alloc_q_col(x, a),
          alloc_s_col(x, a, offs.has_value())};
}

Quant4 quantize_1x32_32x1_meta(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                               const OptTensor& offs) {
  return dual_meta("mxq::quantize_1x32_32x1", x, block_size, scaling_mode, offs);
}

Quant4 quantize_1x32_32x1_composed_meta(const Tensor& x, int64_t block_size,
                                        c10::string_view scaling_mode, const OptTensor& offs) {
  return dual_meta("mxq::quantize_1x32_32x1_composed", x, block_size, scaling_mode, offs);
}

Tensor dequantize_meta(const Tensor& q, const Tensor& scales, const OptTensor& offs) {
  const DequantArgs a = check_dequant_args("mxq::dequantize", q, scales, offs);
  return at::empty_symint({a.rows, a.cols}, q.options().dtype(at::kBFloat16));
}

// ---- CUDA: device guard, current stream, the GPU entry points ----

#ifdef MXQ_TORCH_WITH_CUDA

void check_cuda(const char* op, const Tensor& x, const OptTensor& offs, const char* x_name = "x") {
  TORCH_CHECK(x.is_cuda(), op, ": ", x_name, " must be a CUDA tensor on this path, got ",
              x.device());
  if (offs.has_value()) {
    TORCH_CHECK(offs->device() == x.device(), op, ": offs must be on the same device as ", x_name,
                " (", x.device(), "), got ", offs->device());
  }
}

Outputs run_cuda(const char* op, const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                 const OptTensor& offs, bool row, bool col, Dual dual) {
  const QuantArgs a = check_quant_args(op, x, block_size, scaling_mode, offs);
  check_cuda(op, x, offs);
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  Outputs o = alloc_outputs(x, a, offs.has_value(), row, col);
  call_core(op, [&] {
    if (row && col) {
      const DualParams p = dual_params(x, a, offs, o, stream);
      if (dual == Dual::kFused) {
        mxq::quantize_dual(p);
      } else {
        // Stream-ordered workspace from the caching allocator (graph-capturable); freed after
        // enqueueing, which is safe because every later use of the block is ordered after this
        // stream's work.
        Tensor ws = at::empty({composed_workspace_bytes(o.M, o.K)}, x.options().dtype(at::kByte));
        mxq::quantize_dual_composed(p, ws.data_ptr());
      }
    } else if (row) {
      mxq::quantize_rowwise(
          {x.const_data_ptr(), o.M, o.K, a.rounding, bytes(o.q_row), bytes(o.s_row), stream});
    } else {
      Tensor plain = at::empty({composed_workspace_bytes(o.M, o.K)}, x.options().dtype(at::kByte));
      mxq::quantize_colwise(
          {x.const_data_ptr(), o.M, o.K, a.rounding, bytes(o.q_col), bytes(plain), stream});
      mxq::swizzle_col_scales(
          {bytes(plain), o.M, o.K, offs_ptr(offs), o.G, bytes(o.s_col), nullptr, stream});
    }
  });
  return o;
}

Tensor dequantize_cuda(const Tensor& q, const Tensor& scales, const OptTensor& offs) {
  constexpr const char* op = "mxq::dequantize";
  const DequantArgs a = check_dequant_args(op, q, scales, offs);
  check_cuda(op, q, offs, "q");
  TORCH_CHECK(scales.device() == q.device(), op, ": scales must be on the same device as q (",
              q.device(), "), got ", scales.device());
  const c10::cuda::CUDAGuard guard(q.device());
  Tensor out = at::empty_symint({a.rows, a.cols}, q.options().dtype(at::kBFloat16));
  DequantizeParams p = dequant_params(q, scales, offs, out);
  p.stream = at::cuda::getCurrentCUDAStream().stream();
  call_core(op, [&] { mxq::dequantize(p); });
  return out;
}

#endif  // MXQ_TORCH_WITH_CUDA

// ---- the four quantize ops, one shim each over a runner (run_cpu or run_cuda) ----

using Runner = Outputs (*)(const char*, const Tensor&, int64_t, c10::string_view, const OptTensor&,
                           bool, bool, Dual);

template <Runner kRun>
Quant2 quantize_1x32(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                     const OptTensor& offs) {
  Outputs o =
      kRun("mxq::quantize_1x32", x, block_size, scaling_mode, offs, true, false, Dual::kNone);
  return {o.q_row, o.s_row};
}

template <Runner kRun>
Quant2 quantize_32x1(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                     const OptTensor& offs) {
  Outputs o =
      kRun("mxq::quantize_32x1", x, block_size, scaling_mode, offs, false, true, Dual::kNone);
  return {o.q_col, o.s_col};
}

template <Runner kRun>
Quant4 quantize_1x32_32x1(const Tensor& x, int64_t block_size, c10::string_view scaling_mode,
                          const OptTensor& offs) {
  Outputs o =
      kRun("mxq::quantize_1x32_32x1", x, block_size, scaling_mode, offs, true, true, Dual::kFused);
  return {o.q_row, o.s_row, o.q_col, o.s_col};
}

template <Runner kRun>
Quant4 quantize_1x32_32x1_composed(const Tensor& x, int64_t block_size,
                                   c10::string_view scaling_mode, const OptTensor& offs) {
  Outputs o = kRun("mxq::quantize_1x32_32x1_composed", x, block_size, scaling_mode, offs, true,
                   true, Dual::kComposed);
  return {o.q_row, o.s_row, o.q_col, o.s_col};
}

}  // namespace
}  // namespace mxq::torch_ext

// NOTES: needs_fixed_stride_order on every op: q_col's strides (1, M) are not the default ones, and
// every op requires contiguous inputs, so inductor must hand them over with the strides eager mode
// sees.
#define MXQ_QUANT_ARGS \
  "(Tensor x, int block_size=32, str scaling_mode=\"rceil\", Tensor? offs=None)"
TORCH_LIBRARY(mxq, m) {
  const std::vector<at::Tag> tags{at::Tag::needs_fixed_stride_order, at::Tag::pt2_compliant_tag};
  m.def("quantize_1x32" MXQ_QUANT_ARGS " -> (Tensor q_row, Tensor s_row)", tags);
  m.def("quantize_32x1" MXQ_QUANT_ARGS " -> (Tensor q_col, Tensor s_col)", tags);
  m.def("quantize_1x32_32x1" MXQ_QUANT_ARGS
        " -> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col)",
        tags);
  m.def("quantize_1x32_32x1_composed" MXQ_QUANT_ARGS
        " -> (Tensor q_row, Tensor s_row, Tensor q_col, Tensor s_col)",
        tags);
  m.def("dequantize(Tensor q, Tensor scales, Tensor? offs=None) -> Tensor", tags);
}
#undef MXQ_QUANT_ARGS

TORCH_LIBRARY_IMPL(mxq, CPU, m) {
  using namespace mxq::torch_ext;
  m.impl("quantize_1x32", &quantize_1x32<run_cpu>);
  m.impl("quantize_32x1", &quantize_32x1<run_cpu>);
  m.impl("quantize_1x32_32x1", &quantize_1x32_32x1<run_cpu>);
  m.impl("quantize_1x32_32x1_composed", &quantize_1x32_32x1_composed<run_cpu>);
  m.impl("dequantize", &dequantize_cpu);
}

TORCH_LIBRARY_IMPL(mxq, Meta, m) {
  using namespace mxq::torch_ext;
  m.impl("quantize_1x32", &quantize_1x32_meta);
  m.impl("quantize_32x1", &quantize_32x1_meta);
  m.impl("quantize_1x32_32x1", &quantize_1x32_32x1_meta);
  m.impl("quantize_1x32_32x1_composed", &quantize_1x32_32x1_composed_meta);
  m.impl("dequantize", &dequantize_meta);
}

#ifdef MXQ_TORCH_WITH_CUDA
TORCH_LIBRARY_IMPL(mxq, CUDA, m) {
  using namespace mxq::torch_ext;
  m.impl("quantize_1x32", &quantize_1x32<run_cuda>);
  m.impl("quantize_32x1", &quantize_32x1<run_cuda>);
  m.impl("quantize_1x32_32x1", &quantize_1x32_32x1<run_cuda>);
  m.impl("quantize_1x32_32x1_composed", &quantize_1x32_32x1_composed<run_cuda>);
  m.impl("dequantize", &dequantize_cuda);
}
#endif
