"""The token dispatcher of an MoE layer: routed tokens in, expert-sorted and quantized in one pass (in the recipe's
format: MXFP8, or FP8 blockwise with every expert padded to 128), and back (docs/training.md, "The token dispatcher").

    d = mxq.TokenDispatcher(num_experts, config=mxq.MXFP8Config())
    routed = d.dispatch(x, scores, expert_ids)         # x (T, D); scores, expert_ids (T, top_k): a router's top-k
    out = d.swiglu(routed, w1, w2, w3)                  # (T, D): SwiGLU experts, scores applied, tokens combined
    # or, piece by piece:
    h = F.silu(d.grouped_mm(routed, w1)) * d.grouped_mm(routed, w3)   # (Mp, H) over the padded row space
    out = d.combine_mm(routed, h, w2)                   # the last expert GEMM and the combine, one autograd node
    out = d.combine(routed, y_padded)                   # the combine alone, for any (Mp, D) expert output

Routing: the T·top_k (token, choice) pairs sorted by expert (a stable sort, so a token's rows keep their order);
routed row r is token ``index[r]`` (``argsort(expert_ids.flatten(), stable=True) // top_k``) with gate score
``scores[r]``; expert e has ``counts[e]`` rows. The experts work on the **padded row space** of docs/numerics.md §12
(Mp = roundup(N + 31·E, 32) rows, expert e's rows from P_e = Σ_{j<e} roundup(counts_j, 32), routed row r at padded
row ``dest[r]``, zero padding rows, an uncovered tail), so every group is a multiple of 32 with no host sync.

What each pass computes (the rows a GEMM gives for padding and tail rows are set to 0, so they never leak):

- ``dispatch`` quantizes the routed x **once**, on both axes: ``quantize_routed(x, index, counts)`` gathers, pads and
  writes the rowwise operand (M-groups scales: the w1 and w3 forward GEMMs read it) and the colwise operand (K-groups
  scales: saved for the w1 and w3 wgrads). No bf16 copy of the routed rows is made and x is not quantized again.
  Backward: the padded dgrads of every GEMM that read the routed x (summed by autograd over the padded rows) go back
  to the tokens by :func:`mxq.combine` (a warp per token; bitwise the deterministic ``index_put_(accumulate=True)``).
- ``grouped_mm(routed, w)`` is the grouped GEMM on the pre-quantized operands (mxq.moe's operand table); backward
  quantizes its incoming padded gradient on both axes in one call, as ``mxq.grouped_mm`` does.
- ``combine_mm(routed, h, w)``: y = h·Wᵀ per expert over the padded rows, then per routed row
  ``(y[dest[r]].float() * scores[r]).to(bf16)`` summed into token ``index[r]`` by :func:`mxq.combine` (bitwise the
  scatter-add). Backward quantizes d(routed y) = ``(dout[index[r]].float() * scores[r]).to(bf16)`` **in one pass,
  gate scores applied** (``quantize_routed(dout, index, counts, scale=scores)``): rowwise for W's dgrad, colwise for
  W's wgrad. The score gradient ``d scores[r] = Σ_d dout[index[r], d] · y[dest[r], d]`` in fp32 is
  :func:`mxq.combine_score_grad` (its own fixed summation order, docs/numerics.md §14).

Outputs and gradients (x and every weight) are **bitwise** those of the composed path, and d scores within fp32
rounding of it (torch's row sum adds the same products in another order): x[index] →
mxq.grouped_mm per expert GEMM (which pads and unpads) → the scale multiply rounded to bf16 →
``index_put_(accumulate=True)`` into (T, D) bf16. The routed math runs in bf16 (x is cast to bf16 first); the
combined output comes back in x's dtype (autocast's when dispatch runs inside an autocast region), as the layer it
replaces returns it.

``routed_quantization`` picks the routed quantization: ``"fused"`` (default) is mxq's one-pass op
``mxq.quantize_routed``; ``"composed"`` is :func:`quantize_routed_composed`, the same bytes composed from torch ops
(index gather, scale multiply, pad copy) and ``mxq.quantize``, kept as the baseline and the test oracle (the name
matches ``mxq.quantize``'s ``backend="composed"``; it was ``"unfused"``).

The GEMMs and their autograd Function are mxq._gemm's (shared with mxq.linear and mxq.moe); this module adds the
routing (:func:`route`), the dispatch's own autograd node and the :class:`TokenDispatcher` that strings them together.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ops
from ._gemm import (
    ROUTED_QUANTIZATIONS,
    MXGemm,
    check_float_tensor,
    format_block,
    gemm_plan,
    grouped_gemm_path,
    layer_weight_operands,
    output_dtype,
    quantize_routed_composed,
    routed_operands,
    use_native_gemm,
)
from .config import MXFP8Config, check_choice, check_config
from .ops import check_type

__all__ = [
    "ROUTED_QUANTIZATIONS",
    "RoutedTokens",
    "Routing",
    "TokenDispatcher",
    "check_routed_quantization",
    "quantize_routed_composed",
    "route",
]


class RoutedTokens(NamedTuple):
    """The dispatched tokens (from :meth:`TokenDispatcher.dispatch`), over the padded row space of Mp rows.

    ``x``: the autograd handle of the routed input, shape (Mp, D) (its values are not materialized; the GEMMs read
    the quantized operands below; its gradient is the padded dgrad, which dispatch's backward scatter-adds to the
    tokens). ``q_row``/``s_row`` (M-groups) and ``q_col``/``s_col`` (K-groups): the routed x quantized on both axes.
    ``offs_p`` (E,) int32 padded group ends; ``dest`` (N,) int32 padded row of each routed row; ``valid`` (Mp, 1)
    bool, the rows that hold a routed row; ``index`` (N,) int64 source token of each routed row; ``token_rows``
    (T, top_k) int32 the routed row of each (token, choice); ``scores`` (N,) fp32 gate score of each routed row
    (differentiable); ``counts`` (E,) int64 rows per expert; ``num_tokens`` T; ``dtype`` the combined output's dtype
    (x's, or autocast's inside an autocast region)."""

    x: Tensor
    q_row: Tensor
    s_row: Tensor
    q_col: Tensor
    s_col: Tensor
    offs_p: Tensor
    dest: Tensor
    valid: Tensor
    index: Tensor
    token_rows: Tensor
    scores: Tensor
    counts: Tensor
    num_tokens: int
    dtype: torch.dtype


# ---- routing ----


def check_routing_args(owner: str, x, scores, expert_ids, num_experts: int, block: int) -> None:
    """The dispatch's argument checks: x (T, D) floating point with D a multiple of the format's ``block``, scores and expert_ids
    (T, top_k), expert_ids integer (on the CPU, also in [0, num_experts)), all on one device."""
    check_float_tensor(owner, "x", x)
    check_float_tensor(owner, "scores", scores)
    check_type(owner, "expert_ids", expert_ids, Tensor)
    if x.dim() != 2:
        raise ValueError(f"{owner}: x must be 2-D (T, D), got shape {tuple(x.shape)}")
    T, D = x.shape
    if expert_ids.dim() != 2 or expert_ids.shape[0] != T or tuple(scores.shape) != tuple(expert_ids.shape):
        raise ValueError(
            f"{owner}: scores and expert_ids must both have shape (T, top_k) with T = {T}, got "
            f"{tuple(scores.shape)} and {tuple(expert_ids.shape)}"
        )
    if expert_ids.dtype.is_floating_point or expert_ids.dtype in (torch.bool, torch.complex64, torch.complex128):
        raise TypeError(f"{owner}: expert_ids must be an integer tensor, got {expert_ids.dtype}")
    if scores.device != x.device or expert_ids.device != x.device:
        raise ValueError(
            f"{owner}: x, scores and expert_ids must be on one device, got {x.device}, {scores.device}, "
            f"{expert_ids.device}"
        )
    if D % block:
        raise ValueError(f"{owner}: D (x.shape[1]) must be a multiple of {block}, got {D}")
    if x.device.type == "cpu" and expert_ids.numel() and not torch.compiler.is_compiling():
        lo, hi = int(expert_ids.min()), int(expert_ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"{owner}: expert_ids must be in [0, {num_experts}), got values from {lo} to {hi}")


class Routing(NamedTuple):
    """A top-k routing in expert-sorted order (:func:`route`): ``index`` (N,) int64 the source token of each routed
    row, ``counts`` (E,) int64 rows per expert, ``scores`` (N,) fp32 the gate score of each routed row (differentiable),
    ``token_rows`` (T, top_k) int32 the routed row of each (token, choice) pair (the inverse of the sort)."""

    index: Tensor
    counts: Tensor
    scores: Tensor
    token_rows: Tensor


def route(scores: Tensor, expert_ids: Tensor, num_experts: int) -> Routing:
    """The :class:`Routing` of a top-k routing, no host sync: the T·top_k (token, choice) pairs sorted by expert
    (stable, so a token's rows keep their order)."""
    T, top_k = expert_ids.shape
    flat = expert_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    index = order // top_k
    # Rows per expert from the sorted ids (no atomics).
    ends = torch.searchsorted(flat.index_select(0, order), torch.arange(num_experts, device=flat.device), right=True)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    rows = torch.arange(order.shape[0], device=order.device, dtype=torch.int32)
    token_rows = torch.empty_like(rows).scatter_(0, order, rows).view(T, top_k)
    return Routing(index, counts, scores.reshape(-1).float()[order], token_rows)


class _Dispatch(torch.autograd.Function):
    """x (T, K) bf16 -> (handle (Mp, K), the four quantized operands, offs_p, dest, valid); backward scatter-adds the
    handle's padded gradient to the tokens."""

    @staticmethod
    def forward(ctx, x, index, counts, token_rows, how, scaling_mode, backend, format):
        q_row, s_row, q_col, s_col, offs_p, dest = routed_operands(
            how, x, index, counts, None, scaling_mode, True, True, backend, format
        )
        Mp = q_row.shape[0]
        valid = torch.zeros(Mp, 1, dtype=torch.bool, device=x.device).index_fill_(0, dest.long(), True)
        # The handle: an (Mp, K) tensor with no storage of its own (one element, expanded), only there to carry the
        # padded gradient back.
        handle = x.new_zeros(()).expand(Mp, x.shape[1])
        ctx.mark_non_differentiable(q_row, s_row, q_col, s_col, offs_p, dest, valid)
        ctx.save_for_backward(dest, token_rows)
        return handle, q_row, s_row, q_col, s_col, offs_p, dest, valid

    @staticmethod
    def backward(ctx, d_handle, *_):
        dest, token_rows = ctx.saved_tensors
        # Each token's padded-row gradients summed in one pass, bitwise what autograd's backward of x[index] gives
        # (a deterministic accumulate into zeros, docs/numerics.md §14).
        dx = ops.combine(d_handle.to(torch.bfloat16).contiguous(), dest, token_rows)
        return dx, None, None, None, None, None, None, None


def combine(routed: RoutedTokens, y: Tensor) -> Tensor:
    """(T, N) in routed.dtype from any expert output y (Mp, N) over the padded rows: ``(y[dest[r]].float() *
    scores[r]).to(bf16)`` scatter-added to token index[r] (plain autograd)."""
    y_scaled = (y.to(torch.bfloat16).index_select(0, routed.dest).float() * routed.scores.unsqueeze(1)).to(
        torch.bfloat16
    )
    out = y_scaled.new_zeros(routed.num_tokens, y.shape[1]).index_put_((routed.index,), y_scaled, accumulate=True)
    return out.to(routed.dtype)


# ---- the dispatcher ----


def check_routed_quantization(owner: str, value) -> None:
    """TypeError for a value that is not a str, ValueError for one outside ``ROUTED_QUANTIZATIONS`` (the old name
    "unfused" says what it became)."""
    if value == "unfused":
        raise ValueError(f'{owner}: routed_quantization "unfused" was renamed "composed" (the same baseline)')
    check_choice(owner, "routed_quantization", value, ROUTED_QUANTIZATIONS)


class TokenDispatcher:
    """Token dispatcher for ``num_experts`` local experts with the recipe ``config`` (default:
    ``mxq.MXFP8Config()``): see the module docstring. Not an nn.Module (no parameters or buffers); one object serves
    every call. ``routed_quantization``: ``"fused"`` (default) or ``"composed"``."""

    def __init__(
        self, num_experts: int, *, config: MXFP8Config | None = None, routed_quantization: str = "fused"
    ) -> None:
        owner = "mxq.TokenDispatcher"
        check_type(owner, "num_experts", num_experts, int)
        if num_experts < 1:
            raise ValueError(f"{owner}: num_experts must be at least 1, got {num_experts}")
        check_routed_quantization(owner, routed_quantization)
        self.num_experts = num_experts
        self.config = check_config(owner, config)
        self.routed_quantization = routed_quantization

    def __repr__(self) -> str:
        return (
            f"mxq.TokenDispatcher(num_experts={self.num_experts}, routed_quantization="
            f'"{self.routed_quantization}", config={self.config})'
        )

    def wire_meshes(self, *, ep_mesh=None) -> None:
        """TorchTitan's dispatcher hook: this dispatcher is local (no expert parallelism); an EP mesh is an error."""
        if ep_mesh is not None:
            raise ValueError(
                "mxq.TokenDispatcher is a local dispatcher (expert parallel degree 1), got an expert-parallel mesh; "
                "with TorchTitan's expert parallelism, convert with MXQConverter.Config(token_dispatcher=False)"
            )

    def dispatch(self, x: Tensor, scores: Tensor, expert_ids: Tensor) -> RoutedTokens:
        """x (T, D) floating point; scores (T, top_k) the gate score of each choice (used in fp32); expert_ids
        (T, top_k) integer expert of each choice, in [0, num_experts) (a token may pick an expert twice). Returns the
        routed tokens, quantized (module docstring). D must be a multiple of the format's block (32; 128 for FP8
        blockwise)."""
        check_routing_args(
            "mxq.TokenDispatcher.dispatch", x, scores, expert_ids, self.num_experts, format_block(self.config)
        )
        index, counts, sorted_scores, token_rows = route(scores, expert_ids, self.num_experts)
        c = self.config
        handle, *operands = _Dispatch.apply(
            x.to(torch.bfloat16).contiguous(),
            index,
            counts,
            token_rows,
            self.routed_quantization,
            c.scaling_mode,
            c.activation_quantization_backend,
            c.format,
        )
        return RoutedTokens(handle, *operands, index, token_rows, sorted_scores, counts, x.shape[0], output_dtype(x))

    # ---- expert GEMMs on the padded rows ----

    def _plan(self, owner: str, rows: str, routed: RoutedTokens):
        device = routed.x.device
        path = grouped_gemm_path(device, use_native_gemm(owner, self.config, device), self.config.format)
        return gemm_plan(rows, self.config, path, self.routed_quantization)

    def _weight(self, owner: str, w: Tensor, K: int, name: str = "w"):
        """(w in bf16, its operands from reuse_quantized_weights or None), after checking w (E, N, K)."""
        check_float_tensor(owner, name, w)
        if w.dim() != 3 or w.shape[0] != self.num_experts or w.shape[2] != K:
            raise ValueError(f"{owner}: {name} must have shape (E={self.num_experts}, N, K={K}), got {tuple(w.shape)}")
        block = format_block(self.config)
        if w.shape[1] % block:
            raise ValueError(f"{owner}: {name}'s N must be a multiple of {block}, got {w.shape[1]}")
        w_bf16 = w.to(torch.bfloat16).contiguous()
        return w_bf16, layer_weight_operands(w, w_bf16, self.config)

    @staticmethod
    def _check_padded(owner: str, name: str, t: Tensor, routed: RoutedTokens) -> None:
        check_float_tensor(owner, name, t)
        Mp = routed.valid.shape[0]
        if t.dim() != 2 or t.shape[0] != Mp:
            raise ValueError(f"{owner}: {name} must be 2-D over the {Mp} padded rows, got shape {tuple(t.shape)}")

    def grouped_mm(self, routed: RoutedTokens, w: Tensor) -> Tensor:
        """bf16 (Mp, N): the dispatched x times each expert's W_gᵀ, w (E, N, D), from the operands dispatch
        quantized (no quantization of x here); padding and tail rows 0."""
        owner = "mxq.TokenDispatcher.grouped_mm"
        w_bf16, w_operands = self._weight(owner, w, routed.q_row.shape[1])
        x_operands = (routed.q_row, routed.s_row, routed.q_col, routed.s_col)
        Mp = routed.valid.shape[0]
        rows = (routed.offs_p, routed.valid)
        how = self._plan(owner, "padded", routed)
        return MXGemm.apply(routed.x, w_bf16, None, w_operands, x_operands, rows, (Mp, Mp), how)

    def combine_mm(self, routed: RoutedTokens, h: Tensor, w: Tensor) -> Tensor:
        """(T, N) in routed.dtype: the experts' last GEMM y = h_g · W_gᵀ (h (Mp, H) over the padded rows, w (E, N, H)),
        each routed row scaled by its gate score and scatter-added to its token; backward quantizes d(routed y) with
        the scores in one pass (module docstring)."""
        owner = "mxq.TokenDispatcher.combine_mm"
        self._check_padded(owner, "h", h, routed)
        w_bf16, w_operands = self._weight(owner, w, h.shape[1])
        block = format_block(self.config)
        if h.shape[1] % block:
            raise ValueError(f"{owner}: h's width must be a multiple of {block}, got {h.shape[1]}")
        rows = (routed.offs_p, routed.valid, routed.dest, routed.index, routed.counts, routed.token_rows)
        sizes = (routed.valid.shape[0], routed.num_tokens)
        how = self._plan(owner, "combine", routed)
        h_bf16 = h.to(torch.bfloat16).contiguous()
        out = MXGemm.apply(h_bf16, w_bf16, routed.scores, w_operands, None, rows, sizes, how)
        return out.to(routed.dtype)

    def combine(self, routed: RoutedTokens, y: Tensor) -> Tensor:
        """(T, N) in routed.dtype from any expert output y (Mp, N) over the padded rows: ``(y[dest[r]].float() *
        scores[r]).to(bf16)`` scatter-added to token index[r]. Plain autograd (its backward hands the producer of y a
        bf16 gradient); :meth:`combine_mm` is the form whose backward quantizes in one routed pass."""
        self._check_padded("mxq.TokenDispatcher.combine", "y", y, routed)
        return combine(routed, y)

    def swiglu(self, routed: RoutedTokens, w1: Tensor, w2: Tensor, w3: Tensor) -> Tensor:
        """(T, D) in routed.dtype: SwiGLU experts ``(silu(x W1ᵀ) * (x W3ᵀ)) W2ᵀ`` on the dispatched tokens, w1 and w3
        (E, H, D), w2 (E, D, H), combined with the gate scores."""
        h = F.silu(self.grouped_mm(routed, w1)) * self.grouped_mm(routed, w3)
        return self.combine_mm(routed, h, w2)

    def experts(self, routed: RoutedTokens, experts) -> Tensor:
        """The experts of a module with mxq's expert-module interface (``mxq_experts`` "swiglu" or "linear"; its
        parameters, not its forward) on the dispatched tokens, combined: (T, D) or (T, N) in routed.dtype."""
        kind = getattr(experts, "mxq_experts", None)
        if kind == "swiglu":
            return self.swiglu(routed, experts.w1, experts.w2, experts.w3)
        if kind == "linear":
            return self.combine(routed, self.grouped_mm(routed, experts.weight))
        raise ValueError(
            f'mxq.TokenDispatcher.experts: the module must declare mxq_experts = "swiglu" or "linear", got {kind!r}'
        )


def __getattr__(name: str):
    if name == "quantize_routed_unfused":
        raise AttributeError(
            "mxq.dispatch.quantize_routed_unfused was renamed mxq.dispatch.quantize_routed_composed (the same "
            'baseline as mxq.quantize\'s backend="composed")'
        )
    if name == "fused_op_available":
        raise AttributeError(
            "mxq.dispatch.fused_op_available was removed: every build registers mxq::quantize_routed, so "
            'routed_quantization="fused" is always available'
        )
    raise AttributeError(f"module 'mxq.dispatch' has no attribute {name!r}")
