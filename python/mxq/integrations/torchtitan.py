"""TorchTitan's model converter for mxq: its models train in MXFP8 after one line of config (docs/training.md,
"With TorchTitan").

Importing this module imports torchtitan (0.3.x: model-config converters). ``MXQConverter`` is a
``QuantizationConverter`` with a ``Config`` dataclass and ``convert(model_config)``; put ``MXQConverter.Config()`` in a
model registry's ``converters`` list::

    from mxq.integrations.torchtitan import MXQConverter
    spec = deepseek_v3.model_registry("debugmodel", converters=[MXQConverter.Config()])

It wraps the root model config, so that building the model converts it in place with :func:`mxq.nn.convert`;
``MXQConverter.Config(recipe=..., include=[...], exclude=[...])`` picks the recipe and the modules. Every field is
checked when the Config is made, as ``mxq.MXFP8Config``'s are: ``include`` / ``exclude`` take one fnmatch pattern or a
list of them, the flags take bools, the names take one of their choices.

What is converted: every ``Linear`` that keeps nn.Linear's forward and every expert module (the ``_grouped_mm`` seam,
3-D ``w1``/``w2``/``w3``, or mxq's marker) whose GEMM dimensions are multiples of 32, except the router gates by
default (TorchTitan computes router scores in fp32 for load-balancing stability). Groups of any size are padded on the
device, so TorchTitan's local token dispatcher works unchanged. Below SM100 the GEMMs are emulated (dequantize with
mxq's kernels + a bf16 GEMM), on SM100+ they are ``torch._scaled_mm`` / ``torch._scaled_grouped_mm``; the recipe's
``gemm`` field can force either. The conversion summary of the last model converted is ``last_summary`` (and logged).

**The token dispatcher** (``token_dispatcher=True``, the default): a ``RoutedExperts`` block (its
own forward, TorchTitan's SwiGLU ``GroupedExperts`` forward, converted by the seam) whose dispatcher is local —
``LocalTokenDispatcher``, or ``AllToAllTokenDispatcher``, which dispatches locally without an expert-parallel mesh —
gets :class:`mxq.TokenDispatcher` instead: its class is swapped for ``MXFP8RoutedExperts`` (the same module object)
whose forward is dispatch (the routed x quantized once, both axes) → the experts' GEMMs on the pre-quantized operands
→ combine (the last GEMM and the score-weighted scatter-add; its backward quantizes d(routed y) with the scores in one
pass), on the inner experts' parameters (docs/training.md, "The token dispatcher"). It is a local dispatcher: wiring an
expert-parallel mesh into it later is an error. The summary lists each swapped block.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields

from ..config import RECIPES, MXFP8Config, check_choice
from ..dispatch import TokenDispatcher, check_routed_quantization
from ..nn import ConversionSummary, Converted, Skipped, check_patterns, class_name, convert
from ..ops import check_type

try:
    from torchtitan.components.quantization import QuantizationConverter
    from torchtitan.models.common.moe import GroupedExperts as TitanGroupedExperts
    from torchtitan.models.common.moe import RoutedExperts
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher, LocalTokenDispatcher
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"mxq.integrations.torchtitan needs torchtitan 0.3.x ({e}); pip install torchtitan==0.3.0 "
        '(docs/training.md, "With TorchTitan", says which versions run where)'
    ) from e

logger = logging.getLogger(__name__)
last_summary: ConversionSummary | None = None
"""The summary of the last model this module converted."""

DEFAULT_EXCLUDE = ("*router.gate",)


def convert_model(model, settings, config: MXFP8Config) -> ConversionSummary:
    """Converts a built TorchTitan model in place with ``settings`` (an ``MXQConverter.Config``) and records, logs
    and returns the summary."""
    global last_summary
    last_summary = convert(model, config=config, include=settings.include or None, exclude=settings.exclude)
    if settings.token_dispatcher:
        swap_token_dispatchers(model, last_summary, config, settings.routed_quantization)
    logger.info("mxq: converted the model to MXFP8 (recipe %s)\n%s", settings.recipe, last_summary)
    return last_summary


# ---- the token dispatcher ----


def _routed_experts_forward(self, x_BLD, topk_scores_BLK, topk_expert_ids_BLK, num_local_tokens_per_expert_E):
    """TorchTitan's RoutedExperts.forward with mxq's dispatcher: dispatch (routed x quantized once) -> SwiGLU on the
    pre-quantized operands -> combine. The counts are recomputed from the expert ids (equal for top-k routing)."""
    B, L, D = x_BLD.shape
    K = topk_scores_BLK.shape[-1]
    e = self.inner_experts
    ws = [getattr(e, n) for n in ("w1_EFD", "w2_EDF", "w3_EFD")]
    ws = [w.to_local() if hasattr(w, "to_local") else w for w in ws]  # DTensor parameters, as TorchTitan's forward
    d = self.token_dispatcher
    routed = d.dispatch(
        x_BLD.reshape(B * L, D), topk_scores_BLK.reshape(B * L, K), topk_expert_ids_BLK.reshape(B * L, K)
    )
    return d.swiglu(routed, *ws).view(B, -1, D)


_routed_classes: dict[type, type] = {}


def _mxfp8_routed_class(cls: type) -> type:
    if cls not in _routed_classes:
        body = {"forward": _routed_experts_forward, "__module__": cls.__module__}
        _routed_classes[cls] = type(f"MXFP8{cls.__name__}", (cls,), body)
    return _routed_classes[cls]


def _dispatcher_plan(m) -> str | None:
    """None when ``m`` (a RoutedExperts) can take mxq's dispatcher, else the reason it cannot."""
    if type(m).forward is not RoutedExperts.forward:
        return f"overrides forward ({type(m).__qualname__}.forward)"
    d, e = m.token_dispatcher, m.inner_experts
    if type(d) not in (LocalTokenDispatcher, AllToAllTokenDispatcher):
        return f"{type(d).__name__} is an expert-parallel dispatcher; mxq's dispatcher is local"
    if getattr(d, "ep_mesh", None) is not None:
        return "an expert-parallel mesh is wired; mxq's dispatcher is local"
    if not isinstance(getattr(e, "mxfp8_config", None), MXFP8Config):
        return "its inner experts were not converted"
    if not isinstance(e, TitanGroupedExperts) or type(e).forward is not TitanGroupedExperts.forward:
        return f"its inner experts ({type(e).__name__}) are not TorchTitan's SwiGLU GroupedExperts"
    return None


def swap_token_dispatchers(
    model, summary: ConversionSummary, config: MXFP8Config, routed_quantization: str = "fused"
) -> ConversionSummary:
    """Gives each of ``model``'s TorchTitan ``RoutedExperts`` blocks whose experts mxq converted an
    :class:`mxq.TokenDispatcher` (module docstring), in place, and records each block in ``summary`` (converted, or
    skipped with the reason)."""
    swapped = set()
    for name, m in model.named_modules():
        if not isinstance(m, RoutedExperts) or isinstance(getattr(m, "mxfp8_config", None), MXFP8Config):
            continue
        reason = _dispatcher_plan(m)
        tname = class_name(type(m))
        if reason is not None:
            summary.skipped.append(Skipped(name, tname, f"token dispatcher not swapped: {reason}"))
            swapped.add(name)
            continue
        old = type(m.token_dispatcher).__name__
        m.token_dispatcher = TokenDispatcher(
            m.inner_experts.num_experts, config=config, routed_quantization=routed_quantization
        )
        m.__class__ = _mxfp8_routed_class(type(m))
        m.mxfp8_config = config
        detail = f'token_dispatcher {old} -> mxq.TokenDispatcher (routed_quantization="{routed_quantization}")'
        summary.converted.append(Converted(name, tname, type(m).__name__, detail))
        swapped.add(name)
    summary.others[:] = [o for o in summary.others if o.name not in swapped]
    return summary


class MXQConverter(QuantizationConverter):
    """mxq's MXFP8 training as a TorchTitan model-config converter (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(QuantizationConverter.Config):
        recipe: str = "mxfp8_rceil"
        """mxq's named recipe: "mxfp8_rceil" (RCEIL scales, 32x32 weight tiles), "mxfp8_floor",
        "mxfp8_rceil_1x32"."""
        include: list[str] = field(default_factory=list)
        """fnmatch patterns over module names to convert: one pattern or a list (empty: every candidate)."""
        exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
        """fnmatch patterns over module names to leave alone: one pattern or a list (default: the router gates)."""
        token_dispatcher: bool = True
        """Swap the local token dispatcher of MoE blocks whose experts are converted for mxq.TokenDispatcher."""
        routed_quantization: str = "fused"
        """mxq.TokenDispatcher's routed quantization: "fused" (the one-pass op) or "composed"."""

        def __post_init__(self) -> None:
            """Checks every field once, as mxq.MXFP8Config does: a wrong type is a TypeError, a wrong name a
            ValueError, each naming the field; a single pattern string becomes a one-element list."""
            owner = "mxq.integrations.torchtitan.MXQConverter.Config"
            self.include = check_patterns(owner, "include", self.include)
            self.exclude = check_patterns(owner, "exclude", self.exclude)
            check_type(owner, "token_dispatcher", self.token_dispatcher, bool)
            check_type(owner, "model_compile_enabled", self.model_compile_enabled, bool)
            check_choice(owner, "recipe", self.recipe, tuple(RECIPES))
            check_routed_quantization(owner, self.routed_quantization)

    def __init__(self, config: Config, **kwargs):
        self.settings = config
        self.mxfp8_config = MXFP8Config.recipe(config.recipe)
        if config.token_dispatcher:  # a routed quantization this build lacks fails here, before any build
            TokenDispatcher(1, config=self.mxfp8_config, routed_quantization=config.routed_quantization)

    def convert(self, model_config):
        """The model config, wrapped so that ``build()`` converts the model it builds."""
        base = type(model_config)
        settings, mxfp8_config = self.settings, self.mxfp8_config

        class MXQConfig(base):  # the pattern of TorchTitan's own frozen-config subclasses (components/lora.py)
            def build(self, **kwargs):
                model = base.build(self, **kwargs)
                convert_model(model, settings, mxfp8_config)
                return model

        MXQConfig.__name__ = f"MXQ{base.__name__}"
        MXQConfig.__qualname__ = f"MXQ{base.__qualname__}"
        return MXQConfig(**{f.name: getattr(model_config, f.name) for f in fields(model_config) if f.init})
