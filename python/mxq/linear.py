"""MXFP8Linear: y = x Wᵀ (+ b) with every GEMM operand in MXFP8 (docs/numerics.md §5, docs/training.md).

    GEMM                 A operand                      B operand
    forward  y  = x Wᵀ   x rowwise (1x32 along K)       W rowwise (along K)
    dgrad    dx = dy W   dy rowwise (along N)           W colwise (along N)
    wgrad    dW = dyᵀ x  dy colwise (32x1 along M)      x colwise (32x1 along M)

The recipe is a :class:`mxq.MXFP8Config` (``config=``; python/mxq/config.py). Activations and gradients always use
1x32 blocks (x, dy). The weight policy is its ``weight_scaling``:

- ``"32x32"`` (default, the recipe's): one E8M0 scale per 32x32 tile of W, so every weight value is quantized once
  and the same e4m3 byte serves the forward GEMM (W rowwise along K) and dgrad (W colwise along N);
- ``"1x32"``: W gets its own 1x32 blocks along K and 32x1 blocks along N, like an activation.

Both come from one ``torch.ops.mxq.quantize_weight`` call on the 2-D (N, K) weight in forward, which writes the
rowwise operand (used at once) and the colwise operand (saved for dgrad instead of the bf16 weight).

dy is needed on both axes at once; ``activation_quantization_backend`` picks how: ``"fused"`` (default) is the
one-read fused kernel, ``"composed"`` the three-kernel baseline (rowwise kernel, colwise kernel, swizzle). Both give
the same bytes, so outputs and gradients are bitwise identical. x's colwise copy comes from the high-precision x saved
for backward (``x_colwise="high_precision"``), or is produced in forward by the dual quantization and saved instead of
x (``"quantized"``); colwise data never comes from re-quantizing rowwise bytes. Every op call passes ``scaling_mode``
explicitly (``"rceil"`` by default): nothing depends on an op's default.

GEMM: every product has the form A (R, C) · B (P, C)ᵀ with both operands quantized along C. On SM100+ it is
``torch._scaled_mm`` with the blocked E8M0 scales; below SM100 (and on the CPU) there is no MX GEMM, so an emulated
GEMM dequantizes both operands with mxq's own ``dequantize`` op and runs a bf16 matmul (fp32 accumulation). The
capability is checked up front from the device (``gemm="auto"``), never by catching an error; ``gemm="emulated"``
forces the emulation anywhere, ``gemm="native"`` forces the native GEMM.

Shapes: in_features K and out_features N must be multiples of 32 (checked at construction), and so must the
flattened token count M (checked at every call). Nothing is padded and nothing falls back silently: an unsupported
shape is a ValueError.
"""

from __future__ import annotations

import contextlib
import math
import threading

import torch
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .config import MXFP8Config, check_config
from .ops import check_type

_ops = torch.ops.mxq
BLOCK = 32  # elements per scale block (docs/numerics.md §2)
ATOM_ROWS, ATOM_COLS = 128, 4  # one 128x4 scale atom of the blocked layout (docs/numerics.md §5)


def round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def native_mx_gemm(device: torch.device) -> bool:
    """True where torch._scaled_mm / torch._scaled_grouped_mm run MXFP8 (block-scaled e4m3 with E8M0 scales)
    natively: CUDA devices of compute capability 10.0 and above."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 10


def use_native_gemm(owner: str, config: MXFP8Config, device: torch.device) -> bool:
    """Whether ``config``'s GEMMs run natively on ``device``. RuntimeError when the config forces the native GEMM
    (``gemm="native"``) on a device that has none: a missing capability, said up front instead of torch's error
    from inside the GEMM."""
    native = native_mx_gemm(device)
    if config.gemm == "native" and not native:
        raise RuntimeError(
            f'{owner}: gemm="native" needs a CUDA device of compute capability 10.0 or above (MXFP8 GEMMs), got '
            f'{device}; gemm="auto" picks the emulated GEMM there'
        )
    return native and config.gemm != "emulated"


def check_float_tensor(owner: str, name: str, t) -> None:
    """TypeError unless ``t`` is a floating-point Tensor (the layers cast it to bf16; an integer, bool or complex
    tensor is a mistake, not something to cast)."""
    check_type(owner, name, t, Tensor)
    if not t.is_floating_point():
        raise TypeError(f"{owner}: {name} must be a floating-point tensor, got {t.dtype}")


def check_multiple_of_32(owner: str, name: str, value: int, hint: str = "") -> None:
    if value % BLOCK:
        raise ValueError(f"{owner}: {name} must be a multiple of {BLOCK}, got {value}{hint}")


def weight_operands(w: Tensor, scaling_mode: str, weight_scaling: str, colwise: bool = True):
    """(q_row, s_row, q_col, s_col) of a 2-D (N, K) or 3-D (G, N, K) weight from torch.ops.mxq.quantize_weight,
    every option passed explicitly. q_col and s_col are None when ``colwise`` is False."""
    out = _ops.quantize_weight(
        w, scaling_mode=scaling_mode, weight_scaling=weight_scaling, rowwise=True, colwise=colwise
    )
    return out[0], out[1], (out[2] if colwise else None), (out[3] if colwise else None)


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


def layer_weight_operands(weight: Tensor, w: Tensor, scaling_mode: str, weight_scaling: str):
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
    key = (id(weight), scaling_mode, weight_scaling)
    stamp = (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape), weight.device)
    hit = cache.get(key)
    if hit is not None and hit[0] is weight and hit[1] == stamp:
        return hit[2]
    # Outside autograd, as in the layers' Function.forward: a cached operand must not hold w's graph (the op has
    # no autograd formula; its outputs would carry a grad_fn that only fails at backward).
    with torch.no_grad():
        operands = weight_operands(w, scaling_mode, weight_scaling, colwise=True)
    cache[key] = (weight, stamp, operands)  # keeps `weight` alive, so its id is not reused while cached
    return operands


def blocked_scales(s: Tensor, rows: int, cols: int) -> Tensor:
    """The 2-D (roundup(rows,128), roundup(cols/32,4)) view of the blocked scales of a (rows, cols) operand."""
    return s.reshape(round_up(rows, ATOM_ROWS), round_up(cols // BLOCK, ATOM_COLS))


def mx_gemm(qa: Tensor, sa: Tensor, qb: Tensor, sb: Tensor, native: bool) -> Tensor:
    """bf16 (R, P) = A · Bᵀ for MXFP8 A (R, C) and B (P, C), both contiguous e4m3 quantized along C, with blocked
    scales of their (R, C/32) and (P, C/32) blocks: torch._scaled_mm when ``native``, else emulated."""
    if native:
        # B must be column-major: qb.t() is (C, P) with strides (1, C).
        return torch._scaled_mm(qa, qb.t(), sa.reshape(-1), sb.reshape(-1), out_dtype=torch.bfloat16)
    a = _ops.dequantize(qa, blocked_scales(sa, *qa.shape), None, "blocked")
    b = _ops.dequantize(qb, blocked_scales(sb, *qb.shape), None, "blocked")
    return a @ b.t()


def dual_quantize(t: Tensor, backend: str, scaling_mode: str, offs: Tensor | None = None):
    """(q_row, s_row, q_col, s_col) of ``t`` from one call of the fused kernel or the composed baseline."""
    op = _ops.quantize if backend == "fused" else _ops.quantize_composed
    return op(t, BLOCK, scaling_mode, offs)


def activation_operands(a: Tensor, need_dw: bool, backend: str, x_colwise: str, scaling_mode: str, offs=None):
    """(q, s, saved): the forward GEMM's rowwise operand of the activation ``a`` and what its wgrad needs later — a's
    colwise operand from the same call (``x_colwise="quantized"``), or ``a`` itself (quantized in backward)."""
    if x_colwise == "quantized" and need_dw:
        q, s, q_col, s_col = dual_quantize(a, backend, scaling_mode, offs)
        return q, s, (q_col, s_col)
    q, s = _ops.quantize_rowwise(a, BLOCK, scaling_mode, offs)
    return q, s, ((a,) if need_dw else ())


def saved_colwise(saved, scaling_mode: str, offs=None):
    """The activation's colwise operand (q_col, s_col) for wgrad from what :func:`activation_operands` saved."""
    if len(saved) == 2:
        return saved[0], saved[1]
    return _ops.quantize_colwise(saved[0], BLOCK, scaling_mode, offs)


def recipe_args(config: MXFP8Config) -> tuple[str, str, str, str]:
    """What the autograd functions take of a config, as plain strings (torch.compile traces them as constants):
    (activation_quantization_backend, x_colwise, scaling_mode, weight_scaling)."""
    return config.activation_quantization_backend, config.x_colwise, config.scaling_mode, config.weight_scaling


class _MXFP8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, w_operands, backend, x_colwise, scaling_mode, weight_scaling, native):
        # x (M, K), w (N, K), both bf16 contiguous; w_operands: w's, from reuse_quantized_weights, or None.
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        q_x, s_x, x_saved = activation_operands(x, need_dw, backend, x_colwise, scaling_mode)
        # One call: W rowwise (forward, now) and W colwise (dgrad, saved instead of W).
        q_w, s_w, q_w_col, s_w_col = w_operands or weight_operands(w, scaling_mode, weight_scaling, colwise=need_dx)
        w_saved = (q_w_col, s_w_col) if need_dx else ()
        ctx.save_for_backward(*x_saved, *w_saved)
        ctx.config = (backend, scaling_mode, native, len(x_saved), need_dx, need_dw)
        return mx_gemm(q_x, s_x, q_w, s_w, native)  # (M, N)

    @staticmethod
    def backward(ctx, dy):
        backend, scaling_mode, native, n_x, need_dx, need_dw = ctx.config
        saved = ctx.saved_tensors
        x_saved, w_saved = saved[:n_x], saved[n_x:]
        dy = dy.to(torch.bfloat16).contiguous()  # a non-contiguous dy (e.g. from a transpose) is copied here
        q_dy, s_dy, q_dy_col, s_dy_col = dual_quantize(dy, backend, scaling_mode)  # (M, N), both axes, one call
        dx = dw = None
        if need_dx:
            q_w_col, s_w_col = w_saved  # q_w_col.t(): the physical (K, N) array, quantized along N
            dx = mx_gemm(q_dy, s_dy, q_w_col.t(), s_w_col, native)  # (M, N) · (K, N)ᵀ = (M, K)
        if need_dw:
            q_x_col, s_x_col = saved_colwise(x_saved, scaling_mode)  # physical (K, M)
            dw = mx_gemm(q_dy_col.t(), s_dy_col, q_x_col.t(), s_x_col, native)  # (N, M) · (K, M)ᵀ = (N, K)
        return dx, dw, None, None, None, None, None, None


def mxfp8_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, config: MXFP8Config | None = None) -> Tensor:
    """Functional MXFP8 linear: bf16 ``x Wᵀ + b`` for x (..., K) and weight (N, K), with the recipe ``config``
    (default: ``mxq.MXFP8Config()``); see the module docstring.

    Raises ValueError when K, N or the token count (the product of x's leading dims) is not a multiple of 32,
    when x's last dim is not the weight's K, for a bias not of shape (N,) or tensors on different devices;
    TypeError for an argument that is not a floating-point tensor or a config that is not a MXFP8Config;
    RuntimeError for ``gemm="native"`` on a device without MXFP8 GEMMs."""
    owner = "mxq.mxfp8_linear"
    config = check_config(owner, config)
    check_float_tensor(owner, "x", x)
    check_float_tensor(owner, "weight", weight)
    if bias is not None:
        check_float_tensor(owner, "bias", bias)
    if weight.dim() != 2:
        raise ValueError(f"{owner}: weight must be 2-D (N, K), got shape {tuple(weight.shape)}")
    N, K = weight.shape
    if x.dim() < 1 or x.shape[-1] != K:
        raise ValueError(f"{owner}: x must have shape (..., {K}) for a weight of shape {(N, K)}, got {tuple(x.shape)}")
    lead = x.shape[:-1]
    M = math.prod(lead)
    check_multiple_of_32(
        owner, "the token count (the product of x's leading dims)", M, f" for x of shape {tuple(x.shape)}"
    )
    check_multiple_of_32(owner, "in_features (K)", K)
    check_multiple_of_32(owner, "out_features (N)", N)
    if bias is not None and tuple(bias.shape) != (N,):
        raise ValueError(
            f"{owner}: bias must have shape ({N},) for a weight of shape {(N, K)}, got {tuple(bias.shape)}"
        )
    devices = [t.device for t in (x, weight, bias) if t is not None]
    if any(d != x.device for d in devices):
        raise ValueError(f"{owner}: x, weight and bias must be on one device, got {', '.join(map(str, devices))}")
    native = use_native_gemm(owner, config, x.device)
    x2 = x.reshape(M, K).to(torch.bfloat16).contiguous()
    w = weight.to(torch.bfloat16).contiguous()
    y = _MXFP8LinearFunction.apply(
        x2,
        w,
        layer_weight_operands(weight, w, config.scaling_mode, config.weight_scaling),
        *recipe_args(config),
        native,
    )
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*lead, N)


class MXFP8Linear(nn.Linear):
    """Drop-in nn.Linear whose three GEMMs run on MXFP8 operands quantized by mxq with the recipe ``config``
    (default: ``mxq.MXFP8Config()``), kept as ``self.mxfp8_config``; see the module docstring.

    Inputs and weights are cast to bf16 for quantization (fp32 master weights keep their dtype; the cast is part of
    the autograd graph); the output is bf16. in_features and out_features must be multiples of 32 (ValueError here);
    the token count must be a multiple of 32 at every call (ValueError there).
    """

    mxfp8_config: MXFP8Config

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        config: MXFP8Config | None = None,
    ) -> None:
        check_multiple_of_32("MXFP8Linear", "in_features", in_features)
        check_multiple_of_32("MXFP8Linear", "out_features", out_features)
        config = check_config("MXFP8Linear", config)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.mxfp8_config = config

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, *, share_parameters: bool = False, config: MXFP8Config | None = None
    ) -> MXFP8Linear:
        """An MXFP8Linear with ``linear``'s weight and bias: copies of them (default), or with
        ``share_parameters=True`` the very same Parameter objects (so optimizers and tied weights keep working)."""
        m = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            device="meta" if share_parameters else linear.weight.device,
            dtype=linear.weight.dtype,
            config=config,
        )
        if share_parameters:
            m.weight = linear.weight
            m.bias = linear.bias
            return m
        with torch.no_grad():
            m.weight.copy_(linear.weight)
            if linear.bias is not None:
                m.bias.copy_(linear.bias)
        return m

    def forward(self, x: Tensor) -> Tensor:
        check_float_tensor("MXFP8Linear", "input", x)
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"MXFP8Linear: input must have shape (..., {self.in_features}), got {tuple(x.shape)}")
        M = math.prod(x.shape[:-1])
        if M % BLOCK:
            raise ValueError(
                f"MXFP8Linear: the token count (the product of the input's leading dims) must be a multiple of "
                f"{BLOCK}, got {M} for input shape {tuple(x.shape)}; pad the batch (mxq pads nothing itself)"
            )
        return mxfp8_linear(x, self.weight, self.bias, config=self.mxfp8_config)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, config={self.mxfp8_config}"
