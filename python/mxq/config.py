"""MXFP8Config: the one recipe object of mxq's training layers (docs/training.md, "The recipe"), for every block format.

    cfg = mxq.MXFP8Config()                              # the default recipe, "mxfp8_rceil" (format "mxfp8")
    cfg = mxq.MXFP8Config.recipe("mxfp8_floor")          # a named recipe
    cfg = mxq.MXFP8Config(weight_scaling="1x32")         # any field changed; checked here, once
    mxq.MXFP8Linear(1024, 2048, config=cfg); mxq.grouped_mm(x, w, offs, config=cfg); mxq.nn.convert(model, config=cfg)

The recipe names its block format (``format``): "mxfp8" (e4m3 data, E8M0 scales per 32-element block) or
"fp8_blockwise" (e4m3 data, an fp32 factor per 1x128 activation block and per 128x128 weight tile: Hopper's native
recipe; ``MXFP8Config.recipe("fp8_blockwise")``) — another instance of this class, not a second config class. The
fields whose choices depend on the format (``FORMAT_CHOICES``) default to None, which means the format's default
(``ops.FORMAT_DEFAULTS``), resolved when the object is made. Every field is checked then (frozen afterwards), so the layers and GEMM
entry points that take it check nothing per call. Each op call still passes ``scaling_mode`` explicitly: nothing
depends on an op's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .ops import FORMAT_DEFAULTS, check_type

# The choices of each field, first the default.
CHOICES = {
    # the block format: "mxfp8" = e4m3 data, E8M0 scales, 32-element blocks (docs/numerics.md); "fp8_blockwise" =
    # e4m3 data, fp32 factors of 1x128 blocks and 128x128 weight tiles (docs/numerics.md §13)
    "format": ("mxfp8", "fp8_blockwise"),
    # the weight policy: one scale per 32x32 tile (one e4m3 byte set serves forward and dgrad), 1x32 blocks on
    # each axis like an activation, or (FP8 blockwise) one factor per 128x128 tile
    "weight_scaling": ("32x32", "1x32", "128x128"),
    # the kernels that quantize activations and gradients on both axes: the one-read fused kernel or the
    # three-kernel composed baseline (same bytes)
    "activation_quantization_backend": ("fused", "composed"),
    # where wgrad's colwise x comes from: the bf16 x saved for backward, or quantized in forward and saved instead
    "x_colwise": ("high_precision", "quantized"),
    # the scale rule: MXFP8's E8M0 rules (docs/numerics.md §3), FP8 blockwise's fp32 factor or power of two (§13)
    "scaling_mode": ("rceil", "floor", "fp32"),
    # the GEMMs: "auto" = native where the device has the format's GEMMs (MXFP8: CUDA SM100+, torch._scaled_mm and
    # torch._scaled_grouped_mm; FP8 blockwise: CUDA SM90, F.scaled_mm), emulated elsewhere; "emulated" (dequantize
    # + a GEMM) anywhere; "native" forced
    "gemm": ("auto", "emulated", "native"),
}
# Per format, the fields whose choices it narrows (a None weight_scaling / scaling_mode is the format's default,
# ops.FORMAT_DEFAULTS).
FORMAT_CHOICES = {
    "mxfp8": {"weight_scaling": ("32x32", "1x32"), "scaling_mode": ("rceil", "floor")},
    # the composed baseline has no FP8 blockwise kernels (its swizzle is MXFP8's blocked layout)
    "fp8_blockwise": {
        "weight_scaling": ("128x128",),
        "scaling_mode": ("fp32", "rceil"),
        "activation_quantization_backend": ("fused",),
    },
}


@dataclass(frozen=True)
class MXFP8Config:
    """The training recipe: the block format, how each GEMM operand is quantized and where the GEMMs run. Fields and
    their choices (the first is the default) are ``CHOICES``; a value outside them is a ValueError, a value that is
    not a str a TypeError, both raised here. ``format`` is keyword-only (the other fields keep their positions)."""

    format: str = field(default="mxfp8", kw_only=True)
    weight_scaling: str | None = None  # the format's default (ops.FORMAT_DEFAULTS)
    activation_quantization_backend: str = "fused"
    x_colwise: str = "high_precision"
    scaling_mode: str | None = None  # the format's default (ops.FORMAT_DEFAULTS)
    gemm: str = "auto"

    def __post_init__(self) -> None:
        owner = "mxq.MXFP8Config"
        check_choice(owner, "format", self.format, CHOICES["format"])
        narrowed = FORMAT_CHOICES[self.format]
        for name, default in FORMAT_DEFAULTS[self.format].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)  # frozen: resolved once, here
        for f in fields(self):
            check_choice(owner, f.name, getattr(self, f.name), CHOICES[f.name])
        for name, choices in narrowed.items():
            check_choice(owner, name, getattr(self, name), choices, f' for format "{self.format}"')

    @classmethod
    def recipe(cls, name: str, **changes) -> MXFP8Config:
        """The named recipe (``RECIPES``), with ``changes`` applied to it."""
        check_choice("mxq.MXFP8Config.recipe", "name", name, tuple(RECIPES))
        return replace(RECIPES[name], **changes)


def check_choice(owner: str, name: str, value, choices, where: str = "") -> None:
    """TypeError for a value that is not a str, ValueError for a str outside ``choices`` (``where``: what narrows
    them, said after the choices)."""
    check_type(owner, name, value, str)
    if value not in choices:
        quoted = [f'"{c}"' for c in choices]
        listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        raise ValueError(f'{owner}: {name} must be {listed}{where}, got "{value}"')


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
    # FP8 blockwise (Hopper's native recipe, DeepSeek-V3's): fp32 factors amax / 448 of 1x128 activation and
    # gradient blocks and 128x128 weight tiles
    "fp8_blockwise": MXFP8Config(format="fp8_blockwise"),
    # the same with power-of-two factors (rule "rceil")
    "fp8_blockwise_pow2": MXFP8Config(format="fp8_blockwise", scaling_mode="rceil"),
}
DEFAULT = RECIPES["mxfp8_rceil"]
