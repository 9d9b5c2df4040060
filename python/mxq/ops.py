"""Typed wrappers over torch.ops.mxq (registered by the extension that ``import mxq`` loads).

Two block formats, chosen by every entry point's ``format`` argument: ``"mxfp8"`` (the default: 32-element blocks,
E8M0 scale bytes in the blocked layout) and ``"fp8_blockwise"`` (Hopper's native recipe: 128-element blocks, one
fp32 dequantization factor d per block, x ≈ q · d; docs/numerics.md §13). Each format has its default scale rule
(``scaling_mode=None``): "rceil" for MXFP8 (or "floor"), "fp32" for FP8 blockwise (or "rceil", the power-of-two
factor); the ops themselves always receive the rule explicitly.

MXFP8 layouts (docs/numerics.md §5-§6), x bf16, fp16 or fp32 (M, K) contiguous, M and K multiples of 32:

    q_row  float8_e4m3fn  (M, K), row-major
    s_row  float8_e8m0fnu (roundup(M,128), roundup(K/32,4)) blocked S_row, or with offs the M-groups layout of
                          shape (roundup(M,128) + 128G, roundup(K/32,4))
    q_col  float8_e4m3fn  logical (M, K), strides (1, M): q_col.t() is the row-major (K, M) array the kernels
                          write, row k = column k of x quantized in 32x1 blocks
    s_col  float8_e8m0fnu (roundup(K,128), roundup(M/32,4)) blocked S_col, or with offs the K-groups layout of
                          shape (roundup(K,128), M/32 + 4G)

FP8 blockwise layouts, M and K multiples of 128 (grouped: every group end a multiple of 128; the factors are the
dense ones, each group's a slice of them):

    q_row  float8_e4m3fn  (M, K), row-major, 1x128 blocks along K
    s_row  float32        (M, K/128), strides (1, M): factor [m, j] of row m's block j, rows fastest
    q_col  float8_e4m3fn  logical (M, K), strides (1, M), as for MXFP8, in 128x1 blocks along M
    s_col  float32        (K, M/128), strides (1, K): factor [k, i] of column k's block i

These are torch.nn.functional.scaled_mm's BlockWise1x128 operands as they are: ``(q_row, s_row)`` as mat_a of the
forward and of dgrad; for wgrad (dW = dyᵀ x) mat_a = ``dy's q_col.t()`` with ``dy's s_col`` and mat_b = ``x's q_col``
with ``x's s_col.t()``.

Every op runs on the current CUDA stream without synchronizing, allocates with the caching allocator (CUDA-graph
capturable) and works under torch.compile(fullgraph=True). The CPU dispatch of each op is the bit-exact C++
reference. Wrong types and dtypes raise TypeError, bad values and device mixes ValueError, a missing capability or
a CUDA failure RuntimeError (docs/numerics.md §9).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_ops = torch.ops.mxq
# The overloads themselves: calling them skips the packet's overload resolution on every call.
_quantize = _ops.quantize.default
_quantize_out = _ops.quantize.out
_quantize_composed = _ops.quantize_composed.default
_quantize_rowwise = _ops.quantize_rowwise.default
_quantize_colwise = _ops.quantize_colwise.default
_dequantize = _ops.dequantize.default
_quantize_weight = _ops.quantize_weight.default
_quantize_routed = _ops.quantize_routed.default

_KIND_NAMES = {Tensor: "a torch.Tensor", bool: "a bool", str: "a str", int: "an int"}

# The block formats: each one's block (the ops' block_size), default scale rule and weight policy.
FORMATS = ("mxfp8", "fp8_blockwise")
FORMAT_BLOCK = {"mxfp8": 32, "fp8_blockwise": 128}  # elements per block along the quantized axis
# What a None scaling_mode / weight_scaling means per format, in the ops and in MXFP8Config alike.
FORMAT_DEFAULTS = {
    "mxfp8": {"scaling_mode": "rceil", "weight_scaling": "32x32"},
    "fp8_blockwise": {"scaling_mode": "fp32", "weight_scaling": "128x128"},
}


def check_type(op: str, name: str, value, kind: type) -> None:
    """TypeError naming the op and the argument when ``value`` is not a ``kind`` (Tensor, bool, str, int): the ops'
    schemas would otherwise answer with a RuntimeError, and a flag would be read as Python truthiness."""
    if not isinstance(value, kind):
        raise TypeError(f"{op}: {name} must be {_KIND_NAMES[kind]}, got {type(value).__name__}")


def check_types(op: str, *args: tuple[str, object, type]) -> None:
    """check_type of each (name, value, kind) in turn: the first wrong one is reported."""
    for name, value, kind in args:
        check_type(op, name, value, kind)


def check_format(op: str, format) -> None:
    """TypeError for a ``format`` that is not a str, ValueError for one that is not a format's name."""
    if not (isinstance(format, str) and format in FORMAT_BLOCK):
        check_type(op, "format", format, str)
        raise ValueError(f'{op}: format must be "mxfp8" or "fp8_blockwise", got "{format}"')


def _scaling_mode(op: str, scaling_mode, format: str) -> str:
    """``scaling_mode``, or the format's default rule for None; TypeError for anything but a str or None."""
    if scaling_mode is None:
        return FORMAT_DEFAULTS[format]["scaling_mode"]
    check_type(op, "scaling_mode", scaling_mode, str)
    return scaling_mode


class MXTensors(NamedTuple):
    """The outputs of :func:`quantize`; the axes that were not requested are None."""

    q_row: Tensor | None
    s_row: Tensor | None
    q_col: Tensor | None
    s_col: Tensor | None


def quantize(
    x: Tensor,
    *,
    rowwise: bool = True,
    colwise: bool = True,
    scaling_mode: str | None = None,
    offs: Tensor | None = None,
    backend: str = "fused",
    out: MXTensors | None = None,
    format: str = "mxfp8",
) -> MXTensors:
    """Quantizes the bf16, fp16 or fp32 (M, K) tensor ``x`` along K (rowwise) and/or along M (colwise) in the block
    format ``format``: "mxfp8" (1x32 / 32x1 blocks, E8M0 scales) or "fp8_blockwise" (1x128 / 128x1 blocks, fp32
    factors; the layouts are in this module's docstring). ``scaling_mode``: None for the format's default ("rceil"
    for MXFP8, "fp32" for FP8 blockwise), or "floor" (MXFP8) / "rceil" (FP8 blockwise's power-of-two factors).

    ``offs`` (int32, G cumulative end offsets along M, on x's device; group sizes multiples of the block, 32 or
    128) selects grouped (MoE) mode: for MXFP8, s_row then uses the M-groups layout and s_col the K-groups layout;
    FP8 blockwise's outputs are the dense ones (every group's factors a slice of them), checked against offs. On the
    GPU a malformed ``offs`` is clamped on the device without an exception (no host sync); call
    :func:`validate_offs` first if you want one.

    ``backend``: ``"fused"`` (default) is one kernel that reads x once and writes the requested axes;
    ``"composed"`` is the three-kernel baseline it replaces (rowwise kernel, colwise kernel, scale swizzle), kept
    for comparison: it quantizes both axes, so asking it for one axis is an error, not a silent switch. Both give
    identical bytes. CPU tensors run the bit-exact C++ reference for either backend. FP8 blockwise has only
    ``"fused"`` (the composed baseline is MXFP8's: there is no scale swizzle to compose).

    ``out``: write into these tensors instead of allocating (fused backend only), e.g. buffers from
    :func:`empty_quantized` reused across steps (an MXTensors, or a tuple or list of the four); returns them as an
    MXTensors. Each must have the dtype, shape and strides that
    quantize would return, on x's device, overlapping nothing else; the requested axes' pairs are given, the others
    are None. This is the cheapest eager call: no allocation (docs/performance.md, "Eager cost"). Under
    torch.compile the call is traced as the allocating op and copies into ``out`` (inductor plans the buffers; it
    cannot lower a mutable op on float8_e8m0fnu tensors); on CPU tensors, torch 2.11's inductor cannot generate the
    copy into the e8m0 scales either, so compile CPU code with ``backend="aot_eager"`` there. A traced call checks
    each output's dtype, shape, strides and device, but not overlaps: traced tensors have no addresses.

    Raises TypeError for an argument of the wrong type (x or offs not a Tensor, a flag not a bool, a string option
    not a str) or dtype, ValueError for a bad value.
    """
    # One combined test on the eager hot path (~0.1 µs); the named checks run only to report a failure.
    if not (
        isinstance(x, Tensor)
        and isinstance(rowwise, bool)
        and isinstance(colwise, bool)
        and (scaling_mode is None or isinstance(scaling_mode, str))
        and isinstance(backend, str)
        and (offs is None or isinstance(offs, Tensor))
        and isinstance(format, str)
        and format in FORMAT_BLOCK
    ):
        check_types(
            "mxq.quantize",
            ("x", x, Tensor),
            ("rowwise", rowwise, bool),
            ("colwise", colwise, bool),
            ("backend", backend, str),
        )
        if offs is not None:
            check_type("mxq.quantize", "offs", offs, Tensor)
        check_format("mxq.quantize", format)
        _scaling_mode("mxq.quantize", scaling_mode, format)
    if scaling_mode is None:
        scaling_mode = FORMAT_DEFAULTS[format]["scaling_mode"]
    block = FORMAT_BLOCK[format]
    if out is not None:
        if backend != "fused":
            raise ValueError(f'mxq.quantize: out needs backend="fused", got "{backend}"')
        if not isinstance(out, (tuple, list)) or len(out) != 4:
            raise TypeError(
                "mxq.quantize: out must be an MXTensors, or a tuple or list of 4 (q_row, s_row, q_col, s_col), got "
                + type(out).__name__
                + (f" of {len(out)} entries" if isinstance(out, (tuple, list)) else "")
            )
        out = out if isinstance(out, MXTensors) else MXTensors(*out)
        q_row, s_row, q_col, s_col = out
        if (q_row is not None or s_row is not None) != rowwise or (q_col is not None or s_col is not None) != colwise:
            given = [name for name, t in zip(MXTensors._fields, out) if t is not None]
            raise ValueError(
                f"mxq.quantize: out must hold the requested axes' outputs (rowwise={rowwise}, colwise={colwise}) "
                f"and None elsewhere, got {', '.join(given) or 'none'}"
            )
        if not torch.compiler.is_compiling():
            _quantize_out(x, block, scaling_mode, offs, format, q_row=q_row, s_row=s_row, q_col=q_col, s_col=s_col)
            return out
        # Traced: the allocating op, then copies into out (see the docstring).
        traced = quantize(x, rowwise=rowwise, colwise=colwise, scaling_mode=scaling_mode, offs=offs, format=format)
        for name, dst, src in zip(MXTensors._fields, out, traced):
            if dst is not None:
                # The eager op's checks (torch_ext/ops.cpp check_output), on the traced tensors.
                if dst.dtype != src.dtype:
                    raise TypeError(f"mxq.quantize: {name} must be {src.dtype}, got {dst.dtype}")
                if dst.device != x.device:
                    raise ValueError(f"mxq.quantize: {name} must be on x's device ({x.device}), got {dst.device}")
                if (dst.shape, dst.stride()) != (src.shape, src.stride()):
                    raise ValueError(
                        f"mxq.quantize: {name} must have shape {list(src.shape)} and strides {src.stride()}, "
                        f"got shape {list(dst.shape)}, strides {dst.stride()}"
                    )
                dst.copy_(src)
        return out
    if backend == "fused":
        if rowwise and colwise:
            return MXTensors._make(_quantize(x, block, scaling_mode, offs, format))
        if rowwise:
            q_row, s_row = _quantize_rowwise(x, block, scaling_mode, offs, format)
            return MXTensors(q_row, s_row, None, None)
        if colwise:
            q_col, s_col = _quantize_colwise(x, block, scaling_mode, offs, format)
            return MXTensors(None, None, q_col, s_col)
        raise ValueError("mxq.quantize: at least one of rowwise and colwise must be True")
    if backend == "composed":
        if format != "mxfp8":
            raise ValueError(
                f'mxq.quantize: backend="composed" is MXFP8\'s three-kernel baseline; format "{format}" has only '
                'backend="fused"'
            )
        if not (rowwise and colwise):
            raise ValueError(
                'mxq.quantize: backend="composed" quantizes both axes (it is the three-kernel baseline); '
                f'use backend="fused" for rowwise={rowwise}, colwise={colwise}'
            )
        return MXTensors(*_quantize_composed(x, block, scaling_mode, offs, format))
    raise ValueError(f'mxq.quantize: backend must be "fused" or "composed", got "{backend}"')


def empty_quantized(
    x: Tensor, *, rowwise: bool = True, colwise: bool = True, offs: Tensor | None = None, format: str = "mxfp8"
) -> MXTensors:
    """Uninitialized outputs for ``quantize(x, rowwise=..., colwise=..., offs=..., format=..., out=...)``: the dtypes,
    shapes and strides that quantize returns (from the op's Meta impl, so from include/mxq/layout.h), on x's device.
    They fit every x of the same shape and group count."""
    check_type("mxq.empty_quantized", "x", x, Tensor)
    meta_offs = None if offs is None else offs.to("meta")
    shapes = quantize(x.to("meta"), rowwise=rowwise, colwise=colwise, offs=meta_offs, format=format)
    return MXTensors(
        *(
            None if t is None else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=x.device)
            for t in shapes
        )
    )


def dequantize(
    q: Tensor, scales: Tensor, offs: Tensor | None = None, *, layout: str = "blocked", format: str = "mxfp8"
) -> Tensor:
    """bf16 (rows, cols) from contiguous e4m3 ``q`` (rows, cols) and the scales of its (rows, cols/block) blocks.

    MXFP8: ``layout`` ``"blocked"`` (no offs), ``"m_groups"`` (rowwise data of grouped mode: rows are tokens, scales
    as s_row) or ``"k_groups"`` (colwise data, q_col.t(): cols are tokens, scales as s_col; tail tokens give 0). Each
    element is bf16(e4m3(q) * 2^(s - 127)), the fp32 product rounded once; scale 255 gives NaN.

    FP8 blockwise (``format="fp8_blockwise"``): layout "blocked" without offs; ``scales`` the fp32 (rows, cols/128)
    factors with strides (1, rows), as quantize returns them (s_row with q_row, s_col with q_col.t()). Each element
    is bf16(e4m3(q) * d), the fp32 product rounded once; a NaN factor gives NaN."""
    _check_dequantize_args("mxq.dequantize", ("q", q), ("scales", scales), offs)
    check_type("mxq.dequantize", "layout", layout, str)
    check_format("mxq.dequantize", format)
    return _dequantize(q, scales, offs, layout, format)


def _check_dequantize_args(op: str, q: tuple[str, object], scales: tuple[str, object], offs) -> None:
    check_type(op, *q, Tensor)
    check_type(op, *scales, Tensor)
    if offs is not None:
        check_type(op, "offs", offs, Tensor)


def dequantize_rowwise(q_row: Tensor, s_row: Tensor, offs: Tensor | None = None, *, format: str = "mxfp8") -> Tensor:
    """The bf16 (M, K) tensor that (q_row, s_row) of ``format`` encode; pass the quantization's ``offs`` for grouped
    MXFP8 s_row (FP8 blockwise's grouped factors are the dense ones: offs is not needed there, and not read)."""
    op = "mxq.dequantize_rowwise"
    _check_dequantize_args(op, ("q_row", q_row), ("s_row", s_row), offs)
    check_format(op, format)
    if format != "mxfp8":
        return _dequantize(q_row, s_row, None, "blocked", format)
    return _dequantize(q_row, s_row, offs, "blocked" if offs is None else "m_groups", format)


def dequantize_colwise(q_col: Tensor, s_col: Tensor, offs: Tensor | None = None, *, format: str = "mxfp8") -> Tensor:
    """The bf16 (M, K) tensor that (q_col, s_col) of ``format`` encode, as a (1, M)-strided view like q_col; pass the
    quantization's ``offs`` for grouped MXFP8 s_col (tail tokens give 0; FP8 blockwise's grouped factors are the
    dense ones: offs is not read, and its tail tokens dequantize like the others)."""
    op = "mxq.dequantize_colwise"
    _check_dequantize_args(op, ("q_col", q_col), ("s_col", s_col), offs)
    check_format(op, format)
    # q_col.t() must be the contiguous (K, M) array; the op would name q and the strides of the transpose.
    if q_col.dim() == 2 and not q_col.t().is_contiguous():
        raise ValueError(
            f"{op}: q_col must have strides (1, M) as quantize returns it (q_col.t() contiguous), got strides "
            f"{q_col.stride()} for shape {list(q_col.shape)}"
        )
    if format != "mxfp8":
        return _dequantize(q_col.t(), s_col, None, "blocked", format).t()
    return _dequantize(q_col.t(), s_col, offs, "blocked" if offs is None else "k_groups", format).t()


def validate_offs(offs: Tensor, M: int, *, format: str = "mxfp8") -> None:
    """Host-side check of grouped-mode offsets (docs/numerics.md §6, §9, §13) by the library's own checker; copies a
    CUDA ``offs`` to the host, so it synchronizes.

    Raises TypeError/ValueError naming the first bad entry: offs must be a 1-D int32 tensor of 1..1024 cumulative
    end offsets, non-decreasing, non-negative, at most M, each a multiple of the format's block (32 for "mxfp8",
    128 for "fp8_blockwise").
    """
    check_type("mxq.validate_offs", "offs", offs, Tensor)
    check_type("mxq.validate_offs", "M", M, int)
    check_format("mxq.validate_offs", format)
    _ops.validate_offs(offs, M, format)


def quantize_weight(
    w: Tensor,
    *,
    scaling_mode: str | None = None,
    weight_scaling: str | None = None,
    rowwise: bool = True,
    colwise: bool = True,
    format: str = "mxfp8",
) -> MXTensors:
    """Quantizes weights (docs/numerics.md §11): the bf16, fp16 or fp32 ``w`` of shape (G, N, K) (MoE experts)
    or (N, K) (a dense Linear, G = 1), contiguous, N and K multiples of 32. Each expert's (N, K) matrix is quantized
    on its own, rowwise along K (the forward GEMM's operand) and/or colwise along N (dgrad's), from one read of w.

    ``weight_scaling``: ``"32x32"`` (default) gives one scale per 32x32 tile of an expert, shared by both axes, so
    the colwise bytes are exactly the per-expert transpose of the rowwise bytes; ``"1x32"`` scales each axis in its
    own 32-element blocks, as :func:`quantize` does.

    Outputs (the axes not requested are None), 3-D w / 2-D w:

        q_row  (G, N, K) / (N, K), contiguous
        s_row  (G, roundup(N,128)*roundup(K/32,4)) / (roundup(N,128), roundup(K/32,4)): each expert's S_row (N, K/32)
               in the blocked layout
        q_col  logical (G, N, K) with strides (N*K, 1, N) / logical (N, K) with strides (1, N): the row-major (G, K, N)
               / (K, N) array the kernel writes, q_col[g, n, k] = W[g, n, k] quantized along N
        s_col  (G, roundup(K,128)*roundup(N/32,4)) / (roundup(K,128), roundup(N/32,4)): each expert's S_col (K, N/32)
               in the blocked layout

    These are torch._scaled_grouped_mm's (and, for 2-D w, torch._scaled_mm's) right-hand operands: the forward takes
    ``q_row.transpose(-2, -1)`` with ``s_row`` (contraction over K), dgrad takes ``q_col`` with ``s_col``
    (contraction over N); both are column-major in their last two dimensions. (The op itself returns empty tensors
    for a skipped axis; this wrapper returns None.) ``scaling_mode`` None and ``weight_scaling`` None are the
    format's defaults ("rceil" and "32x32" for MXFP8).

    FP8 blockwise (``format="fp8_blockwise"``; ``weight_scaling`` None or "128x128", N and K multiples of 128,
    ``scaling_mode`` None for "fp32", or "rceil"): one fp32 factor per 128x128 tile, shared by both axes, so q_col is
    the per-expert transpose of q_row (q_row and q_col as above). The factors, contiguous, padding 0:

        s_row  (G, N/128, roundup(K/128,4)) / (N/128, roundup(K/128,4)): tile (tn, tk) at [g, tn, tk]
        s_col  (G, K/128, roundup(N/128,4)) / (K/128, roundup(N/128,4)): tile (tn, tk) at [g, tk, tn]

    torch.nn.functional.scaled_mm (BlockWise128x128) takes them for a 2-D w as mat_b = ``q_row.t()`` with scale_b =
    ``s_row[:, :K // 128].t()`` (forward, y = x wᵀ) and mat_b = ``q_col`` with scale_b = ``s_col[:, :N // 128].t()``
    (dgrad, dx = dy w): cuBLASLt's 128x128 scales, the contraction's tiles fastest, their count padded to 4.
    """
    op = "mxq.quantize_weight"
    check_types(op, ("w", w, Tensor))
    check_format(op, format)
    scaling_mode = _scaling_mode(op, scaling_mode, format)
    weight_scaling = FORMAT_DEFAULTS[format]["weight_scaling"] if weight_scaling is None else weight_scaling
    check_types(op, ("weight_scaling", weight_scaling, str), ("rowwise", rowwise, bool), ("colwise", colwise, bool))
    q_row, s_row, q_col, s_col = _quantize_weight(w, scaling_mode, weight_scaling, rowwise, colwise, format)
    return MXTensors(
        q_row if rowwise else None, s_row if rowwise else None, q_col if colwise else None, s_col if colwise else None
    )


class RoutedMXTensors(NamedTuple):
    """The outputs of :func:`quantize_routed`: the four of :func:`quantize` over the padded row space (the axes that
    were not requested are None), the padded group ends and the padded row of each routed row."""

    q_row: Tensor | None
    s_row: Tensor | None
    q_col: Tensor | None
    s_col: Tensor | None
    offs_p: Tensor
    dest: Tensor


def quantize_routed(
    x: Tensor,
    index: Tensor,
    counts: Tensor,
    *,
    scale: Tensor | None = None,
    scaling_mode: str | None = None,
    rowwise: bool = True,
    colwise: bool = True,
    format: str = "mxfp8",
) -> RoutedMXTensors:
    """The MoE input stage in one pass (docs/numerics.md §12.1): gathers the routed rows of ``x``, pads every expert's
    rows to a multiple of 32 and MXFP8-quantizes them on the requested axes, from one read of each routed row.

    ``x`` (T, K) bf16, fp16 or fp32, contiguous, K a multiple of 32; ``index`` (N,) int32 or int64, the source row of
    each routed row in expert-sorted order (e.g. ``argsort(expert_ids.flatten(), stable=True) // top_k``);
    ``counts`` (E,) int32 or int64, routed rows per expert (Σ = N), 1 <= E <= 1024; ``scale`` (N,) float32 or None, a
    factor per routed row (gate scores): the quantized value is ``(x[index].float() * scale[:, None]).to(x.dtype)``,
    exactly what a separate multiply would hand the quantizer. All on x's device.

    The padded row space (docs/numerics.md §12) has ``Mp = roundup(N + 31·E, 32)`` rows, known from the shapes (no
    host sync): expert e's rows start at ``P_e = Σ_{j<e} roundup(counts[j], 32)``, its padding rows follow (zeros),
    and the rows past ``offs_p[E-1]`` are the uncovered tail (zeros). Returns, as :func:`quantize` of that padded
    tensor with ``offs=offs_p`` would (raw bytes identical):

        q_row   float8_e4m3fn  (Mp, K)
        s_row   float8_e8m0fnu (roundup(Mp,128) + 128E, roundup(K/32,4)): M-groups layout over offs_p
        q_col   float8_e4m3fn  logical (Mp, K), strides (1, Mp): q_col.t() is the row-major (K, Mp) array
        s_col   float8_e8m0fnu (roundup(K,128), Mp/32 + 4E): K-groups layout over offs_p
        offs_p  int32 (E,): the padded group ends, offs_p[e] = P_e + roundup(counts[e], 32)
        dest    int32 (N,): the padded row of each routed row (for the combine)

    FP8 blockwise (``format="fp8_blockwise"``, ``scaling_mode`` None for "fp32", or "rceil"): every expert's rows are
    padded to a multiple of 128, ``Mp = roundup(N + 127·E, 128)``, ``P_e`` and ``offs_p`` with 128 in place of 32,
    K a multiple of 128; the outputs are :func:`quantize`'s of that padded tensor in this format (s_row fp32
    (Mp, K/128) with strides (1, Mp), s_col fp32 (K, Mp/128) with strides (1, K)). ``scaling_mode=None`` is the
    format's default ("rceil" for MXFP8).

    On CPU tensors (the bit-exact reference) an index outside [0, T) or counts that are negative or do not sum to N
    raise ValueError. On CUDA they live on the device and are not read on the host: a bad index quantizes as a zero
    row, negative counts count as 0, counts past N are cut there (those routed rows get dest -1); nothing is written
    outside the outputs and no exception is raised (the C++ API's optional status word reports it).

    Raises TypeError for an argument of the wrong type or dtype, ValueError for a bad value.
    """
    op = "mxq.quantize_routed"
    check_types(op, ("x", x, Tensor), ("index", index, Tensor), ("counts", counts, Tensor))
    check_format(op, format)
    scaling_mode = _scaling_mode(op, scaling_mode, format)
    check_types(op, ("rowwise", rowwise, bool), ("colwise", colwise, bool))
    if scale is not None:
        check_type(op, "scale", scale, Tensor)
    q_row, s_row, q_col, s_col, offs_p, dest = _quantize_routed(
        x, index, counts, scale, scaling_mode, rowwise, colwise, format
    )
    return RoutedMXTensors(
        q_row if rowwise else None,
        s_row if rowwise else None,
        q_col if colwise else None,
        s_col if colwise else None,
        offs_p,
        dest,
    )


def has_cuda_kernels() -> bool:
    """True when the loaded extension registered CUDA impls (built with nvcc and a CUDA-enabled torch)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("mxq::quantize", "CUDA")


def __getattr__(name: str):
    if name in ("BACKENDS", "WEIGHT_SCALINGS"):
        field = {"BACKENDS": "activation_quantization_backend", "WEIGHT_SCALINGS": "weight_scaling"}[name]
        raise AttributeError(f'mxq.ops.{name} was removed: the choices are mxq.config.CHOICES["{field}"]')
    raise AttributeError(f"module 'mxq.ops' has no attribute {name!r}")


GROUPINGS = ("m_grouped", "k_grouped")


def grouped_mm_fp8_blockwise(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, offs: Tensor, *, grouping: str = "m_grouped"
) -> Tensor:
    """The MoE experts' FP8 blockwise GEMMs (docs/numerics.md §13.6), on operands as :func:`quantize`,
    :func:`quantize_routed` and :func:`quantize_weight` return them with ``format="fp8_blockwise"``. ``offs`` (G,)
    int32: the group ends along the tokens M, each a multiple of 128 (``quantize_routed``'s ``offs_p``).

    ``grouping="m_grouped"`` (forward and dgrad), ``out[rows of g] = a[rows of g] @ b[g].T``:
        a        q_row (M, K) float8_e4m3fn;  a_scale  s_row (M, K/128) float32, strides (1, M)
        b        (G, N, K) float8_e4m3fn, contiguous: a weight's q_row (forward) or
                 ``q_col.transpose(-2, -1)`` (dgrad, the (G, K, N) array)
        b_scale  (G, N/128, roundup(K/128, 4)) float32: the weight's s_row (forward) or s_col (dgrad)
        returns  (M, N) bfloat16; rows past ``offs[-1]`` are zero

    ``grouping="k_grouped"`` (wgrad), ``out[g] = dY_g.T @ X_g`` over group g's tokens:
        a        dY's ``q_col.t()`` (N, M);  a_scale  dY's s_col (N, M/128), strides (1, N)
        b        X's ``q_col.t()`` (K, M);   b_scale  X's s_col (K, M/128), strides (1, K)
        returns  (G, N, K) bfloat16; an empty group's matrix is zero

    M, N, K multiples of 128, 1 <= G <= 1024. CPU tensors run the emulated GEMM of the C++ reference (each operand
    dequantized, fp32 sums in order, rounded once to bf16); CUDA tensors CUTLASS's SM90 grouped GEMM (SM90 only:
    elsewhere RuntimeError), equal to the CPU result within the fp32-accumulation tolerance of §13.6. On CUDA a
    malformed offs is not read on the host (no sync): it is clamped on the device; :func:`validate_offs` checks it.

    Raises TypeError for an argument of the wrong type or dtype, ValueError for a bad value.
    """
    op = "mxq.grouped_mm_fp8_blockwise"
    check_types(
        op,
        ("a", a, Tensor),
        ("a_scale", a_scale, Tensor),
        ("b", b, Tensor),
        ("b_scale", b_scale, Tensor),
        ("offs", offs, Tensor),
        ("grouping", grouping, str),
    )
    return _grouped_mm_fp8_blockwise(a, a_scale, b, b_scale, offs, grouping)


_grouped_mm_fp8_blockwise = _ops.grouped_mm_fp8_blockwise.default


def combine(y: Tensor, dest: Tensor, token_rows: Tensor, *, scale: Tensor | None = None) -> Tensor:
    """The MoE layer's routed rows back to their tokens (docs/numerics.md §14): (T, D) bfloat16, token t the sum of
    its routed rows ``y[dest[r]]`` (each multiplied by ``scale[r]`` and rounded to bf16 when ``scale`` is given), in
    increasing routed row r, each add rounded to bf16 — bit for bit what
    ``zeros(T, D).index_put_((index,), rows, accumulate=True)`` gives.

    y (Mp, D) bfloat16 contiguous, the experts' output over the padded rows (D a multiple of 8); dest (N,) int32
    the padded row of each routed row (:func:`quantize_routed`'s); token_rows (T, top_k) int32 contiguous, each
    token's routed rows (a permutation of [0, N), N = T·top_k, 1 <= top_k <= 32); scale (N,) float32 or None.
    CPU tensors run the C++ reference, CUDA tensors one kernel (the same bits). A routed row or dest out of range
    raises ValueError on the CPU; on CUDA it contributes 0 (checked on the device, no sync).

    Raises TypeError for an argument of the wrong type or dtype, ValueError for a bad shape or device mix."""
    op = "mxq.combine"
    check_types(op, ("y", y, Tensor), ("dest", dest, Tensor), ("token_rows", token_rows, Tensor))
    if scale is not None:
        check_type(op, "scale", scale, Tensor)
    return _combine(y, dest, token_rows, scale)


def combine_score_grad(dout: Tensor, y: Tensor, dest: Tensor, token_rows: Tensor) -> Tensor:
    """The gate scores' gradient of :func:`combine` with ``scale`` (docs/numerics.md §14): (T, top_k) float32,
    ``out[t, j] = Σ_d dout[t, d] · y[dest[r], d]`` for r = ``token_rows[t, j]``, products and sums in fp32 in the
    order §14 fixes (the CPU reference and the CUDA kernel give the same bits; torch's own reduction sums in
    another order, so it agrees within fp32 rounding). dout (T, D) bfloat16 contiguous; the rest as for
    :func:`combine`.

    Raises TypeError for an argument of the wrong type or dtype, ValueError for a bad shape or device mix."""
    op = "mxq.combine_score_grad"
    check_types(
        op, ("dout", dout, Tensor), ("y", y, Tensor), ("dest", dest, Tensor), ("token_rows", token_rows, Tensor)
    )
    return _combine_score_grad(dout, y, dest, token_rows)


_combine = _ops.combine.default
_combine_score_grad = _ops.combine_score_grad.default
