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

Both come from one :func:`mxq.quantize_weight` call on the 2-D (N, K) weight in forward, which writes the
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

The output has the dtype the nn.Linear it replaces would return: the input's dtype, or autocast's inside an
autocast region (the GEMM's bf16 product cast to it, then the bias added in it), so converted and unconverted modules
mix in any precision.

The operands, GEMM back ends and the autograd Function live in mxq._gemm (shared with mxq.moe and mxq.dispatch).

Shapes: in_features K and out_features N must be multiples of 32 (checked at construction), and so must the
flattened token count M (checked at every call). Nothing is padded and nothing falls back silently: an unsupported
shape is a ValueError.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._gemm import (
    MXGemm,
    check_float_tensor,
    check_multiple,
    dense_gemm_path,
    format_block,
    gemm_plan,
    layer_weight_operands,
    native_mx_gemm,
    output_dtype,
    reuse_quantized_weights,
    use_native_gemm,
)
from .config import MXFP8Config, check_config

__all__ = ["MXFP8Linear", "mxfp8_linear", "native_mx_gemm", "reuse_quantized_weights"]


def mxfp8_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, config: MXFP8Config | None = None) -> Tensor:
    """Functional MXFP8 linear: ``x Wᵀ + b`` for x (..., K) and weight (N, K), with the recipe ``config``
    (default: ``mxq.MXFP8Config()``), in x's dtype (autocast's inside an autocast region); see the module
    docstring.

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
    M, block = math.prod(lead), format_block(config)
    check_multiple(
        owner, "the token count (the product of x's leading dims)", M, block, f" for x of shape {tuple(x.shape)}"
    )
    check_multiple(owner, "in_features (K)", K, block)
    check_multiple(owner, "out_features (N)", N, block)
    if bias is not None and tuple(bias.shape) != (N,):
        raise ValueError(
            f"{owner}: bias must have shape ({N},) for a weight of shape {(N, K)}, got {tuple(bias.shape)}"
        )
    devices = [t.device for t in (x, weight, bias) if t is not None]
    if any(d != x.device for d in devices):
        raise ValueError(f"{owner}: x, weight and bias must be on one device, got {', '.join(map(str, devices))}")
    path = dense_gemm_path(use_native_gemm(owner, config, x.device))
    x2 = x.reshape(M, K).to(torch.bfloat16).contiguous()
    w = weight.to(torch.bfloat16).contiguous()
    w_operands = layer_weight_operands(weight, w, config)
    y = MXGemm.apply(x2, w, None, w_operands, None, (), (M, M), gemm_plan("dense", config, path))
    y = y.to(output_dtype(x))
    if bias is not None:
        y = y + bias.to(y.dtype)
    return y.reshape(*lead, N)


class MXFP8Linear(nn.Linear):
    """Drop-in nn.Linear whose three GEMMs run on MXFP8 operands quantized by mxq with the recipe ``config``
    (default: ``mxq.MXFP8Config()``), kept as ``self.mxfp8_config``; see the module docstring.

    Inputs and weights are cast to bf16 for quantization (fp32 master weights keep their dtype; the cast is part of
    the autograd graph); the output has the input's dtype, or autocast's inside an autocast region, as nn.Linear's. in_features and out_features must be multiples of 32 (ValueError here);
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
        config = check_config("MXFP8Linear", config)
        check_multiple("MXFP8Linear", "in_features", in_features, format_block(config))
        check_multiple("MXFP8Linear", "out_features", out_features, format_block(config))
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
        M, block = math.prod(x.shape[:-1]), format_block(self.mxfp8_config)
        if M % block:
            raise ValueError(
                f"MXFP8Linear: the token count (the product of the input's leading dims) must be a multiple of "
                f"{block}, got {M} for input shape {tuple(x.shape)}; pad the batch (mxq pads nothing itself)"
            )
        return mxfp8_linear(x, self.weight, self.bias, config=self.mxfp8_config)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, config={self.mxfp8_config}"
