"""The MXFP8 token dispatcher of an MoE layer: routed tokens in, expert-sorted and quantized in one pass, and back
(docs/training.md, "The token dispatcher").

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
  to the tokens by a deterministic scatter-add (``index_put_(accumulate=True)``).
- ``grouped_mm(routed, w)`` is the grouped GEMM on the pre-quantized operands (mxq.moe's operand table); backward
  quantizes its incoming padded gradient on both axes in one call, as ``mxq.grouped_mm`` does.
- ``combine_mm(routed, h, w)``: y = h·Wᵀ per expert over the padded rows, then per routed row
  ``(y[dest[r]].float() * scores[r]).to(bf16)`` scatter-added to token ``index[r]``. Backward quantizes
  d(routed y) = ``(dout[index[r]].float() * scores[r]).to(bf16)`` **in one pass, gate scores applied**
  (``quantize_routed(dout, index, counts, scale=scores)``): rowwise for W's dgrad, colwise for W's wgrad. The score
  gradient is ``d scores[r] = Σ_d dout[index[r], d] · y[dest[r], d]`` in fp32.

Outputs and gradients (x, scores, every weight) are **bitwise** those of the unfused path: x[index] → mxq.grouped_mm
per expert GEMM (which pads and unpads) → the scale multiply rounded to bf16 → ``index_put_(accumulate=True)`` into
(T, D) bf16. The routed math runs in bf16 (x is cast to bf16 first, the combined output is cast back to x's dtype).

``routed_quantization`` picks the routed quantization: ``"fused"`` (default) is mxq's one-pass op
``mxq.quantize_routed``; ``"unfused"`` is :func:`quantize_routed_unfused`, its composition from torch ops (index
gather, scale multiply, pad copy) and ``mxq.quantize`` — the same bytes, kept as the baseline and the test oracle. A
build without the fused op is a RuntimeError when the dispatcher is made, never a silent switch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import MXFP8Config, check_choice, check_config
from .linear import (
    BLOCK,
    activation_operands,
    check_float_tensor,
    dual_quantize,
    layer_weight_operands,
    saved_colwise,
    use_native_gemm,
)
from .moe import (
    _dgrad_gemm,
    _fwd_gemm,
    _wgrad_gemm,
    _zero_empty_groups,
    grouped_gemm_path,
    padded_rows,
    weight_operands,
)
from .ops import RoutedMXTensors, check_type, quantize

_ops = torch.ops.mxq
ROUTED_QUANTIZATIONS = ("fused", "unfused")


def quantize_routed_unfused(
    x: Tensor,
    index: Tensor,
    counts: Tensor,
    *,
    scale: Tensor | None = None,
    scaling_mode: str = "rceil",
    rowwise: bool = True,
    colwise: bool = True,
    backend: str = "fused",
) -> RoutedMXTensors:
    """``mxq.quantize_routed``'s result by the unfused composition (docs/numerics.md §12.1): gather the routed rows
    ``x[index]``, multiply by ``scale`` rounded to x's dtype (``(x[index].float() * scale[:, None]).to(x.dtype)``),
    copy them into the zeroed padded row space, then :func:`mxq.quantize` with the padded group ends (``backend``:
    its kernel). x (T, K), index (N,) int32/int64 source rows in expert-sorted order, counts (E,) rows per expert
    (Σ = N), scale (N,) fp32 or None. Three passes over the routed rows besides the quantization; no host sync."""
    N = index.shape[0]
    offs_p, dest, Mp = padded_rows(torch.cumsum(counts, 0), N)
    v = x.index_select(0, index)
    if scale is not None:
        v = (v.float() * scale.unsqueeze(1)).to(x.dtype)
    padded = x.new_zeros(Mp, x.shape[1]).index_copy_(0, dest, v)
    q = quantize(padded, rowwise=rowwise, colwise=colwise, scaling_mode=scaling_mode, offs=offs_p, backend=backend)
    return RoutedMXTensors(*q, offs_p, dest.to(torch.int32))


def fused_op_available() -> bool:
    """True when the loaded extension registers the one-pass routed quantization (``mxq::quantize_routed``)."""
    return hasattr(_ops, "quantize_routed")


def _quantize_routed(how: str, x, index, counts, scale, scaling_mode, rowwise, colwise, backend) -> RoutedMXTensors:
    if how == "fused":
        from .ops import quantize_routed

        out = quantize_routed(
            x, index, counts, scale=scale, scaling_mode=scaling_mode, rowwise=rowwise, colwise=colwise
        )
        return RoutedMXTensors(*out)
    return quantize_routed_unfused(
        x, index, counts, scale=scale, scaling_mode=scaling_mode, rowwise=rowwise, colwise=colwise, backend=backend
    )


def _keep_valid(y: Tensor, valid: Tensor) -> Tensor:
    # torch.where, not a multiply: the GEMMs leave tail rows unwritten (any bytes), and a padding row's product with
    # a zero row may be -0; the unfused path's padding rows are +0.
    return torch.where(valid, y, torch.zeros((), dtype=y.dtype, device=y.device))


class RoutedTokens(NamedTuple):
    """The dispatched tokens (from :meth:`TokenDispatcher.dispatch`), over the padded row space of Mp rows.

    ``x``: the autograd handle of the routed input, shape (Mp, D) (its values are not materialized; the GEMMs read
    the quantized operands below; its gradient is the padded dgrad, which dispatch's backward scatter-adds to the
    tokens). ``q_row``/``s_row`` (M-groups) and ``q_col``/``s_col`` (K-groups): the routed x quantized on both axes.
    ``offs_p`` (E,) int32 padded group ends; ``dest`` (N,) int64 padded row of each routed row; ``valid`` (Mp, 1)
    bool, the rows that hold a routed row; ``index`` (N,) int64 source token of each routed row; ``scores`` (N,) fp32
    gate score of each routed row (differentiable); ``counts`` (E,) int64 rows per expert; ``num_tokens`` T;
    ``dtype`` x's dtype (the combined output's)."""

    x: Tensor
    q_row: Tensor
    s_row: Tensor
    q_col: Tensor
    s_col: Tensor
    offs_p: Tensor
    dest: Tensor
    valid: Tensor
    index: Tensor
    scores: Tensor
    counts: Tensor
    num_tokens: int
    dtype: torch.dtype


# ---- autograd ----


class _Dispatch(torch.autograd.Function):
    """x (T, K) bf16 -> (handle (Mp, K), the four quantized operands, offs_p, dest, valid); backward scatter-adds the
    handle's padded gradient to the tokens."""

    @staticmethod
    def forward(ctx, x, index, counts, how, scaling_mode, backend):
        q_row, s_row, q_col, s_col, offs_p, dest = _quantize_routed(
            how, x, index, counts, None, scaling_mode, True, True, backend
        )
        dest = dest.long()
        Mp = q_row.shape[0]
        valid = torch.zeros(Mp, 1, dtype=torch.bool, device=x.device).index_fill_(0, dest, True)
        # The handle: an (Mp, K) tensor with no storage of its own (one element, expanded), only there to carry the
        # padded gradient back.
        handle = x.new_zeros(()).expand(Mp, x.shape[1])
        ctx.mark_non_differentiable(q_row, s_row, q_col, s_col, offs_p, dest, valid)
        ctx.save_for_backward(index, dest)
        ctx.num_tokens = x.shape[0]
        return handle, q_row, s_row, q_col, s_col, offs_p, dest, valid

    @staticmethod
    def backward(ctx, d_handle, *_):
        index, dest = ctx.saved_tensors
        d_routed = d_handle.index_select(0, dest)
        # What autograd's backward of x[index] runs: a deterministic accumulate into zeros.
        dx = d_routed.new_zeros(ctx.num_tokens, d_routed.shape[1]).index_put_((index,), d_routed, accumulate=True)
        return dx, None, None, None, None, None


class _RoutedGroupedMM(torch.autograd.Function):
    """y (Mp, N) = x_g · W_gᵀ over the padded rows, x given as its pre-quantized operands (rowwise for forward,
    colwise saved for wgrad); backward quantizes dy (Mp, N) on both axes in one call."""

    @staticmethod
    def forward(ctx, handle, w, w_operands, q_x, s_x, q_x_col, s_x_col, offs_p, valid, backend, scaling_mode,
                weight_scaling, path):  # fmt: skip
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        q_w, s_w, q_w_col, s_w_col = w_operands or weight_operands(w, scaling_mode, weight_scaling, colwise=need_dx)
        x_saved = (q_x_col, s_x_col) if need_dw else ()
        w_saved = (q_w_col, s_w_col) if need_dx else ()
        ctx.save_for_backward(offs_p, valid, *x_saved, *w_saved)
        ctx.config = (backend, scaling_mode, path, need_dx, need_dw)
        return _keep_valid(_fwd_gemm(q_x, s_x, q_w, s_w, offs_p, path), valid)

    @staticmethod
    def backward(ctx, dy):
        backend, scaling_mode, path, need_dx, need_dw = ctx.config
        offs_p, valid, *rest = ctx.saved_tensors
        q_dy, s_dy, q_dy_col, s_dy_col = dual_quantize(
            dy.to(torch.bfloat16).contiguous(), backend, scaling_mode, offs_p
        )
        dx = dw = None
        if need_dw:
            q_x_col, s_x_col = rest[:2]
            dw = _zero_empty_groups(_wgrad_gemm(q_dy_col, s_dy_col, q_x_col, s_x_col, offs_p, path), offs_p)
        if need_dx:
            q_w_col, s_w_col = rest[-2:]
            dx = _keep_valid(_dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs_p, path), valid)
        return dx, dw, *([None] * 11)


class _CombineMM(torch.autograd.Function):
    """out (T, N) bf16: y = h_g · W_gᵀ over the padded rows, each routed row's y scaled by its score (rounded to
    bf16) and scatter-added to its token. Backward: d(routed y) quantized on both axes in one routed pass with the
    scores applied; d scores from the saved routed y."""

    @staticmethod
    def forward(ctx, h, w, w_operands, scores, index, counts, dest, valid, offs_p, num_tokens, how, backend,
                x_colwise, scaling_mode, weight_scaling, path):  # fmt: skip
        need_dh, need_dw, need_ds = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[3]
        q_h, s_h, h_saved = activation_operands(h, need_dw, backend, x_colwise, scaling_mode, offs_p)
        q_w, s_w, q_w_col, s_w_col = w_operands or weight_operands(w, scaling_mode, weight_scaling, colwise=need_dh)
        w_saved = (q_w_col, s_w_col) if need_dh else ()
        y_routed = _keep_valid(_fwd_gemm(q_h, s_h, q_w, s_w, offs_p, path), valid).index_select(0, dest)  # (N, N_out)
        y_scaled = (y_routed.float() * scores.unsqueeze(1)).to(torch.bfloat16)
        # Out of place: with index_put_ here, torch 2.11's torch.compile traced backward with dout = zeros.
        out = y_scaled.new_zeros(num_tokens, y_scaled.shape[1]).index_put((index,), y_scaled, accumulate=True)
        y_saved = (y_routed,) if need_ds else ()
        ctx.save_for_backward(scores, index, counts, valid, offs_p, *y_saved, *h_saved, *w_saved)
        ctx.config = (how, backend, scaling_mode, path, len(y_saved), len(h_saved), need_dh, need_dw, need_ds)
        return out

    @staticmethod
    def backward(ctx, dout):
        how, backend, scaling_mode, path, n_y, n_h, need_dh, need_dw, need_ds = ctx.config
        scores, index, counts, valid, offs_p, *rest = ctx.saved_tensors
        y_saved, h_saved, w_saved = rest[:n_y], rest[n_y : n_y + n_h], rest[n_y + n_h :]
        dout = dout.to(torch.bfloat16).contiguous()
        dh = dw = ds = None
        if need_dh or need_dw:
            # d(routed y) = (dout[index].float() * scores).to(bf16), gathered, scaled, padded and quantized on the
            # axes the GEMMs need, in one pass.
            q_dy, s_dy, q_dy_col, s_dy_col, _, _ = _quantize_routed(
                how, dout, index, counts, scores, scaling_mode, need_dh, need_dw, backend
            )
            if need_dw:
                q_h_col, s_h_col = saved_colwise(h_saved, scaling_mode, offs_p)
                dw = _zero_empty_groups(_wgrad_gemm(q_dy_col, s_dy_col, q_h_col, s_h_col, offs_p, path), offs_p)
            if need_dh:
                q_w_col, s_w_col = w_saved
                dh = _keep_valid(_dgrad_gemm(q_dy, s_dy, q_w_col, s_w_col, offs_p, path), valid)
        if need_ds:
            # What autograd computes for the score of (y.float() * s).to(bf16): Σ_d of the product, in fp32.
            ds = (dout.index_select(0, index).float() * y_saved[0].float()).sum(1, keepdim=True).view(-1)
        return dh, dw, None, ds, *([None] * 12)


# ---- the dispatcher ----


class TokenDispatcher:
    """MXFP8 token dispatcher for ``num_experts`` local experts with the recipe ``config`` (default:
    ``mxq.MXFP8Config()``): see the module docstring. Not an nn.Module (no parameters or buffers); one object serves
    every call. ``routed_quantization``: ``"fused"`` (default; RuntimeError here when the loaded extension lacks the
    op) or ``"unfused"``."""

    def __init__(
        self, num_experts: int, *, config: MXFP8Config | None = None, routed_quantization: str = "fused"
    ) -> None:
        owner = "mxq.TokenDispatcher"
        check_type(owner, "num_experts", num_experts, int)
        if num_experts < 1:
            raise ValueError(f"{owner}: num_experts must be at least 1, got {num_experts}")
        check_choice(owner, "routed_quantization", routed_quantization, ROUTED_QUANTIZATIONS)
        if routed_quantization == "fused" and not fused_op_available():
            raise RuntimeError(
                f'{owner}: routed_quantization="fused" needs the op mxq::quantize_routed, which the loaded extension '
                f'({_library_path()}) does not register; rebuild mxq, or pass routed_quantization="unfused" (the '
                "same bytes from gather, pad and mxq.quantize)"
            )
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

    # ---- dispatch ----

    def dispatch(self, x: Tensor, scores: Tensor, expert_ids: Tensor) -> RoutedTokens:
        """x (T, D) floating point; scores (T, top_k) the gate score of each choice (used in fp32); expert_ids
        (T, top_k) integer expert of each choice, in [0, num_experts) (a token may pick an expert twice). Returns the
        routed tokens, quantized (module docstring). D must be a multiple of 32."""
        owner = "mxq.TokenDispatcher.dispatch"
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
        if D % BLOCK:
            raise ValueError(f"{owner}: D (x.shape[1]) must be a multiple of {BLOCK}, got {D}")
        E, top_k = self.num_experts, expert_ids.shape[1]
        flat = expert_ids.reshape(-1).long()
        if x.device.type == "cpu" and flat.numel() and not torch.compiler.is_compiling():
            lo, hi = int(flat.min()), int(flat.max())
            if lo < 0 or hi >= E:
                raise ValueError(f"{owner}: expert_ids must be in [0, {E}), got values from {lo} to {hi}")
        order = torch.argsort(flat, stable=True)
        index = order // top_k
        # Rows per expert from the sorted ids (no host sync, no atomics).
        ends = torch.searchsorted(flat.index_select(0, order), torch.arange(E, device=x.device), right=True)
        counts = torch.diff(ends, prepend=ends.new_zeros(1))
        sorted_scores = scores.reshape(-1).float()[order]
        c = self.config
        handle, q_row, s_row, q_col, s_col, offs_p, dest, valid = _Dispatch.apply(
            x.to(torch.bfloat16).contiguous(),
            index,
            counts,
            self.routed_quantization,
            c.scaling_mode,
            c.activation_quantization_backend,
        )
        return RoutedTokens(
            handle, q_row, s_row, q_col, s_col, offs_p, dest, valid, index, sorted_scores, counts, T, x.dtype
        )

    # ---- expert GEMMs on the padded rows ----

    def _path(self, owner: str, routed: RoutedTokens) -> str:
        return grouped_gemm_path(routed.x.device, use_native_gemm(owner, self.config, routed.x.device))

    def _check_w(self, owner: str, w: Tensor, K: int, name: str = "w") -> None:
        check_float_tensor(owner, name, w)
        if w.dim() != 3 or w.shape[0] != self.num_experts or w.shape[2] != K:
            raise ValueError(f"{owner}: {name} must have shape (E={self.num_experts}, N, K={K}), got {tuple(w.shape)}")
        if w.shape[1] % BLOCK:
            raise ValueError(f"{owner}: {name}'s N must be a multiple of {BLOCK}, got {w.shape[1]}")

    def grouped_mm(self, routed: RoutedTokens, w: Tensor) -> Tensor:
        """bf16 (Mp, N): the dispatched x times each expert's W_gᵀ, w (E, N, D), from the operands dispatch
        quantized (no quantization of x here); padding and tail rows 0."""
        owner = "mxq.TokenDispatcher.grouped_mm"
        self._check_w(owner, w, routed.q_row.shape[1])
        c = self.config
        w_bf16 = w.to(torch.bfloat16).contiguous()
        return _RoutedGroupedMM.apply(
            routed.x,
            w_bf16,
            layer_weight_operands(w, w_bf16, c.scaling_mode, c.weight_scaling),
            routed.q_row,
            routed.s_row,
            routed.q_col,
            routed.s_col,
            routed.offs_p,
            routed.valid,
            c.activation_quantization_backend,
            c.scaling_mode,
            c.weight_scaling,
            self._path(owner, routed),
        )

    def combine_mm(self, routed: RoutedTokens, h: Tensor, w: Tensor) -> Tensor:
        """(T, N) in x's dtype: the experts' last GEMM y = h_g · W_gᵀ (h (Mp, H) over the padded rows, w (E, N, H)),
        each routed row scaled by its gate score and scatter-added to its token; backward quantizes d(routed y) with
        the scores in one pass (module docstring)."""
        owner = "mxq.TokenDispatcher.combine_mm"
        check_float_tensor(owner, "h", h)
        Mp = routed.valid.shape[0]
        if h.dim() != 2 or h.shape[0] != Mp:
            raise ValueError(f"{owner}: h must be 2-D over the {Mp} padded rows, got shape {tuple(h.shape)}")
        self._check_w(owner, w, h.shape[1])
        if h.shape[1] % BLOCK:
            raise ValueError(f"{owner}: h's width must be a multiple of {BLOCK}, got {h.shape[1]}")
        c = self.config
        w_bf16 = w.to(torch.bfloat16).contiguous()
        out = _CombineMM.apply(
            h.to(torch.bfloat16).contiguous(),
            w_bf16,
            layer_weight_operands(w, w_bf16, c.scaling_mode, c.weight_scaling),
            routed.scores,
            routed.index,
            routed.counts,
            routed.dest,
            routed.valid,
            routed.offs_p,
            routed.num_tokens,
            self.routed_quantization,
            c.activation_quantization_backend,
            c.x_colwise,
            c.scaling_mode,
            c.weight_scaling,
            self._path(owner, routed),
        )
        return out.to(routed.dtype)

    def combine(self, routed: RoutedTokens, y: Tensor) -> Tensor:
        """(T, N) in x's dtype from any expert output y (Mp, N) over the padded rows: ``(y[dest[r]].float() *
        scores[r]).to(bf16)`` scatter-added to token index[r]. Plain autograd (its backward hands the producer of y a
        bf16 gradient); :meth:`combine_mm` is the form whose backward quantizes in one routed pass."""
        owner = "mxq.TokenDispatcher.combine"
        check_float_tensor(owner, "y", y)
        Mp = routed.valid.shape[0]
        if y.dim() != 2 or y.shape[0] != Mp:
            raise ValueError(f"{owner}: y must be 2-D over the {Mp} padded rows, got shape {tuple(y.shape)}")
        y_scaled = (y.to(torch.bfloat16).index_select(0, routed.dest).float() * routed.scores.unsqueeze(1)).to(
            torch.bfloat16
        )
        out = y_scaled.new_zeros(routed.num_tokens, y.shape[1]).index_put_((routed.index,), y_scaled, accumulate=True)
        return out.to(routed.dtype)

    def swiglu(self, routed: RoutedTokens, w1: Tensor, w2: Tensor, w3: Tensor) -> Tensor:
        """(T, D) in x's dtype: SwiGLU experts ``(silu(x W1ᵀ) * (x W3ᵀ)) W2ᵀ`` on the dispatched tokens, w1 and w3
        (E, H, D), w2 (E, D, H), combined with the gate scores."""
        h = F.silu(self.grouped_mm(routed, w1)) * self.grouped_mm(routed, w3)
        return self.combine_mm(routed, h, w2)

    def experts(self, routed: RoutedTokens, experts) -> Tensor:
        """The experts of a module with mxq's expert-module interface (``mxq_experts`` "swiglu" or "linear"; its
        parameters, not its forward) on the dispatched tokens, combined: (T, D) or (T, N) in x's dtype."""
        kind = getattr(experts, "mxq_experts", None)
        if kind == "swiglu":
            return self.swiglu(routed, experts.w1, experts.w2, experts.w3)
        if kind == "linear":
            return self.combine(routed, self.grouped_mm(routed, experts.weight))
        raise ValueError(
            f'mxq.TokenDispatcher.experts: the module must declare mxq_experts = "swiglu" or "linear", got {kind!r}'
        )


def _library_path() -> str:
    import mxq

    return mxq._library_path
