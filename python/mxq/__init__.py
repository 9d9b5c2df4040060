"""mxq: MXFP8 (e4m3 data, E8M0 scales, 32-element blocks) and FP8 blockwise (e4m3 data, fp32 factors, 128-element
blocks and 128x128 weight tiles) quantization kernels as PyTorch ops.

``import mxq`` loads the compiled extension, which registers ``torch.ops.mxq.*`` (schemas, CUDA, CPU-reference
and Meta impls; see torch_ext/ops.cpp). The typed Python API:

    mxq.quantize(x, *, rowwise=True, colwise=True, scaling_mode=None, offs=None, backend="fused", out=None,
                 format="mxfp8")             # format="fp8_blockwise": 1x128 blocks, fp32 factors; mode None: "fp32"
    mxq.dequantize(q, scales, offs=None, *, layout="blocked", format="mxfp8")   # also dequantize_rowwise / _colwise
    mxq.validate_offs(offs, M)
    mxq.quantize_weight(w, *, scaling_mode=None, weight_scaling=None, rowwise=True, colwise=True, format="mxfp8")
    mxq.quantize_routed(x, index, counts, *, scale=None, scaling_mode=None, rowwise=True, colwise=True, format="mxfp8")
    mxq.grouped_mm_fp8_blockwise(a, a_scale, b, b_scale, offs, *, grouping="m_grouped")  # FP8 blockwise experts'
                                              # GEMMs (m_grouped: forward/dgrad, k_grouped: wgrad; CUDA: SM90)
    mxq.MXFP8Config(...)                      # the training recipe (format="mxfp8"); MXFP8Config.recipe("mxfp8_rceil")
    mxq.MXFP8Linear(..., config=None)         # mxq.linear; mxq.mxfp8_linear(x, weight, bias, config=None)
    mxq.grouped_mm(x, w, offs, config=None)   # mxq.moe: MXFP8 grouped GEMM (MoE experts, groups of any size)
    mxq.MXFP8GroupedExperts(...)              # mxq.moe; mxq.GroupedExperts is the bf16 reference module
    mxq.TokenDispatcher(num_experts, config=None)  # mxq.dispatch: MoE dispatch/combine, routed x quantized once
    mxq.nn.convert(model, config=None)        # linears and expert modules to MXFP8, in place (docs/training.md)
    mxq.integrations.torchtitan               # TorchTitan's model converter (imports torchtitan; not loaded here)

Set MXQ_TORCH_LIBRARY to a built libmxq_torch.so to use a build tree instead of the installed library.
"""

from __future__ import annotations

import glob
import os

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(f"mxq's Python package needs PyTorch (import torch failed: {e})") from e


def _load_extension() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("MXQ_TORCH_LIBRARY")
    if not path:
        found = sorted(glob.glob(os.path.join(here, "libmxq_torch*.so")))
        if not found:
            raise ImportError(
                f"mxq: the compiled extension libmxq_torch.so is missing from {here}. Build and install the "
                "package with `pip install --no-build-isolation .` in an environment that has torch (and nvcc "
                "for the CUDA kernels), or point MXQ_TORCH_LIBRARY at a built libmxq_torch.so."
            )
        path = found[0]
    try:
        torch.ops.load_library(path)
    except OSError as e:
        raise ImportError(
            f"mxq: failed to load {path}: {e}. The extension must be built against the torch it is loaded "
            f"into (this is torch {torch.__version__}); rebuild with `pip install --no-build-isolation .`."
        ) from e
    return path


_library_path = _load_extension()

from . import nn
from .config import MXFP8Config
from .dispatch import RoutedTokens, TokenDispatcher
from .linear import MXFP8Linear, mxfp8_linear
from .moe import GroupedExperts, MXFP8GroupedExperts, bf16_grouped_mm, grouped_mm
from .ops import (
    MXTensors,
    RoutedMXTensors,
    combine,
    combine_score_grad,
    dequantize,
    dequantize_colwise,
    dequantize_rowwise,
    empty_quantized,
    grouped_mm_fp8_blockwise,
    has_cuda_kernels,
    quantize,
    quantize_routed,
    quantize_weight,
    validate_offs,
)

__all__ = [
    "GroupedExperts",
    "MXFP8Config",
    "MXFP8GroupedExperts",
    "MXFP8Linear",
    "MXTensors",
    "RoutedMXTensors",
    "RoutedTokens",
    "TokenDispatcher",
    "bf16_grouped_mm",
    "combine",
    "combine_score_grad",
    "dequantize",
    "dequantize_colwise",
    "dequantize_rowwise",
    "empty_quantized",
    "grouped_mm",
    "grouped_mm_fp8_blockwise",
    "has_cuda_kernels",
    "mxfp8_linear",
    "nn",
    "quantize",
    "quantize_routed",
    "quantize_weight",
    "validate_offs",
]
__version__ = "0.1.0"
