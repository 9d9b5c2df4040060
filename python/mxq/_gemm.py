"""What mxq's MXFP8 layers share (internal): the GEMM operands, the padded row space, the GEMM back ends and the one
autograd Function that runs forward, dgrad and wgrad for every layer.

Imports run one way: ``mxq.linear``, ``mxq.moe`` and ``mxq.dispatch`` import this module; it imports only
``mxq.ops`` (every quantize and dequantize goes through its typed wrappers) and ``mxq.config``.

Every GEMM has the form A (R, C) · B (P, C)ᵀ with both operands quantized along C in the recipe's format: MXFP8
(docs/numerics.md §5) or FP8 blockwise (§13: 1x128 blocks, 128x128 weight tiles, fp32 factors); a layer's three
GEMMs (docs/training.md):

    GEMM                 A operand                          B operand
    forward  y  = x Wᵀ   x rowwise (1x32 along K)           W rowwise (along K)
    dgrad    dx = dy W   dy rowwise (along N)               W colwise (along N)
    wgrad    dW = dyᵀ x  dy colwise (32x1 along the rows)   x colwise (32x1 along the rows)

Grouped (MoE) GEMMs run on the padded row space (docs/numerics.md §12): every group's rows padded to a multiple of 32
on the device, with M-groups rowwise and K-groups colwise scales. A :class:`RowMap` says how a layer's rows map onto
the GEMM's rows; :class:`MXGemm` is the autograd skeleton that every layer runs with its row map.
"""

from __future__ import annotations

import contextlib
import threading
from typing import NamedTuple

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_pre_hook

from . import ops
from .config import MXFP8Config
from .ops import MXTensors, RoutedMXTensors, check_type

BLOCK = ops.FORMAT_BLOCK["mxfp8"]  # elements per MXFP8 scale block (docs/numerics.md §2)
ATOM_ROWS, ATOM_COLS = 128, 4  # one 128x4 scale atom of the blocked layout (docs/numerics.md §5)


def round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


# ---- argument checks shared by the layers ----


def check_float_tensor(owner: str, name: str, t) -> None:
    """TypeError unless ``t`` is a floating-point Tensor (the layers cast it to bf16; an integer, bool or complex
    tensor is a mistake, not something to cast)."""
    check_type(owner, name, t, Tensor)
    if not t.is_floating_point():
        raise TypeError(f"{owner}: {name} must be a floating-point tensor, got {t.dtype}")


def check_multiple(owner: str, name: str, value: int, block: int = BLOCK, hint: str = "") -> None:
    """ValueError unless ``value`` is a multiple of ``block`` (the format's block: 32, or 128 for FP8 blockwise)."""
    if value % block:
        raise ValueError(f"{owner}: {name} must be a multiple of {block}, got {value}{hint}")


def format_block(config: MXFP8Config) -> int:
    """The elements of one block along a quantized axis in ``config``'s format: 32 (MXFP8), 128 (FP8 blockwise)."""
    return ops.FORMAT_BLOCK[config.format]


def _autocast_on(device_type: str) -> bool:
    return device_type in ("cpu", "cuda") and torch.is_autocast_enabled(device_type)


def output_dtype(x: Tensor) -> torch.dtype:
    """The dtype a layer returns for the input ``x``: what the module it replaces would return — autocast's dtype
    for x's device type inside an autocast region, else x's own dtype."""
    if _autocast_on(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def no_autocast(device_type: str):
    """A region where autocast does not touch the GEMMs (the emulation's bf16 matmul stays bf16 under fp16 autocast)."""
    return torch.autocast(device_type, enabled=False) if _autocast_on(device_type) else contextlib.nullcontext()


# ---- GEMM capability ----


def native_mx_gemm(device: torch.device) -> bool:
    """True where torch._scaled_mm / torch._scaled_grouped_mm run MXFP8 (block-scaled e4m3 with E8M0 scales)
    natively: CUDA devices of compute capability 10.0 and above."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 10


def native_blockwise_gemm(device: torch.device) -> bool:
    """True where F.scaled_mm runs FP8 blockwise (1x128 x 128x128 and 1x128 x 1x128 fp32 block scales, cuBLASLt)
    natively: CUDA devices of compute capability 9.x (Hopper)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9


NATIVE_GEMMS = {  # per format: (the capability test, what it needs, in words)
    "mxfp8": (native_mx_gemm, "a CUDA device of compute capability 10.0 or above (MXFP8 GEMMs)"),
    "fp8_blockwise": (native_blockwise_gemm, "a CUDA device of compute capability 9.x (FP8 blockwise GEMMs)"),
}


def use_native_gemm(owner: str, config: MXFP8Config, device: torch.device) -> bool:
    """Whether ``config``'s GEMMs run natively on ``device``. RuntimeError when the config forces the native GEMM
    (``gemm="native"``) on a device that has none for its format: a missing capability, said up front instead of
    torch's error from inside the GEMM."""
    has_native, needs = NATIVE_GEMMS[config.format]
    native = has_native(device)
    if config.gemm == "native" and not native:
        raise RuntimeError(
            f'{owner}: gemm="native" needs {needs}, got {device}; gemm="auto" picks the emulated GEMM there'
        )
    return native and config.gemm != "emulated"


def bf16_grouped_mm_available(device: torch.device) -> bool:
    """True where torch._grouped_mm runs a bf16 grouped GEMM for ``device`` without reading offs on the host:
    the CPU, and CUDA devices of compute capability 9.0 and above (its CUTLASS kernels)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if device.type == "cpu":
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def grouped_gemm_path(device: torch.device, native: bool = False, format: str = "mxfp8") -> str:
    """The path a grouped GEMM takes on ``device``. MXFP8: ``"scaled_grouped_mm"`` (native, CUDA SM100+),
    ``"emulated_grouped_mm"`` (dequantize + torch._grouped_mm) or ``"emulated_per_group"`` (dequantize + one matmul
    per group). FP8 blockwise: ``"cutlass_fp8_blockwise"`` (native, CUDA SM90: mxq's CUTLASS kernel) or
    ``"emulated_fp32"`` (the op's C++ reference on the CPU; on CUDA one fp32 matmul per group)."""
    if format == "fp8_blockwise":
        return "cutlass_fp8_blockwise" if native else "emulated_fp32"
    if native:
        return "scaled_grouped_mm"
    return "emulated_grouped_mm" if bf16_grouped_mm_available(device) else "emulated_per_group"


def dense_gemm_path(native: bool) -> str:
    """The path a dense GEMM takes: ``"scaled_mm"`` (native MXFP8) or ``"emulated"`` (dequantize + a bf16 matmul)."""
    return "scaled_mm" if native else "emulated"


# ---- operands ----


def weight_operands(w: Tensor, scaling_mode: str, weight_scaling: str, format: str, colwise: bool = True) -> MXTensors:
    """(q_row, s_row, q_col, s_col) of a 2-D (N, K) or 3-D (G, N, K) weight from one :func:`mxq.quantize_weight`
    call, every option passed explicitly; q_col and s_col are None when ``colwise`` is False."""
    return ops.quantize_weight(
        w, scaling_mode=scaling_mode, weight_scaling=weight_scaling, colwise=colwise, format=format
    )


def dual_quantize(t: Tensor, backend: str, scaling_mode: str, format: str, offs: Tensor | None = None) -> MXTensors:
    """(q_row, s_row, q_col, s_col) of ``t`` from one call of the fused kernel or the composed baseline."""
    return ops.quantize(t, scaling_mode=scaling_mode, offs=offs, backend=backend, format=format)


def activation_operands(a: Tensor, need_dw: bool, plan: GemmPlan, offs=None):
    """(q, s, saved): the forward GEMM's rowwise operand of the activation ``a`` and what its wgrad needs later — a's
    colwise operand from the same call (``x_colwise="quantized"``), or ``a`` itself (quantized in backward)."""
    if plan.x_colwise == "quantized" and need_dw:
        q, s, q_col, s_col = dual_quantize(a, plan.backend, plan.scaling_mode, plan.format, offs)
        return q, s, (q_col, s_col)
    q, s, _, _ = ops.quantize(a, colwise=False, scaling_mode=plan.scaling_mode, offs=offs, format=plan.format)
    return q, s, ((a,) if need_dw else ())


def saved_colwise(saved, plan: GemmPlan, offs=None):
    """The activation's colwise operand (q_col, s_col) for wgrad from what :func:`activation_operands` saved."""
    if len(saved) == 2:
        return saved[0], saved[1]
    _, _, q_col, s_col = ops.quantize(
        saved[0], rowwise=False, scaling_mode=plan.scaling_mode, offs=offs, format=plan.format
    )
    return q_col, s_col


ROUTED_QUANTIZATIONS = ("fused", "composed")


def quantize_routed_composed(
    x: Tensor,
    index: Tensor,
    counts: Tensor,
    *,
    scale: Tensor | None = None,
    scaling_mode: str | None = None,
    rowwise: bool = True,
    colwise: bool = True,
    backend: str = "fused",
    format: str = "mxfp8",
) -> RoutedMXTensors:
    """:func:`mxq.quantize_routed`'s result by the composed baseline (docs/numerics.md §12.1): gather the routed rows
    ``x[index]``, multiply by ``scale`` rounded to x's dtype (``(x[index].float() * scale[:, None]).to(x.dtype)``),
    copy them into the zeroed padded row space (groups padded to the format's block: 32, or 128 for
    ``"fp8_blockwise"``), then :func:`mxq.quantize` with the padded group ends (``backend``: its kernel). x (T, K),
    index (N,) int32/int64 source rows in expert-sorted order, counts (E,) rows per expert (Σ = N), scale (N,) fp32
    or None; ``scaling_mode`` None for the format's default. Three passes over the routed rows besides the
    quantization; no host sync."""
    N = index.shape[0]
    ops.check_format("mxq.quantize_routed_composed", format)
    offs_p, dest, Mp = padded_row_space(torch.cumsum(counts, 0), N, ops.FORMAT_BLOCK[format])
    v = x.index_select(0, index)
    if scale is not None:
        v = (v.float() * scale.unsqueeze(1)).to(x.dtype)
    padded = x.new_zeros(Mp, x.shape[1]).index_copy_(0, dest, v)
    q = ops.quantize(
        padded,
        rowwise=rowwise,
        colwise=colwise,
        scaling_mode=scaling_mode,
        offs=offs_p,
        backend=backend,
        format=format,
    )
    return RoutedMXTensors(*q, offs_p, dest.to(torch.int32))


def routed_operands(
    how: str, x, index, counts, scale, scaling_mode: str, rowwise: bool, colwise: bool, backend: str, format: str
) -> RoutedMXTensors:
    """The routed rows of ``x`` quantized in ``format`` over the padded row space: by the one-pass op
    (``how="fused"``) or the composed baseline (``"composed"``); the same bytes."""
    axes = {"scale": scale, "scaling_mode": scaling_mode, "rowwise": rowwise, "colwise": colwise, "format": format}
    if how == "fused":
        return ops.quantize_routed(x, index, counts, **axes)
    return quantize_routed_composed(x, index, counts, backend=backend, **axes)


# ---- reusing a weight's quantization across microbatches ----

_reuse = threading.local()  # .cache: {(id, options): (weight, stamp, operands)} inside reuse_quantized_weights


@contextlib.contextmanager
def reuse_quantized_weights():
    """Within the block, an MXFP8 layer's weight that is unchanged since its last quantization in the block reuses
    that quantization instead of calling quantize_weight again: for several microbatches between optimizer steps
    (gradient accumulation; the pipeline-parallel pattern with FSDP2 keeping the weights unsharded), each weight is
    quantized once.

    Unchanged means: the same tensor object, storage address and version counter, and no optimizer step since (any
    ``torch.optim`` optimizer's step clears the block's cache). The version counter sees in-place updates of the
    layer's own weight tensor, but not writes that bypass it — FSDP2's all-gather into the unsharded weight is one,
    which is why optimizer steps clear the cache. So, inside a block, change weights only by optimizer steps or
    in-place ops on the layer's weight. The quantized weights are released when the block ends. Ignored while
    torch.compile traces and while a CUDA graph is captured (a captured step quantizes the weights it replays
    with). Nesting is allowed (the outer block rules)."""
    if getattr(_reuse, "cache", None) is not None:
        yield
        return
    cache: dict = {}
    hook = register_optimizer_step_pre_hook(lambda *_: cache.clear())
    _reuse.cache = cache
    try:
        yield
    finally:
        _reuse.cache = None
        hook.remove()


def layer_weight_operands(weight: Tensor, w: Tensor, config: MXFP8Config):
    """Both axes' operands of the layer weight ``weight`` (``w``: its bf16 contiguous form) from the
    :func:`reuse_quantized_weights` cache, or None outside such a block (the layer then quantizes it itself).

    Only a leaf tensor (a parameter, or a detached tensor) is cached: a computed weight (a cast of an fp32 master
    weight, say) is a new tensor every call. A view that covers its base exactly (a transpose of a transpose, as
    TorchTitan's grouped-GEMM seam hands its experts' weights back) stands for the base."""
    if torch.compiler.is_compiling():
        return None
    cache = getattr(_reuse, "cache", None)
    if cache is None or (w.is_cuda and torch.cuda.is_current_stream_capturing()):
        return None
    base = weight._base
    if base is not None and (base.shape, base.stride(), base.data_ptr()) == (
        weight.shape,
        weight.stride(),
        weight.data_ptr(),
    ):
        weight = base
    if weight.grad_fn is not None:
        return None
    key = (id(weight), config.format, config.scaling_mode, config.weight_scaling)
    stamp = (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape), weight.device)
    hit = cache.get(key)
    if hit is not None and hit[0] is weight and hit[1] == stamp:
        return hit[2]
    # Outside autograd, as in MXGemm.forward: a cached operand must not hold w's graph (the op has no autograd
    # formula; its outputs would carry a grad_fn that only fails at backward).
    with torch.no_grad():
        operands = weight_operands(w, config.scaling_mode, config.weight_scaling, config.format, colwise=True)
    cache[key] = (weight, stamp, operands)  # keeps `weight` alive, so its id is not reused while cached
    return operands


# ---- groups of any size: the padded row space (docs/numerics.md §12) ----


class PaddedRowSpace(NamedTuple):
    """Where M rows grouped by ``offs`` go in the padded row space: ``offs_p`` (G,) int32 the padded group ends,
    ``dest`` (M,) int64 the padded row of each row, ``Mp`` the number of padded rows."""

    offs_p: Tensor
    dest: Tensor
    Mp: int


def padded_row_space(offs: Tensor, M: int, block: int = BLOCK) -> PaddedRowSpace:
    """The padded row space of M rows grouped by ``offs`` (any sizes): (offs_p, dest, Mp). Group g's rows move to
    start at ``P_g = Σ_{j<g} roundup(n_j, block)`` and are followed by its zero padding rows; ``offs_p`` (G,) int32
    are the padded group ends; the caller's tail rows (past offs[-1]) follow offs_p[-1]; ``dest`` (M,) int64 is the
    padded row of each caller row; ``Mp = roundup(M + (block-1)·G, block)`` rows hold any offs, so nothing is read on
    the host. ``block``: the format's block, 32 (MXFP8) or 128 (FP8 blockwise).

    Written from docs/numerics.md §12 with torch ops, this is the independent reference for the routed op's padded
    row space (``mxq::quantize_routed``: src/kernels/route.cu on the GPU, src/ref/routed.cpp on the CPU):
    tests/python/test_routed.py checks the op's offs_p, dest and bytes against a composition built on it.

    A malformed offs (a negative size, a negative start or an end past M) fails a device-side assertion; the indices
    are clamped into range first, so nothing is read or written outside the buffers before it fires."""
    G = offs.shape[0]
    Mp = round_up(M + (block - 1) * G, block)
    ends = offs.long()
    sizes = torch.diff(ends, prepend=ends.new_zeros(1))
    torch._assert_async(
        (sizes.min() >= 0) & (ends[-1] <= M),
        "mxq: the grouped GEMM's offs must be non-decreasing, non-negative and at most M",
    )
    padded = (sizes + block - 1) // block * block
    ends_p = torch.cumsum(padded, 0)
    # Each group's rows move by one shift, its padded start minus its start; the tail's by the padded end minus
    # the end.
    shift = torch.cat([(ends_p - padded) - (ends - sizes), ends_p[-1:] - ends[-1:]])
    rows = torch.arange(M, device=offs.device)
    group = torch.searchsorted(ends, rows, right=True)  # G for the tail
    dest = (rows + shift[group]).clamp_(0, Mp - 1)
    return PaddedRowSpace(ends_p.to(torch.int32), dest, Mp)


def pad_rows(t: Tensor, dest: Tensor, Mp: int) -> Tensor:
    """(Mp, C): the rows of t (M, C) at their padded places, zeros elsewhere (an exact copy: each row is written
    once)."""
    return t.new_zeros(Mp, t.shape[1]).index_copy_(0, dest, t)


def zero_tail(y: Tensor, offs: Tensor) -> Tensor:
    """y with its rows past offs[-1] set to 0 (no host sync: compares with offs[-1] on the device)."""
    inside = (torch.arange(y.shape[0], device=offs.device, dtype=torch.int32) < offs[-1]).unsqueeze(1)
    return keep_rows(y, inside)


def keep_rows(y: Tensor, keep: Tensor) -> Tensor:
    """y where ``keep`` (rows, 1) is True, else +0. torch.where, not a multiply: the GEMMs leave tail rows unwritten
    (any bytes, NaN included), and a padding row's product with a zero row may be -0."""
    return torch.where(keep, y, torch.zeros((), dtype=y.dtype, device=y.device))


def zero_empty_groups(dw: Tensor, offs: Tensor) -> Tensor:
    """dW (G, N, K) with the empty groups' matrices set to 0."""
    sizes = torch.diff(offs, prepend=offs.new_zeros(1))
    return torch.where((sizes > 0).view(-1, 1, 1), dw, torch.zeros((), dtype=dw.dtype, device=dw.device))


# ---- the GEMM back ends ----


def bf16_grouped(a: Tensor, b: Tensor, offs: Tensor, path: str) -> Tensor:
    """a (M, K) · b (G, K, N) -> (M, N) per group (2d-3d), or a (N, M) · b (M, K) -> (G, N, K) (2d-2d, groups along M);
    bf16 in and out, fp32 accumulation. Tail rows / empty groups are left to the caller's masks."""
    if path == "emulated_grouped_mm":
        return torch._grouped_mm(a, b, offs=offs)
    ends = [int(e) for e in offs.tolist()]  # host read: the per-group fallback synchronizes
    starts = [0] + ends[:-1]
    if b.dim() == 3:  # 2d-3d
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                out[s:e] = a[s:e] @ b[g]
        return out
    out = a.new_zeros(len(ends), a.shape[0], b.shape[-1])  # 2d-2d
    for g, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            out[g] = a[:, s:e] @ b[s:e]
    return out


def blocked_scales(s: Tensor, rows: int, cols: int) -> Tensor:
    """The 2-D (roundup(rows,128), roundup(cols/32,4)) view of the blocked scales of a (rows, cols) operand."""
    return s.reshape(round_up(rows, ATOM_ROWS), round_up(cols // BLOCK, ATOM_COLS))


def dequantize_experts(q: Tensor, s: Tensor) -> Tensor:
    """bf16 (G, R, C) from per-expert e4m3 data q (G, R, C) (contiguous) and per-expert blocked scales s (G regions of
    roundup(R,128)·roundup(C/32,4) bytes, one after another): one ``dequantize`` call in the M-groups layout, whose
    segments for offs = [R, 2R, ..., GR] are exactly these regions (the empty tail segment and the allocation's slack
    are padded with zero bytes)."""
    G, R, C = q.shape
    Rp, Cp = round_up(R, ATOM_ROWS), round_up(C // BLOCK, ATOM_COLS)
    slack = round_up(G * R, ATOM_ROWS) + ATOM_ROWS * G - G * Rp
    s_u8 = s.reshape(G * Rp, Cp).view(torch.uint8)
    s_mg = torch.cat([s_u8, s_u8.new_zeros(slack, Cp)]).view(torch.float8_e8m0fnu)
    ends = torch.arange(1, G + 1, device=q.device, dtype=torch.int32) * R
    return ops.dequantize(q.reshape(G * R, C), s_mg, ends, layout="m_groups").view(G, R, C)


def mx_gemm(qa: Tensor, sa: Tensor, qb: Tensor, sb: Tensor, path: str) -> Tensor:
    """bf16 (R, P) = A · Bᵀ for MXFP8 A (R, C) and B (P, C), both contiguous e4m3 quantized along C, with blocked
    scales of their (R, C/32) and (P, C/32) blocks: torch._scaled_mm (``path="scaled_mm"``), else emulated."""
    if path == "scaled_mm":
        # B must be column-major: qb.t() is (C, P) with strides (1, C).
        return torch._scaled_mm(qa, qb.t(), sa.reshape(-1), sb.reshape(-1), out_dtype=torch.bfloat16)
    a = ops.dequantize(qa, blocked_scales(sa, *qa.shape))
    b = ops.dequantize(qb, blocked_scales(sb, *qb.shape))
    return a @ b.t()


def blockwise_gemm(qa: Tensor, sa: Tensor, qb: Tensor, sb: Tensor, tiles: bool, path: str) -> Tensor:
    """bf16 (R, P) = A · Bᵀ for FP8 blockwise A (R, C) and B (P, C), both contiguous e4m3 quantized along C
    (docs/numerics.md §13): A in 1x128 blocks, ``sa`` (R, C/128) fp32 with strides (1, R); B in 128x128 tiles
    (``tiles``, a weight: ``sb`` (P/128, roundup(C/128, 4)) row-major) or 1x128 blocks (``sb`` (P, C/128), strides
    (1, P)). ``path="scaled_mm"``: F.scaled_mm (cuBLASLt, SM90) on the factors where quantize wrote them. Else
    emulated: each operand dequantized in fp32 (e4m3 · factor), an fp32 matmul, rounded to bf16 once."""
    if path == "scaled_mm":
        # F.scaled_mm's op, called as the aten op: torch.compile traces it (torch 2.11's dynamo refuses the Python
        # binding F.scaled_mm calls). Its recipes as F.ScalingType's values; no swizzle, no bias, no fast accumulation.
        scaling = torch.nn.functional.ScalingType
        recipe_b = scaling.BlockWise128x128 if tiles else scaling.BlockWise1x128
        scale_b = sb.t() if tiles else sb  # (C/128 padded, P/128) or (P, C/128) as cuBLASLt takes them
        return torch.ops.aten._scaled_mm_v2.default(
            qa,
            qb.t(),
            [sa],
            [scaling.BlockWise1x128.value],
            [],
            [scale_b],
            [recipe_b.value],
            [],
            None,
            torch.bfloat16,
        )
    n, C = ops.FORMAT_BLOCK["fp8_blockwise"], qa.shape[1]
    a = qa.float() * sa.float().repeat_interleave(n, 1)
    if tiles:
        fb = sb[:, : C // n].float().repeat_interleave(n, 0).repeat_interleave(n, 1)
    else:
        fb = sb.float().repeat_interleave(n, 1)
    return (a @ (qb.float() * fb).t()).to(torch.bfloat16)


def dense_gemm(qa: Tensor, sa: Tensor, qb: Tensor, sb: Tensor, b_is_weight: bool, plan: GemmPlan) -> Tensor:
    """bf16 A · Bᵀ in the plan's format (B a weight: 128x128 tiles in FP8 blockwise)."""
    if plan.format == "fp8_blockwise":
        return blockwise_gemm(qa, sa, qb, sb, b_is_weight, plan.path)
    return mx_gemm(qa, sa, qb, sb, plan.path)


def blockwise_grouped(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, offs: Tensor, grouping: str, path: str) -> Tensor:
    """:func:`mxq.ops.grouped_mm_fp8_blockwise` (its docstring has the operands; ``grouping`` "m_grouped" for
    forward and dgrad, "k_grouped" for wgrad): the op — CUTLASS on SM90, the C++ reference on the CPU — or, emulated
    on a CUDA device, :func:`blockwise_gemm`'s fp32 emulation one group at a time (reads offs on the host, so it
    synchronizes; empty groups and rows past offs[-1] give 0, as the op's)."""
    if path == "cutlass_fp8_blockwise" or a.device.type == "cpu":
        return ops.grouped_mm_fp8_blockwise(a, sa, b, sb, offs, grouping=grouping)
    n, ends = ops.FORMAT_BLOCK["fp8_blockwise"], [int(e) for e in offs.tolist()]
    groups = [(g, s, e) for g, (s, e) in enumerate(zip([0, *ends[:-1]], ends)) if e > s]
    if grouping == "m_grouped":
        out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)
        for g, s, e in groups:
            out[s:e] = blockwise_gemm(a[s:e], sa[s:e], b[g], sb[g], True, path)
        return out
    out = torch.zeros(len(ends), a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
    for g, s, e in groups:
        out[g] = blockwise_gemm(a[:, s:e], sa[:, s // n : e // n], b[:, s:e], sb[:, s // n : e // n], False, path)
    return out


def fwd_gemm(q_x, s_x, q_w, s_w, offs, plan: GemmPlan) -> Tensor:
    """y = x Wᵀ (per group): x rowwise ((M, K); M-groups scales when grouped), W rowwise along K ((N, K), or
    (G, N, K) per expert)."""
    path = plan.path
    if offs is None:
        return dense_gemm(q_x, s_x, q_w, s_w, True, plan)
    if plan.format == "fp8_blockwise":
        return blockwise_grouped(q_x, s_x, q_w, s_w, offs, "m_grouped", path)
    if path == "scaled_grouped_mm":
        # B (G, K, N) column-major: q_w.transpose(-2, -1) has strides (N·K, 1, K).
        return torch._scaled_grouped_mm(q_x, q_w.transpose(-2, -1), s_x, s_w, offs=offs, out_dtype=torch.bfloat16)
    x = ops.dequantize(q_x, s_x, offs, layout="m_groups")
    w = dequantize_experts(q_w, s_w)  # (G, N, K)
    return bf16_grouped(x, w.transpose(-2, -1), offs, path)


def dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs, plan: GemmPlan) -> Tensor:
    """dx = dy W (per group): dy rowwise ((M, N); M-groups scales when grouped), W colwise along N: q_w_col logical
    (N, K) / (G, N, K) over the physical (K, N) / (G, K, N)."""
    path = plan.path
    if offs is None:
        return dense_gemm(q_dy, s_dy, q_w_col.t(), s_w_col, True, plan)  # (M, N) · (K, N)ᵀ
    if plan.format == "fp8_blockwise":  # B: the (G, K, N) array of W's colwise bytes
        return blockwise_grouped(q_dy, s_dy, q_w_col.transpose(-2, -1), s_w_col, offs, "m_grouped", path)
    if path == "scaled_grouped_mm":
        return torch._scaled_grouped_mm(q_dy, q_w_col, s_dy, s_w_col, offs=offs, out_dtype=torch.bfloat16)
    dy = ops.dequantize(q_dy, s_dy, offs, layout="m_groups")
    w_t = dequantize_experts(q_w_col.transpose(-2, -1), s_w_col)  # (G, K, N)
    return bf16_grouped(dy, w_t.transpose(-2, -1), offs, path)


def wgrad_gemm(q_dy_col, s_dy_col, q_x_col, s_x_col, offs, plan: GemmPlan) -> Tensor:
    """dW = dyᵀ x (per group): dy colwise (q_dy_col.t() is (N, M)), x colwise (q_x_col logical (M, K), strides
    (1, M)); K-groups scales when grouped."""
    path = plan.path
    if offs is None:
        return dense_gemm(q_dy_col.t(), s_dy_col, q_x_col.t(), s_x_col, False, plan)  # (N, M) · (K, M)ᵀ
    if plan.format == "fp8_blockwise":
        return blockwise_grouped(q_dy_col.t(), s_dy_col, q_x_col.t(), s_x_col, offs, "k_grouped", path)
    if path == "scaled_grouped_mm":
        return torch._scaled_grouped_mm(q_dy_col.t(), q_x_col, s_dy_col, s_x_col, offs=offs, out_dtype=torch.bfloat16)
    dy_t = ops.dequantize(q_dy_col.t(), s_dy_col, offs, layout="k_groups")  # (N, M), tail tokens 0
    x_t = ops.dequantize(q_x_col.t(), s_x_col, offs, layout="k_groups")  # (K, M), tail tokens 0
    return bf16_grouped(dy_t, x_t.t(), offs, path)


# ---- row maps: a layer's rows on the GEMM's rows ----


class GemmPlan(NamedTuple):
    """What :class:`MXGemm` takes of a layer's recipe (its MXFP8Config) and call, as plain strings (torch.compile traces them as
    constants): the row map's name (``ROW_MAPS``), the config's fields, the routed quantization and the GEMM path."""

    rows: str
    format: str
    backend: str
    x_colwise: str
    scaling_mode: str
    weight_scaling: str
    routed_quantization: str
    path: str

    @property
    def fills_every_row(self) -> bool:
        """Whether the grouped GEMMs write every element of their output, so that no row map masks after them:
        FP8 blockwise's do (mxq.ops.grouped_mm_fp8_blockwise and its per-group emulation: rows past offs[-1] and
        empty groups' dW as +0; a padding row, all zero codes, gives +0 from an accumulator that starts at +0).
        MXFP8's torch._scaled_grouped_mm / torch._grouped_mm leave those unwritten."""
        return self.format == "fp8_blockwise"


def gemm_plan(rows: str, config: MXFP8Config, path: str, routed_quantization: str = "fused") -> GemmPlan:
    return GemmPlan(
        rows,
        config.format,
        config.activation_quantization_backend,
        config.x_colwise,
        config.scaling_mode,
        config.weight_scaling,
        routed_quantization,
        path,
    )


class RowMap:
    """A dense GEMM: the layer's rows are the GEMM's rows. Subclasses move rows to and from the padded row space;
    ``rows`` is the tuple of index tensors a map needs (empty here). The ``mask_*`` methods zero what a grouped GEMM
    may leave unwritten (tail rows, padding rows' -0, empty groups' dW); :class:`MXGemm` applies them unless the
    plan's GEMMs write every element (``GemmPlan.fills_every_row``)."""

    def offs(self, rows):
        """The group ends over the GEMM's rows (None: dense)."""
        return

    def gemm_rows(self, x: Tensor, rows, Mp: int) -> Tensor:
        """The forward GEMM's A rows from the layer's input."""
        return x

    def mask_y(self, y: Tensor, rows) -> Tensor:
        """The forward GEMM's output with the rows the layer reads made exact."""
        return y

    def mask_dx(self, dx: Tensor, rows) -> Tensor:
        return self.mask_y(dx, rows)

    def mask_dw(self, dw: Tensor, rows) -> Tensor:
        return dw

    def output(self, y: Tensor, rows, scores, num_tokens: int) -> tuple[Tensor, tuple]:
        """(the layer's output from the GEMM's y, what :meth:`d_scores` needs later)."""
        return y, ()

    def dy_operands(self, dy: Tensor, rows, scores, Mp: int, r: GemmPlan, need_dx: bool, need_dw: bool):
        """dy's four operands (rowwise for dgrad, colwise for wgrad) from the layer's output gradient."""
        return dual_quantize(dy.to(torch.bfloat16).contiguous(), r.backend, r.scaling_mode, r.format, self.offs(rows))

    def dx(self, dx: Tensor, rows) -> Tensor:
        return dx

    def d_scores(self, dout: Tensor, rows, saved: tuple):
        return None


class GroupedRows(RowMap):
    """``mxq.grouped_mm``: rows (offs_p, dest). x's rows move to their padded places (``dest``) on the way in, y's
    and dx's back on the way out, dy's like x's; all exact copies, so everything equals padding by hand."""

    def offs(self, rows):
        return rows[0]

    def gemm_rows(self, x, rows, Mp):
        return pad_rows(x, rows[1], Mp)

    def mask_y(self, y, rows):
        return zero_tail(y, rows[0])

    def mask_dw(self, dw, rows):
        return zero_empty_groups(dw, rows[0])

    def output(self, y, rows, scores, num_tokens):
        return y.index_select(0, rows[1]), ()

    def dy_operands(self, dy, rows, scores, Mp, r, need_dx, need_dw):
        return super().dy_operands(pad_rows(dy.to(torch.bfloat16), rows[1], Mp), rows, scores, Mp, r, need_dx, need_dw)

    def dx(self, dx, rows):
        return dx.index_select(0, rows[1])


class PaddedRows(RowMap):
    """The dispatcher's expert GEMMs: the layer's rows already are the padded row space; rows (offs_p, valid), valid
    (Mp, 1) the rows that hold a routed row (the others give 0)."""

    def offs(self, rows):
        return rows[0]

    def mask_dx(self, dx, rows):
        return keep_rows(dx, rows[1])

    mask_y = mask_dx

    def mask_dw(self, dw, rows):
        return zero_empty_groups(dw, rows[0])


class CombineRows(PaddedRows):
    """The dispatcher's last expert GEMM and the combine: rows (offs_p, valid, dest, index, counts, token_rows). Each
    routed row's y is scaled by its gate score (rounded to bf16) and summed into its token by :func:`mxq.ops.combine`
    (one pass, bitwise a scatter-add); backward quantizes d(routed y) = ``(dout[index].float() * scores).to(bf16)``
    in one routed pass, and d scores by :func:`mxq.ops.combine_score_grad` from the saved y."""

    def mask_y(self, y, rows):
        return y  # the combine reads the routed rows only

    def output(self, y, rows, scores, num_tokens):
        dest, token_rows = rows[2], rows[5]
        return ops.combine(y, dest, token_rows, scale=scores), (y,)

    def dy_operands(self, dy, rows, scores, Mp, r, need_dx, need_dw):
        _, _, _, index, counts, _ = rows
        dout = dy.to(torch.bfloat16).contiguous()
        q = routed_operands(
            r.routed_quantization, dout, index, counts, scores, r.scaling_mode, need_dx, need_dw, r.backend, r.format
        )
        return q.q_row, q.s_row, q.q_col, q.s_col

    def d_scores(self, dout, rows, saved):
        # (T, top_k) in the tokens' layout, then each routed row's entry (token_rows names it).
        dest, token_rows = rows[2], rows[5]
        ds = ops.combine_score_grad(dout.to(torch.bfloat16).contiguous(), saved[0], dest, token_rows)
        return ds.new_empty(ds.numel()).index_copy_(0, token_rows.flatten().long(), ds.flatten())


ROW_MAPS = {"dense": RowMap(), "grouped": GroupedRows(), "padded": PaddedRows(), "combine": CombineRows()}


# ---- the autograd skeleton ----


class MXGemm(torch.autograd.Function):
    """One MXFP8 GEMM layer, y = x · Wᵀ (per group), with its dgrad and wgrad (the module docstring's table).

    apply(x, w, scores, w_operands, x_operands, rows, sizes, plan):

    - ``x`` the layer's input, bf16 contiguous (for pre-quantized input, the autograd handle of its rows);
      ``w`` the weight, bf16 contiguous, (N, K) or (G, N, K); ``scores`` the gate scores (combine) or None;
    - ``w_operands``: w's four operands from :func:`reuse_quantized_weights`, or None (quantized here);
      ``x_operands``: x's four operands quantized beforehand (the dispatcher), or None (quantized here);
    - ``rows``: the row map's index tensors; ``sizes``: (Mp, num_tokens), the GEMM's rows and the output's;
    - ``plan``: a :class:`GemmPlan`.

    Forward quantizes x (rowwise now; colwise, or x itself, saved for wgrad) and W (rowwise now, colwise saved for
    dgrad) and runs the forward GEMM; backward quantizes dy on both axes in one call and runs dgrad and wgrad on the
    saved operands. The row map moves rows in and out; its masks zero what the GEMMs leave unwritten, applied here
    unless the plan's GEMMs write every element."""

    @staticmethod
    def forward(ctx, x, w, scores, w_operands, x_operands, rows, sizes, plan):
        r = plan
        row_map = ROW_MAPS[r.rows]
        need_dx, need_dw, need_ds = ctx.needs_input_grad[:3]
        Mp, num_tokens = sizes
        offs = row_map.offs(rows)
        if x_operands is not None:
            q_x, s_x, q_x_col, s_x_col = x_operands
            x_saved = (q_x_col, s_x_col) if need_dw else ()
        else:
            a = row_map.gemm_rows(x, rows, Mp)
            q_x, s_x, x_saved = activation_operands(a, need_dw, r, offs)
        # One call: W rowwise (forward, now) and W colwise (dgrad, saved instead of W).
        q_w, s_w, q_w_col, s_w_col = w_operands or weight_operands(
            w, r.scaling_mode, r.weight_scaling, r.format, need_dx
        )
        w_saved = (q_w_col, s_w_col) if need_dx else ()
        with no_autocast(x.device.type):
            y = fwd_gemm(q_x, s_x, q_w, s_w, offs, r)
        if not r.fills_every_row:
            y = row_map.mask_y(y, rows)
        out, out_saved = row_map.output(y, rows, scores, num_tokens)
        scores_saved = (scores,) if scores is not None else ()
        groups = {"rows": rows, "scores": scores_saved, "out": out_saved if need_ds else (), "x": x_saved, "w": w_saved}
        ctx.save_for_backward(*(t for group in groups.values() for t in group))
        ctx.group_sizes = {name: len(group) for name, group in groups.items()}
        ctx.plan, ctx.Mp = r, Mp
        return out

    @staticmethod
    def backward(ctx, dout):
        r, Mp = ctx.plan, ctx.Mp
        row_map = ROW_MAPS[r.rows]
        need_dx, need_dw, need_ds = ctx.needs_input_grad[:3]
        saved, start = {}, 0
        tensors = ctx.saved_tensors
        for name, n in ctx.group_sizes.items():
            saved[name], start = tuple(tensors[start : start + n]), start + n
        rows, offs = saved["rows"], row_map.offs(saved["rows"])
        scores = saved["scores"][0] if saved["scores"] else None
        dx = dw = ds = None
        if need_dx or need_dw:
            q_dy, s_dy, q_dy_col, s_dy_col = row_map.dy_operands(dout, rows, scores, Mp, r, need_dx, need_dw)
            with no_autocast(dout.device.type):
                if need_dx:
                    q_w_col, s_w_col = saved["w"]
                    dx = dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs, r)
                    dx = row_map.dx(dx if r.fills_every_row else row_map.mask_dx(dx, rows), rows)
                if need_dw:
                    q_x_col, s_x_col = saved_colwise(saved["x"], r, offs)
                    dw = wgrad_gemm(q_dy_col, s_dy_col, q_x_col, s_x_col, offs, r)
                    dw = dw if r.fills_every_row else row_map.mask_dw(dw, rows)
        if need_ds:
            ds = row_map.d_scores(dout, rows, saved["out"])
        return dx, dw, ds, None, None, None, None, None
