"""MXFP8 grouped GEMM for MoE experts: ``mxq.grouped_mm`` and the ``MXFP8GroupedExperts`` module (docs/training.md).

``grouped_mm(x, w, offs)``: x (M, K) holds tokens sorted by expert, w (G, N, K) one (N, K) weight per expert, offs (G,)
int32 the cumulative group ends along M (non-decreasing, at most M; equal neighbours are an empty group; rows past
offs[-1] are the uncovered tail). Groups may have **any size**: the rows are padded on the device to the MXFP8
alignment of 32 (docs/numerics.md §12's padded row space: a worst-case buffer of roundup(M + 31·G, 32) rows, no host
sync), the GEMMs run on the padded operands with the padded group ends, and the outputs and gradients come back in the
caller's row order — bitwise what padding by hand gives. y (M, N) bf16, y_g = x_g · W_gᵀ; tail rows of y are 0 and
their rows of dx are 0; an empty group's dW_g is 0. Operands and layouts, per GEMM (on the padded rows):

    GEMM                         A operand                                  B operand
    forward  y_g  = x_g · W_gᵀ    x rowwise, 1x32 along K, M-groups s_row     W_g rowwise along K (quantize_weight q_row,
                                                                              per-expert blocked s_row)
    dgrad    dx_g = dy_g · W_g    dy rowwise, 1x32 along N, M-groups s_row    W_g colwise along N (quantize_weight q_col,
                                                                              per-expert blocked s_col)
    wgrad    dW_g = dy_gᵀ · x_g   dy colwise, 32x1 along M, K-groups s_col    x colwise, 32x1 along M, K-groups s_col

The recipe is a :class:`mxq.MXFP8Config` (``config=``). dy is quantized on both axes by one call (its
``activation_quantization_backend``). W's two operands come from one ``quantize_weight`` call in forward (its
``weight_scaling``); the colwise one is saved for dgrad. Its ``scaling_mode`` is passed explicitly to every op call.

GEMM paths, chosen by a capability check of the device (never by catching a library error):

- CUDA SM100+ (``gemm="auto"`` or ``"native"``): ``torch._scaled_grouped_mm`` on the e4m3 operands with these E8M0
  layouts;
- everywhere else (``gemm="auto"`` below SM100, the CPU, or ``gemm="emulated"``): each operand is dequantized by mxq's
  own ``dequantize`` op (layout ``"m_groups"`` for rowwise token operands and for the per-expert weight scales,
  ``"k_groups"`` for colwise token operands) and the product runs in bf16 with fp32 accumulation, through
  ``torch._grouped_mm`` where it is available for the device (the CPU, CUDA SM90+), else one matmul per group (which
  reads offs on the host, so it synchronizes).

A malformed offs (decreasing, negative, or past M) is never a silent answer: on the CPU it is a ValueError before
anything runs; on CUDA a device-side assertion fails (no host sync, so it surfaces at the next synchronization as a
CUDA error and leaves the CUDA context unusable, as an out-of-range index does in torch); ``mxq.validate_offs`` is the
synchronizing checker for the quantize ops' stricter rule (multiples of 32).

Expert-module interface (``mxq.GroupedExperts`` implements it in bf16; what :func:`mxq.nn.convert` recognizes is in
mxq.nn's docstring):

- ``mxq_experts``: the string ``"swiglu"`` or ``"linear"`` (class or instance attribute) — the opt-in marker;
- parameters: ``"swiglu"``: ``w1`` (G, H, D), ``w2`` (G, D, H), ``w3`` (G, H, D); ``"linear"``: ``weight`` (G, N, K);
  D, H, N and K multiples of 32;
- ``forward(x, offs)``: x (M, D) sorted by expert, offs (G,) int32 as above; returns (M, D) for ``"swiglu"``,
  ``y_g = (silu(x_g W1_gᵀ) * (x_g W3_gᵀ)) W2_gᵀ``, or (M, N) for ``"linear"``, ``y_g = x_g W_gᵀ``; rows past offs[-1]
  give 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import MXFP8Config, check_choice, check_config
from .linear import (
    ATOM_COLS,
    ATOM_ROWS,
    BLOCK,
    activation_operands,
    check_float_tensor,
    check_multiple_of_32,
    dual_quantize,
    layer_weight_operands,
    recipe_args,
    round_up,
    saved_colwise,
    use_native_gemm,
    weight_operands,
)
from .ops import check_type

_ops = torch.ops.mxq
EXPERT_KINDS = ("swiglu", "linear")


# ---- capability checks ----


def bf16_grouped_mm_available(device: torch.device) -> bool:
    """True where torch._grouped_mm runs a bf16 grouped GEMM for ``device`` without reading offs on the host:
    the CPU, and CUDA devices of compute capability 9.0 and above (its CUTLASS kernels)."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    if device.type == "cpu":
        return True
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def grouped_gemm_path(device: torch.device, native: bool = False) -> str:
    """The path :func:`grouped_mm` takes on ``device``: ``"scaled_grouped_mm"`` (native MXFP8, CUDA SM100+),
    ``"emulated_grouped_mm"`` (dequantize + torch._grouped_mm) or ``"emulated_per_group"`` (dequantize + one matmul
    per group)."""
    if native:
        return "scaled_grouped_mm"
    return "emulated_grouped_mm" if bf16_grouped_mm_available(device) else "emulated_per_group"


# ---- groups of any size: the padded row space (docs/numerics.md §12) ----


def padded_rows(offs: Tensor, M: int) -> tuple[Tensor, Tensor, int]:
    """The padded row space of M rows grouped by ``offs`` (any sizes): (offs_p, dest, Mp). Group g's rows move to
    start at ``P_g = Σ_{j<g} roundup(n_j, 32)`` and are followed by its zero padding rows; ``offs_p`` (G,) int32 are
    the padded group ends; the caller's tail rows (past offs[-1]) follow offs_p[-1]; ``dest`` (M,) int64 is the
    padded row of each caller row; ``Mp = roundup(M + 31·G, 32)`` rows hold any offs, so nothing is read on the host.

    A malformed offs (a negative size, a negative start or an end past M) fails a device-side assertion; the indices
    are clamped into range first, so nothing is read or written outside the buffers before it fires."""
    G = offs.shape[0]
    Mp = round_up(M + (BLOCK - 1) * G, BLOCK)
    ends = offs.long()
    sizes = torch.diff(ends, prepend=ends.new_zeros(1))
    torch._assert_async(
        (sizes.min() >= 0) & (ends[-1] <= M),
        "mxq: the grouped GEMM's offs must be non-decreasing, non-negative and at most M",
    )
    padded = (sizes + BLOCK - 1) // BLOCK * BLOCK
    ends_p = torch.cumsum(padded, 0)
    # Each group's rows move by one shift, its padded start minus its start; the tail's by the padded end minus
    # the end.
    shift = torch.cat([(ends_p - padded) - (ends - sizes), ends_p[-1:] - ends[-1:]])
    rows = torch.arange(M, device=offs.device)
    group = torch.searchsorted(ends, rows, right=True)  # G for the tail
    dest = (rows + shift[group]).clamp_(0, Mp - 1)
    return ends_p.to(torch.int32), dest, Mp


def _pad(t: Tensor, dest: Tensor, Mp: int) -> Tensor:
    """(Mp, C): the rows of t (M, C) at their padded places, zeros elsewhere (an exact copy: each row is written
    once)."""
    return t.new_zeros(Mp, t.shape[1]).index_copy_(0, dest, t)


# ---- masks: the tail rows and the empty groups ----


def _tail_mask(M: int, offs: Tensor) -> Tensor:
    """(M, 1) bool: rows inside a group (no host sync: compares with offs[-1] on the device)."""
    return (torch.arange(M, device=offs.device, dtype=torch.int32) < offs[-1]).unsqueeze(1)


def _zero_tail(y: Tensor, offs: Tensor) -> Tensor:
    # torch.where, not a multiply: the GEMMs leave the tail rows unwritten (any bytes, NaN included).
    return torch.where(_tail_mask(y.shape[0], offs), y, torch.zeros((), dtype=y.dtype, device=y.device))


def _zero_empty_groups(dw: Tensor, offs: Tensor) -> Tensor:
    sizes = torch.diff(offs, prepend=offs.new_zeros(1))
    return torch.where((sizes > 0).view(-1, 1, 1), dw, torch.zeros((), dtype=dw.dtype, device=dw.device))


# ---- bf16 grouped GEMMs (the emulation's back end, and the high-precision reference) ----


def _bf16_grouped(a: Tensor, b: Tensor, offs: Tensor, path: str) -> Tensor:
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


def bf16_grouped_mm(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """The high-precision grouped GEMM with :func:`grouped_mm`'s semantics (differentiable through autograd; groups of
    any size, padded the same way): bf16 y (M, N), y_g = x_g · W_gᵀ, tail rows 0. What :class:`GroupedExperts` runs
    and what the tests compare against."""
    _check_grouped_args("mxq.bf16_grouped_mm", x, w, offs)
    M = x.shape[0]
    offs_p, dest, Mp = padded_rows(offs, M)
    # The masks on the inputs make autograd's gradients exact too: torch._grouped_mm's backward leaves the tail rows
    # of dx unwritten (and, on some devices, an empty group's dW).
    x = _zero_tail(_pad(x.to(torch.bfloat16), dest, Mp), offs_p)
    w = _zero_empty_groups(w.to(torch.bfloat16), offs_p)
    if bf16_grouped_mm_available(x.device):
        y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs_p)
    else:
        ends = offs_p.tolist()
        ys, start = [], 0
        for g, end in enumerate(ends):
            ys.append(x[start:end] @ w[g].t())
            start = end
        ys.append(x.new_zeros(Mp - start, w.shape[1]))
        y = torch.cat(ys)
    return _zero_tail(y, offs_p).index_select(0, dest)


# ---- MXFP8 operands ----


def _dequantize_experts(q: Tensor, s: Tensor) -> Tensor:
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
    return _ops.dequantize(q.reshape(G * R, C), s_mg, ends, "m_groups").view(G, R, C)


def _fwd_gemm(q_x, s_x, q_w, s_w, offs, path):
    """y (M, N) = x_g · W_gᵀ: x rowwise (M-groups), W rowwise (G, N, K) along K."""
    if path == "scaled_grouped_mm":
        # B (G, K, N) column-major: q_w.transpose(-2, -1) has strides (N·K, 1, K).
        return torch._scaled_grouped_mm(q_x, q_w.transpose(-2, -1), s_x, s_w, offs=offs, out_dtype=torch.bfloat16)
    x = _ops.dequantize(q_x, s_x, offs, "m_groups")
    w = _dequantize_experts(q_w, s_w)  # (G, N, K)
    return _bf16_grouped(x, w.transpose(-2, -1), offs, path)


def _dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs, path):
    """dx (M, K) = dy_g · W_g: dy rowwise (M-groups), W colwise along N: q_w_col logical (G, N, K), strides
    (N·K, 1, N) over the physical (G, K, N)."""
    if path == "scaled_grouped_mm":
        return torch._scaled_grouped_mm(q_dy, q_w_col, s_dy, s_w_col, offs=offs, out_dtype=torch.bfloat16)
    dy = _ops.dequantize(q_dy, s_dy, offs, "m_groups")
    w_t = _dequantize_experts(q_w_col.transpose(-2, -1), s_w_col)  # (G, K, N)
    return _bf16_grouped(dy, w_t.transpose(-2, -1), offs, path)


def _wgrad_gemm(q_dy_col, s_dy_col, q_x_col, s_x_col, offs, path):
    """dW (G, N, K) = dy_gᵀ · x_g: dy colwise (q_dy_col.t() is (N, M)), x colwise (q_x_col logical (M, K), strides
    (1, M)), both with K-groups scales."""
    if path == "scaled_grouped_mm":
        return torch._scaled_grouped_mm(q_dy_col.t(), q_x_col, s_dy_col, s_x_col, offs=offs, out_dtype=torch.bfloat16)
    dy_t = _ops.dequantize(q_dy_col.t(), s_dy_col, offs, "k_groups")  # (N, M), tail tokens 0
    x_t = _ops.dequantize(q_x_col.t(), s_x_col, offs, "k_groups")  # (K, M), tail tokens 0
    return _bf16_grouped(dy_t, x_t.t(), offs, path)


class _MXFP8GroupedMM(torch.autograd.Function):
    """The MXFP8 grouped GEMM on the padded row space: x's rows are moved to their padded places (``dest``) on the
    way in, y's and dx's rows back on the way out; in backward, dy's rows are padded the same way. Both moves are
    exact copies, so everything equals padding by hand."""

    @staticmethod
    def forward(ctx, x, w, w_operands, offs, backend, x_colwise, scaling_mode, weight_scaling, path):
        # x (M, K), w (G, N, K): bf16 contiguous; w_operands: w's, from reuse_quantized_weights, or None; offs
        # (G,) int32 on x's device, groups of any size.
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        offs_p, dest, Mp = padded_rows(offs, x.shape[0])
        x_p = _pad(x, dest, Mp)
        q_x, s_x, x_saved = activation_operands(x_p, need_dw, backend, x_colwise, scaling_mode, offs_p)
        q_w, s_w, q_w_col, s_w_col = w_operands or weight_operands(w, scaling_mode, weight_scaling, colwise=need_dx)
        w_saved = (q_w_col, s_w_col) if need_dx else ()
        ctx.save_for_backward(offs_p, dest, *x_saved, *w_saved)
        ctx.config = (backend, scaling_mode, path, Mp, len(x_saved), need_dx, need_dw)
        return _zero_tail(_fwd_gemm(q_x, s_x, q_w, s_w, offs_p, path), offs_p).index_select(0, dest)

    @staticmethod
    def backward(ctx, dy):
        backend, scaling_mode, path, Mp, n_x, need_dx, need_dw = ctx.config
        offs_p, dest, *rest = ctx.saved_tensors
        x_saved, w_saved = rest[:n_x], rest[n_x:]
        dy_p = _pad(dy.to(torch.bfloat16), dest, Mp)
        # dy on both axes, one call: rowwise with M-groups s_row (dgrad), colwise with K-groups s_col (wgrad).
        q_dy, s_dy, q_dy_col, s_dy_col = dual_quantize(dy_p, backend, scaling_mode, offs_p)
        dx = dw = None
        if need_dx:
            q_w_col, s_w_col = w_saved
            dx = _zero_tail(_dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs_p, path), offs_p).index_select(0, dest)
        if need_dw:
            q_x_col, s_x_col = saved_colwise(x_saved, scaling_mode, offs_p)
            dw = _zero_empty_groups(_wgrad_gemm(q_dy_col, s_dy_col, q_x_col, s_x_col, offs_p, path), offs_p)
        return dx, dw, None, None, None, None, None, None, None


def _check_grouped_args(owner: str, x: Tensor, w: Tensor, offs: Tensor) -> None:
    check_float_tensor(owner, "x", x)
    check_float_tensor(owner, "w", w)
    check_type(owner, "offs", offs, Tensor)
    if offs.dtype != torch.int32:
        raise TypeError(f"{owner}: offs must be torch.int32, got {offs.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{owner}: x must be 2-D (M, K) tokens sorted by expert, got shape {tuple(x.shape)}")
    if w.dim() != 3:
        raise ValueError(f"{owner}: w must be 3-D (G, N, K) expert weights, got shape {tuple(w.shape)}")
    if offs.dim() != 1:
        raise ValueError(f"{owner}: offs must be 1-D (G cumulative group ends), got shape {tuple(offs.shape)}")
    G, N, K = w.shape
    if offs.shape[0] != G or G == 0:
        raise ValueError(f"{owner}: offs must hold one end offset per expert (G = {G}), got {offs.shape[0]}")
    if x.shape[1] != K:
        raise ValueError(f"{owner}: x (M, K) and w (G, N, K) must share K, got x {tuple(x.shape)}, w {tuple(w.shape)}")
    if offs.device != x.device or w.device != x.device:
        raise ValueError(f"{owner}: x, w and offs must be on one device, got {x.device}, {w.device}, {offs.device}")
    check_multiple_of_32(owner, "K", K)
    check_multiple_of_32(owner, "N", N)
    if offs.device.type == "cpu" and not torch.compiler.is_compiling():
        # The offsets are on the host: check them here, under this op's name (on the GPU, padded_rows asserts on the
        # device).
        M = x.shape[0]
        ends = offs.tolist()
        for g, (prev, end) in enumerate(zip([0, *ends], ends)):
            if end < prev:
                rule = "is negative" if g == 0 else f"is less than offs[{g - 1}]={prev} (offs must be non-decreasing)"
                raise ValueError(f"{owner}: offs[{g}]={end} {rule}")
            if end > M:
                raise ValueError(f"{owner}: offs[{g}]={end} exceeds M={M}")


def grouped_mm(x: Tensor, w: Tensor, offs: Tensor, *, config: MXFP8Config | None = None) -> Tensor:
    """MXFP8 grouped GEMM, differentiable: bf16 y (M, N) with y_g = x_g · W_gᵀ (see the module docstring), with the
    recipe ``config`` (default: ``mxq.MXFP8Config()``).

    x (M, K) tokens sorted by expert, w (G, N, K), offs (G,) int32 cumulative group ends on x's device: groups of any
    size (padded to 32 on the device, no host sync), empty groups and an uncovered tail allowed (the tail's output and
    gradient are 0). K and N multiples of 32. x and w are cast to bf16 (inside the autograd graph, so fp32 master
    weights get fp32 gradients).

    A malformed offs raises ValueError on the CPU and fails a device-side assertion on CUDA (module docstring).
    Raises ValueError for a bad shape or device mix; TypeError for x or w not a floating-point tensor, offs not an
    int32 tensor, or a config not a MXFP8Config; RuntimeError for ``gemm="native"`` on a device without MXFP8
    GEMMs."""
    owner = "mxq.grouped_mm"
    config = check_config(owner, config)
    _check_grouped_args(owner, x, w, offs)
    path = grouped_gemm_path(x.device, use_native_gemm(owner, config, x.device))
    x = x.to(torch.bfloat16).contiguous()
    w_bf16 = w.to(torch.bfloat16).contiguous()
    return _MXFP8GroupedMM.apply(
        x,
        w_bf16,
        layer_weight_operands(w, w_bf16, config.scaling_mode, config.weight_scaling),
        offs.contiguous(),
        *recipe_args(config),
        path,
    )


# ---- expert modules ----


def is_expert_module(module: nn.Module) -> bool:
    """True when ``module`` declares the expert-module interface (``mxq_experts`` in ("swiglu", "linear"))."""
    return getattr(module, "mxq_experts", None) in EXPERT_KINDS


def expert_parameter_names(kind: str) -> tuple[str, ...]:
    return ("w1", "w2", "w3") if kind == "swiglu" else ("weight",)


class GroupedExperts(nn.Module):
    """G experts in high precision, implementing the expert-module interface (module docstring).

    ``kind="swiglu"``: w1 (G, hidden_dim, dim), w2 (G, dim, hidden_dim), w3 (G, hidden_dim, dim);
    ``y_g = (silu(x_g W1_gᵀ) * (x_g W3_gᵀ)) W2_gᵀ``, (M, dim) -> (M, dim).
    ``kind="linear"``: weight (G, hidden_dim, dim); ``y_g = x_g W_gᵀ``, (M, dim) -> (M, hidden_dim).

    forward(x, offs) with x (M, dim) sorted by expert and offs (G,) int32 cumulative group ends; tail rows give 0.
    The products run in bf16 (fp32 accumulation) through :func:`bf16_grouped_mm`.
    """

    mxq_experts = "swiglu"

    def __init__(
        self, num_experts: int, dim: int, hidden_dim: int, *, kind: str = "swiglu", device=None, dtype=None
    ) -> None:
        super().__init__()
        check_choice(type(self).__name__, "kind", kind, EXPERT_KINDS)
        self.mxq_experts = kind
        self.num_experts, self.dim, self.hidden_dim = num_experts, dim, hidden_dim
        f = {"device": device, "dtype": dtype}
        if kind == "swiglu":
            self.w1 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim, **f))
            self.w2 = nn.Parameter(torch.empty(num_experts, dim, hidden_dim, **f))
            self.w3 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim, **f))
        else:
            self.weight = nn.Parameter(torch.empty(num_experts, hidden_dim, dim, **f))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name in expert_parameter_names(self.mxq_experts):
            p = getattr(self, name)
            if p.device.type != "meta":
                nn.init.normal_(p, std=1.0 / math.sqrt(p.shape[-1]))

    def _mm(self, x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
        return bf16_grouped_mm(x, w, offs)

    def forward(self, x: Tensor, offs: Tensor) -> Tensor:
        if self.mxq_experts == "linear":
            return self._mm(x, self.weight, offs)
        h = F.silu(self._mm(x, self.w1, offs)) * self._mm(x, self.w3, offs)
        return self._mm(h, self.w2, offs)

    def extra_repr(self) -> str:
        return (
            f"kind={self.mxq_experts!r}, num_experts={self.num_experts}, dim={self.dim}, hidden_dim={self.hidden_dim}"
        )


class MXFP8GroupedExperts(GroupedExperts):
    """:class:`GroupedExperts` whose grouped GEMMs (forward, dgrad, wgrad) run on MXFP8 operands through
    :func:`grouped_mm` with the recipe ``config`` (default: ``mxq.MXFP8Config()``), kept as ``self.mxfp8_config``.
    dim and hidden_dim must be multiples of 32 (ValueError here); groups may have any size."""

    mxfp8_config: MXFP8Config

    def __init__(
        self,
        num_experts: int,
        dim: int,
        hidden_dim: int,
        *,
        kind: str = "swiglu",
        device=None,
        dtype=None,
        config: MXFP8Config | None = None,
    ) -> None:
        owner = "MXFP8GroupedExperts"
        check_multiple_of_32(owner, "dim", dim)
        check_multiple_of_32(owner, "hidden_dim", hidden_dim)
        config = check_config(owner, config)
        super().__init__(num_experts, dim, hidden_dim, kind=kind, device=device, dtype=dtype)
        self.mxfp8_config = config

    @classmethod
    def from_experts(
        cls, experts: nn.Module, *, share_parameters: bool = False, config: MXFP8Config | None = None
    ) -> MXFP8GroupedExperts:
        """An MXFP8GroupedExperts holding ``experts``' parameters (any module with the expert-module interface):
        copies (default), or with ``share_parameters=True`` the same Parameter objects."""
        kind = getattr(experts, "mxq_experts", None)
        if kind not in EXPERT_KINDS:
            raise ValueError(
                f'MXFP8GroupedExperts.from_experts: the module must declare mxq_experts = "swiglu" or "linear", '
                f"got {kind!r}"
            )
        dims = expert_dims(experts)
        params = {n: getattr(experts, n) for n in expert_parameter_names(kind)}
        first = next(iter(params.values()))
        m = cls(
            *dims,
            kind=kind,
            device="meta" if share_parameters else first.device,
            dtype=first.dtype,
            config=config,
        )
        for n, p in params.items():
            if share_parameters:
                setattr(m, n, p)
            else:
                with torch.no_grad():
                    getattr(m, n).copy_(p)
        return m

    def _mm(self, x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
        return grouped_mm(x, w, offs, config=self.mxfp8_config)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, config={self.mxfp8_config}"


def expert_dims(experts: nn.Module) -> tuple[int, int, int]:
    """(num_experts, dim, hidden_dim) of a module with the expert-module interface, read from its parameters;
    ValueError if they are missing, not 3-D or inconsistent."""
    kind = getattr(experts, "mxq_experts", None)
    names = expert_parameter_names(kind)
    shapes = {}
    for n in names:
        p = getattr(experts, n, None)
        if not isinstance(p, Tensor) or p.dim() != 3:
            got = "missing" if p is None else f"shape {tuple(p.shape)}" if isinstance(p, Tensor) else type(p).__name__
            raise ValueError(f"expert module ({kind}): parameter {n} must be a 3-D tensor, got {got}")
        shapes[n] = tuple(p.shape)
    if kind == "linear":
        G, H, D = shapes["weight"]
        return G, D, H
    G, H, D = shapes["w1"]
    if shapes["w3"] != (G, H, D) or shapes["w2"] != (G, D, H):
        raise ValueError(
            f"expert module (swiglu): w1 (G, H, D), w2 (G, D, H) and w3 (G, H, D) must agree, got w1 {shapes['w1']}, "
            f"w2 {shapes['w2']}, w3 {shapes['w3']}"
        )
    return G, D, H
