"""MXFP8 grouped GEMM for MoE experts: ``mxq.grouped_mm`` and the ``MXFP8GroupedExperts`` module (docs/training.md).

``grouped_mm(x, w, offs)``: x (M, K) holds tokens sorted by expert, w (G, N, K) one (N, K) weight per expert, offs (G,)
int32 the cumulative group ends along M (non-decreasing, at most M; equal neighbours are an empty group; rows past
offs[-1] are the uncovered tail). Groups may have **any size**: the rows are padded on the device to the MXFP8
alignment of 32 (docs/numerics.md §12's padded row space: a worst-case buffer of roundup(M + 31·G, 32) rows, no host
sync), the GEMMs run on the padded operands with the padded group ends, and the outputs and gradients come back in the
caller's row order — bitwise what padding by hand gives. y (M, N), y_g = x_g · W_gᵀ, computed in bf16 and returned in
x's dtype (autocast's inside an autocast region, like the module it replaces); tail rows of y are 0 and
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

from ._gemm import (
    BLOCK,
    MXGemm,
    check_float_tensor,
    check_multiple,
    format_block,
    gemm_plan,
    grouped_gemm_path,
    layer_weight_operands,
    output_dtype,
    pad_rows,
    padded_row_space,
    use_native_gemm,
    zero_empty_groups,
    zero_tail,
)
from .config import MXFP8Config, check_choice, check_config
from .ops import check_type

__all__ = [
    "GroupedExperts",
    "MXFP8GroupedExperts",
    "bf16_grouped_mm",
    "grouped_gemm_path",
    "grouped_mm",
    "padded_row_space",
]
EXPERT_KINDS = ("swiglu", "linear")


# ---- capability checks and the high-precision reference ----


def bf16_grouped_mm(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    """The high-precision grouped GEMM with :func:`grouped_mm`'s semantics (differentiable through autograd; groups of
    any size, padded the same way): y (M, N), y_g = x_g · W_gᵀ in bf16, tail rows 0, in x's dtype (autocast's inside an
    autocast region). What :class:`GroupedExperts` runs
    and what the tests compare against."""
    _check_grouped_args("mxq.bf16_grouped_mm", x, w, offs)
    M = x.shape[0]
    offs_p, dest, Mp = padded_row_space(offs, M)
    # The masks on the inputs make autograd's gradients exact too: torch._grouped_mm's backward leaves the tail rows
    # of dx unwritten (and, on some devices, an empty group's dW).
    out_dtype = output_dtype(x)
    x = zero_tail(pad_rows(x.to(torch.bfloat16), dest, Mp), offs_p)
    w = zero_empty_groups(w.to(torch.bfloat16), offs_p)
    if grouped_gemm_path(x.device) == "emulated_grouped_mm":
        y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs_p)
    else:
        ends = offs_p.tolist()
        ys, start = [], 0
        for g, end in enumerate(ends):
            ys.append(x[start:end] @ w[g].t())
            start = end
        ys.append(x.new_zeros(Mp - start, w.shape[1]))
        y = torch.cat(ys)
    return zero_tail(y, offs_p).index_select(0, dest).to(out_dtype)


def _check_grouped_args(owner: str, x: Tensor, w: Tensor, offs: Tensor, block: int = BLOCK) -> None:
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
    check_multiple(owner, "K", K, block)
    check_multiple(owner, "N", N, block)
    if offs.device.type == "cpu" and not torch.compiler.is_compiling():
        # The offsets are on the host: check them here, under this op's name (on the GPU, padded_row_space asserts on the
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
    """MXFP8 grouped GEMM, differentiable: y (M, N) with y_g = x_g · W_gᵀ in x's dtype (autocast's inside an
    autocast region) (see the module docstring), with the
    recipe ``config`` (default: ``mxq.MXFP8Config()``).

    x (M, K) tokens sorted by expert, w (G, N, K), offs (G,) int32 cumulative group ends on x's device: groups of any
    size (padded to the format's block, 32 or 128, on the device, no host sync), empty groups and an uncovered tail
    allowed (the tail's output and gradient are 0). K and N multiples of the block (32; 128 for FP8 blockwise, whose
    GEMMs run mxq's CUTLASS kernel on SM90 and an fp32 emulation elsewhere: docs/training.md). x and w are cast to bf16 (inside the autograd graph, so fp32 master
    weights get fp32 gradients).

    A malformed offs raises ValueError on the CPU and fails a device-side assertion on CUDA (module docstring).
    Raises ValueError for a bad shape or device mix; TypeError for x or w not a floating-point tensor, offs not an
    int32 tensor, or a config not a MXFP8Config; RuntimeError for ``gemm="native"`` on a device without MXFP8
    GEMMs."""
    owner = "mxq.grouped_mm"
    config = check_config(owner, config)
    block = format_block(config)
    _check_grouped_args(owner, x, w, offs, block)
    path = grouped_gemm_path(x.device, use_native_gemm(owner, config, x.device), config.format)
    M = x.shape[0]
    offs_p, dest, Mp = padded_row_space(offs.contiguous(), M, block)
    w_bf16 = w.to(torch.bfloat16).contiguous()
    w_operands = layer_weight_operands(w, w_bf16, config)
    y = MXGemm.apply(
        x.to(torch.bfloat16).contiguous(),
        w_bf16,
        None,
        w_operands,
        None,
        (offs_p, dest),
        (Mp, M),
        gemm_plan("grouped", config, path),
    )
    return y.to(output_dtype(x))


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
        config = check_config(owner, config)
        check_multiple(owner, "dim", dim, format_block(config))
        check_multiple(owner, "hidden_dim", hidden_dim, format_block(config))
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


def __getattr__(name: str):
    if name == "padded_rows":
        raise AttributeError(
            "mxq.moe.padded_rows was renamed mxq.moe.padded_row_space (it returns (offs_p, dest, Mp), the padded row "
            "space, not a row count)"
        )
    raise AttributeError(f"module 'mxq.moe' has no attribute {name!r}")
