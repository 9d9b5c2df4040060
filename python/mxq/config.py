"""MXFP8Config: the one recipe object of mxq's training layers (docs/training.md, "The recipe"), for every block format.

    cfg = mxq.MXFP8Config()                              # the default recipe, "mxfp8_rceil" (format "mxfp8")
    cfg = mxq.MXFP8Config.recipe("mxfp8_floor")          # a named recipe
    cfg = mxq.MXFP8Config(weight_scaling="1x32")         # any field changed; checked here, once
    mxq.MXFP8Linear(1024, 2048, config=cfg); mxq.grouped_mm(x, w, offs, config=cfg); mxq.nn.convert(model, config=cfg)

The recipe names its block format (``format``): "mxfp8" (e4m3 data, E8M0 scales per 32-element block) is the only
one implemented; the next (FP8 blockwise: 1x128 blocks, fp32 scales) becomes another value of that field, and so
another instance of this class, not a second config class. Every field is checked when the object is made (frozen afterwards), so the layers and GEMM entry points that take
it check nothing per call. Each op call still passes ``scaling_mode`` explicitly: nothing depends on an op's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .ops import check_type

# The choices of each field, first the default.
CHOICES = {
    # the block format: "mxfp8" = e4m3 data, E8M0 scales, 32-element blocks (docs/numerics.md)
    "format": ("mxfp8",),
    # the weight policy: one scale per 32x32 tile (one e4m3 byte set serves forward and dgrad), or 1x32 blocks on
    # each axis like an activation
    "weight_scaling": ("32x32", "1x32"),
    # the kernels that quantize activations and gradients on both axes: the one-read fused kernel or the
    # three-kernel composed baseline (same bytes)
    "activation_quantization_backend": ("fused", "composed"),
    # where wgrad's colwise x comes from: the bf16 x saved for backward, or quantized in forward and saved instead
    "x_colwise": ("high_precision", "quantized"),
    # the E8M0 scale rule (docs/numerics.md §3)
    "scaling_mode": ("rceil", "floor"),
    # the GEMMs: "auto" = native where the device has MXFP8 GEMMs (CUDA SM100+: torch._scaled_mm and
    # torch._scaled_grouped_mm), emulated elsewhere; "emulated" (dequantize + bf16 GEMM) anywhere; "native" forced
    "gemm": ("auto", "emulated", "native"),
}


@dataclass(frozen=True)
class MXFP8Config:
    """The training recipe: the block format, how each GEMM operand is quantized and where the GEMMs run. Fields and
    their choices (the first is the default) are ``CHOICES``; a value outside them is a ValueError, a value that is
    not a str a TypeError, both raised here. ``format`` is keyword-only (the other fields keep their positions)."""

    format: str = field(default="mxfp8", kw_only=True)
    weight_scaling: str = "32x32"
    activation_quantization_backend: str = "fused"
    x_colwise: str = "high_precision"
    scaling_mode: str = "rceil"
    gemm: str = "auto"

    def __post_init__(self) -> None:
        if isinstance(self.format, str) and self.format not in CHOICES["format"]:
            raise ValueError(
                f'mxq.MXFP8Config: format must be "mxfp8" (the only block format implemented; FP8 blockwise is '
                f'planned), got "{self.format}"'
            )
        for f in fields(self):
            check_choice("mxq.MXFP8Config", f.name, getattr(self, f.name), CHOICES[f.name])

    @classmethod
    def recipe(cls, name: str, **changes) -> MXFP8Config:
        """The named recipe (``RECIPES``), with ``changes`` applied to it."""
        check_choice("mxq.MXFP8Config.recipe", "name", name, tuple(RECIPES))
        return replace(RECIPES[name], **changes)


def check_choice(owner: str, name: str, value, choices) -> None:
    """TypeError for a value that is not a str, ValueError for a str outside ``choices``."""
    check_type(owner, name, value, str)
    if value not in choices:
        quoted = [f'"{c}"' for c in choices]
        listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise ValueError(f'{owner}: {name} must be {listed}, got "{value}"')


def check_config(owner: str, config) -> MXFP8Config:
    """``config`` itself, or the default recipe for None; TypeError for anything else."""
    if config is None:
        return DEFAULT
    if not isinstance(config, MXFP8Config):
        raise TypeError(f"{owner}: config must be a mxq.MXFP8Config or None, got {type(config).__name__}")
    return config


RECIPES = {
    # RCEIL scales, 32x32 weight tiles, fused activation kernels: the recipe mxq's layers default to
    "mxfp8_rceil": MXFP8Config(),
    # the same with FLOOR scales (the OCP MX specification's rule)
    "mxfp8_floor": MXFP8Config(scaling_mode="floor"),
    # RCEIL scales, weights in 1x32 blocks on each axis like the activations
    "mxfp8_rceil_1x32": MXFP8Config(weight_scaling="1x32"),
}
DEFAULT = RECIPES["mxfp8_rceil"]
