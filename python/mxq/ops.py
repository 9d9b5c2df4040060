"""Typed wrappers over torch.ops.mxq (registered by the extension that ``import mxq`` loads).

Layouts (SPEC §5-§6), x bf16 (M, K) contiguous, M and K multiples of 128 on the GPU (32 on the CPU reference):

    q_row  float8_e4m3fn  (M, K), row-major
    s_row  float8_e8m0fnu (roundup(M,128), roundup(K/32,4)): blocked S_row (M-groups with offs: byte-identical
                          to dense for the supported 128-multiple groups)
    q_col  float8_e4m3fn  logical (M, K), strides (1, M): q_col.t() is the row-major (K, M) array the kernels
                          write, row k = column k of x quantized in 32x1 blocks
    s_col  float8_e8m0fnu (roundup(K,128), roundup(M/32,4)) blocked S_col, or with offs the K-groups layout of
                          shape (roundup(K,128), M/32 + 4G)

Every op runs on the current CUDA stream without synchronizing, allocates with the caching allocator (CUDA-graph
capturable) and works under torch.compile(fullgraph=True). The CPU dispatch of each op is the bit-exact C++
reference. Wrong dtypes raise TypeError, bad values ValueError, wrong devices and core errors RuntimeError.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_ops = torch.ops.mxq

_SCALING_MODES = ("rceil", "floor")
_BACKENDS = ("cuda", "fused")
GROUP_ALIGN = 128  # group boundaries (offs entries) must be multiples of this (SPEC §6 seed scope)
MAX_GROUPS = 1024


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
    scaling_mode: str = "rceil",
    offs: Tensor | None = None,
    backend: str = "cuda",
) -> MXTensors:
    """MXFP8-quantizes the bf16 (M, K) tensor ``x`` along K (rowwise, 1x32) and/or along M (colwise, 32x1).

    ``offs`` (int32, G cumulative end offsets along M, on x's device) selects grouped (MoE) mode: s_col then uses
    the K-groups layout. On the GPU a malformed ``offs`` is clamped on the device without an exception (no host
    sync); call :func:`validate_offs` first if you want one.

    ``backend`` picks the implementation of the two-axis quantization: ``"cuda"`` is the composed path (rowwise
    kernel, colwise kernel, swizzle), ``"fused"`` the single-pass fused kernel; both give identical bytes. A
    single axis has one implementation, so ``backend="fused"`` with only one axis requested is an error rather
    than a silent switch.
    """
    if scaling_mode not in _SCALING_MODES:
        raise ValueError(f'mxq.quantize: scaling_mode must be "rceil" or "floor", got {scaling_mode!r}')
    if backend not in _BACKENDS:
        raise ValueError(f'mxq.quantize: backend must be "cuda" or "fused", got {backend!r}')
    if rowwise and colwise:
        op = _ops.quantize_1x32_32x1 if backend == "fused" else _ops.quantize_1x32_32x1_composed
        q_row, s_row, q_col, s_col = op(x, 32, scaling_mode, offs)
        return MXTensors(q_row, s_row, q_col, s_col)
    if backend == "fused":
        raise ValueError(
            'mxq.quantize: backend="fused" quantizes both axes in one pass; it needs rowwise=True and colwise=True'
        )
    if rowwise:
        q_row, s_row = _ops.quantize_1x32(x, 32, scaling_mode, offs)
        return MXTensors(q_row, s_row, None, None)
    if colwise:
        q_col, s_col = _ops.quantize_32x1(x, 32, scaling_mode, offs)
        return MXTensors(None, None, q_col, s_col)
    raise ValueError("mxq.quantize: at least one of rowwise and colwise must be True")


def dequantize(q: Tensor, scales: Tensor, offs: Tensor | None = None) -> Tensor:
    """bf16 (rows, cols) from contiguous e4m3 ``q`` (rows, cols) and the blocked scales of its (rows, cols/32)
    blocks along cols; with ``offs`` the scales are in the K-groups layout (cols are tokens, tail tokens give 0).
    Each element is bf16(e4m3(q) * 2^(s - 127)), the fp32 product rounded once; scale 255 gives NaN."""
    return _ops.dequantize(q, scales, offs)


def dequantize_rowwise(q_row: Tensor, s_row: Tensor) -> Tensor:
    """The bf16 (M, K) tensor that (q_row, s_row) encode."""
    return _ops.dequantize(q_row, s_row, None)


def dequantize_colwise(q_col: Tensor, s_col: Tensor, offs: Tensor | None = None) -> Tensor:
    """The bf16 (M, K) tensor that (q_col, s_col) encode, as a (1, M)-strided view like q_col."""
    return _ops.dequantize(q_col.t(), s_col, offs).t()


def validate_offs(offs: Tensor, M: int) -> None:
    """Host-side check of grouped-mode offsets (SPEC §6, §9); copies ``offs`` to the host, so it synchronizes.

    Raises TypeError/ValueError naming the first bad entry: offs must be a 1-D int32 tensor of 1..1024
    cumulative end offsets, non-decreasing, non-negative, at most M, each a multiple of 128.
    """
    if not isinstance(offs, Tensor):
        raise TypeError(f"mxq.validate_offs: offs must be a torch.Tensor, got {type(offs).__name__}")
    if offs.dtype != torch.int32:
        raise TypeError(f"mxq.validate_offs: offs must be int32, got {offs.dtype}")
    if offs.dim() != 1:
        raise ValueError(f"mxq.validate_offs: offs must be 1-D (G,), got shape {tuple(offs.shape)}")
    G = offs.numel()
    if not 1 <= G <= MAX_GROUPS:
        raise ValueError(f"mxq.validate_offs: offs must hold 1 to {MAX_GROUPS} group end offsets, got G={G}")
    values = offs.tolist()  # the one host synchronization
    prev = 0
    for g, end in enumerate(values):
        if end < 0:
            raise ValueError(f"mxq.validate_offs: offs[{g}]={end} is negative")
        if end < prev:
            raise ValueError(
                f"mxq.validate_offs: offs must be non-decreasing, got offs[{g}]={end} after offs[{g - 1}]={prev}"
            )
        if end > M:
            raise ValueError(f"mxq.validate_offs: offs[{g}]={end} exceeds M={M}")
        if end % GROUP_ALIGN != 0:
            raise ValueError(
                f"mxq.validate_offs: offs[{g}]={end} is not a multiple of {GROUP_ALIGN} (group sizes must be)"
            )
        prev = end


def has_cuda_kernels() -> bool:
    """True when the loaded extension registered CUDA impls (built with nvcc and a CUDA-enabled torch)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("mxq::quantize_1x32", "CUDA")
