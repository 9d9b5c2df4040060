"""MXFP8Linear: y = x Wᵀ (+ b) with every GEMM operand in MXFP8 (docs/numerics.md §11).

    GEMM                 A operand                      B operand
    forward  y  = x Wᵀ   x rowwise (1x32 along K)       W rowwise (along K)
    dgrad    dx = dy W   dy rowwise (along N)           W colwise (32x1 along N)
    wgrad    dW = dyᵀ x  dy colwise (along M)           x colwise (along M)

dy is needed on both axes at once; ``activation_quantization_backend`` picks how: ``"fused"`` (default) is the
one-read fused kernel, ``"composed"`` the three-kernel baseline (rowwise kernel, colwise kernel, swizzle). Both give the same
bytes, so outputs and gradients are bitwise identical. x's colwise copy comes from the high-precision x saved for
backward (``x_colwise="high_precision"``), or is produced in forward by the dual quantization and saved instead of
x (``"quantized"``); colwise data never comes from re-quantizing rowwise bytes. W's colwise copy is quantized from
the bf16 weight in backward.

GEMM: every product has the form A (R, C) · B (P, C)ᵀ with both operands quantized along C. On SM100+ it is
``torch._scaled_mm`` with the blocked E8M0 scales; below SM100 cuBLAS has no MX GEMM, so an emulated GEMM
dequantizes both operands with mxq's kernel and runs a bf16 matmul (fp32 accumulation). The capability is checked
up front (``gemm="auto"``); ``gemm="emulated"`` forces the emulation anywhere.

Shapes: the flattened token count M, in_features K and out_features N must be multiples of 32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_ops = torch.ops.mxq
_BACKENDS = ("fused", "composed")
_X_COLWISE = ("high_precision", "quantized")
_GEMMS = ("auto", "emulated", "scaled_mm")


def native_mx_gemm(device: torch.device) -> bool:
    """True where torch._scaled_mm runs MXFP8 (block-scaled e4m3 with E8M0 scales) natively: CUDA SM100+."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 10


def mx_gemm(qa: Tensor, sa: Tensor, qb: Tensor, sb: Tensor, gemm: str = "auto") -> Tensor:
    """bf16 (R, P) = A · Bᵀ for MXFP8 A (R, C) and B (P, C), both contiguous e4m3 quantized along C, with blocked
    scales of their (R, C/32) and (P, C/32) blocks."""
    if gemm == "scaled_mm" or (gemm == "auto" and native_mx_gemm(qa.device)):
        # B must be column-major: qb.t() is (C, P) with strides (1, C).
        return torch._scaled_mm(qa, qb.t(), sa.reshape(-1), sb.reshape(-1), out_dtype=torch.bfloat16)
    a = _ops.dequantize(qa, sa, None)
    b = _ops.dequantize(qb, sb, None)
    return a @ b.t()


def _dual(t: Tensor, backend: str, scaling_mode: str):
    op = _ops.quantize if backend == "fused" else _ops.quantize_composed
    return op(t, 32, scaling_mode, None)


class _MXFP8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, backend: str, x_colwise: str, scaling_mode: str, gemm: str):
        # x (M, K), w (N, K), both bf16 contiguous.
        if x_colwise == "quantized":
            q_x, s_x, q_x_col, s_x_col = _dual(x, backend, scaling_mode)
            ctx.save_for_backward(q_x_col, s_x_col, w)
        else:
            q_x, s_x = _ops.quantize_rowwise(x, 32, scaling_mode, None)
            ctx.save_for_backward(x, w)
        q_w, s_w = _ops.quantize_rowwise(w, 32, scaling_mode, None)
        ctx.config = (backend, x_colwise, scaling_mode, gemm)
        return mx_gemm(q_x, s_x, q_w, s_w, gemm)  # (M, N)

    @staticmethod
    def backward(ctx, dy: Tensor):
        backend, x_colwise, scaling_mode, gemm = ctx.config
        if x_colwise == "quantized":
            q_x_col, s_x_col, w = ctx.saved_tensors
        else:
            x, w = ctx.saved_tensors
        dy = dy.to(torch.bfloat16).contiguous()
        q_dy, s_dy, q_dy_col, s_dy_col = _dual(dy, backend, scaling_mode)  # (M, N) on both axes, one call
        dx = dw = None
        if ctx.needs_input_grad[0]:
            q_w_col, s_w_col = _ops.quantize_colwise(w, 32, scaling_mode, None)  # physical (K, N), along N
            dx = mx_gemm(q_dy, s_dy, q_w_col.t(), s_w_col, gemm)  # (M, N) · (K, N)ᵀ = (M, K)
        if ctx.needs_input_grad[1]:
            if x_colwise != "quantized":
                q_x_col, s_x_col = _ops.quantize_colwise(x, 32, scaling_mode, None)  # physical (K, M)
            dw = mx_gemm(q_dy_col.t(), s_dy_col, q_x_col.t(), s_x_col, gemm)  # (N, M) · (K, M)ᵀ = (N, K)
        return dx, dw, None, None, None, None


class MXFP8Linear(nn.Linear):
    """Drop-in nn.Linear whose three GEMMs run on MXFP8 operands quantized by mxq (see the module docstring).

    Inputs and weights are cast to bf16 for quantization (fp32 master weights keep their dtype; the cast is part of
    the autograd graph); the output is bf16.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        activation_quantization_backend: str = "fused",
        x_colwise: str = "high_precision",
        scaling_mode: str = "rceil",
        gemm: str = "auto",
    ) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if activation_quantization_backend not in _BACKENDS:
            raise ValueError(
                f'MXFP8Linear: activation_quantization_backend must be "fused" or "composed", '
                f"got {activation_quantization_backend!r}"
            )
        if x_colwise not in _X_COLWISE:
            raise ValueError(f'MXFP8Linear: x_colwise must be "high_precision" or "quantized", got {x_colwise!r}')
        if scaling_mode not in ("rceil", "floor"):
            raise ValueError(f'MXFP8Linear: scaling_mode must be "rceil" or "floor", got {scaling_mode!r}')
        if gemm not in _GEMMS:
            raise ValueError(f'MXFP8Linear: gemm must be "auto", "emulated" or "scaled_mm", got {gemm!r}')
        self.activation_quantization_backend = activation_quantization_backend
        self.x_colwise = x_colwise
        self.scaling_mode = scaling_mode
        self.gemm = gemm

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs) -> MXFP8Linear:
        """An MXFP8Linear sharing nothing with ``linear`` but holding copies of its weight and bias."""
        m = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
            **kwargs,
        )
        with torch.no_grad():
            m.weight.copy_(linear.weight)
            if linear.bias is not None:
                m.bias.copy_(linear.bias)
        return m

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(math.prod(lead), x.shape[-1]).to(torch.bfloat16).contiguous()
        w = self.weight.to(torch.bfloat16).contiguous()
        y = _MXFP8LinearFunction.apply(
            x2, w, self.activation_quantization_backend, self.x_colwise, self.scaling_mode, self.gemm
        )
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, activation_quantization_backend={self.activation_quantization_backend!r}, "
            f"x_colwise={self.x_colwise!r}, scaling_mode={self.scaling_mode!r}, gemm={self.gemm!r}"
        )
