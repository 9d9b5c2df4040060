"""TorchTitan's model converter for mxq: its models train in MXFP8 after one line of config (docs/training.md,
"With TorchTitan").

Importing this module imports torchtitan and offers the converter in the form that TorchTitan release has:

- **torchtitan ≥ 0.3** (model-config converters): ``MXQConverter`` is a ``QuantizationConverter`` with a ``Config``
  dataclass and ``convert(model_config)``; put ``MXQConverter.Config()`` in a model registry's ``converters`` list::

      from mxq.integrations.torchtitan import MXQConverter
      spec = deepseek_v3.model_registry("debugmodel", converters=[MXQConverter.Config()])

  It wraps the root model config, so that building the model converts it in place with :func:`mxq.nn.convert`;
  ``MXQConverter.Config(recipe=..., include=[...], exclude=[...])`` picks the recipe and the modules.
- **torchtitan 0.2** (registered module converters): ``MXQConverter(job_config, parallel_dims)`` with
  ``convert(model)``, registered under the name ``"mxq"``: ``--experimental.custom_import
  mxq.integrations.torchtitan --model.converters mxq`` (or the same two keys in a TOML job config). It uses the
  defaults of ``MXQConverter.Config``.

What is converted: every ``Linear`` that keeps nn.Linear's forward and every expert module (the ``_grouped_mm`` seam,
3-D ``w1``/``w2``/``w3``, or mxq's marker) whose GEMM dimensions are multiples of 32, except the router gates by
default (TorchTitan computes router scores in fp32 for load-balancing stability). Groups of any size are padded on the
device, so TorchTitan's local token dispatcher needs no change. Below SM100 the GEMMs are emulated (dequantize with
mxq's kernels + a bf16 GEMM), on SM100+ they are ``torch._scaled_mm`` / ``torch._scaled_grouped_mm``; the recipe's
``gemm`` field can force either. The conversion summary of the last model converted is ``last_summary`` (and logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields

from ..config import MXFP8Config
from ..nn import ConversionSummary, convert

try:
    import torchtitan  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"mxq.integrations.torchtitan needs torchtitan (import torchtitan failed: {e}); pip install torchtitan"
    ) from e

try:  # torchtitan >= 0.3: converters transform the model config tree
    from torchtitan.components.quantization import QuantizationConverter
    from torchtitan.protocols.model import ModelConfigConverter  # noqa: F401 (only 0.3 has it)
except ImportError:
    QuantizationConverter = None

logger = logging.getLogger(__name__)
last_summary: ConversionSummary | None = None
"""The summary of the last model this module converted."""

DEFAULT_EXCLUDE = ("*router.gate",)


@dataclass(kw_only=True)
class Settings:
    """What the converter does: the named recipe (``mxq.config.RECIPES``) and fnmatch patterns over module names
    (``include`` empty: every candidate)."""

    recipe: str = "mxfp8_rceil"
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))

    def mxfp8_config(self) -> MXFP8Config:
        return MXFP8Config.recipe(self.recipe)


def convert_model(model, settings: Settings, config: MXFP8Config) -> ConversionSummary:
    """Converts a built TorchTitan model in place and records, logs and returns the summary."""
    global last_summary
    last_summary = convert(model, config=config, include=settings.include or None, exclude=settings.exclude)
    logger.info("mxq: converted the model to MXFP8 (recipe %s)\n%s", settings.recipe, last_summary)
    return last_summary


if QuantizationConverter is not None:

    class MXQConverter(QuantizationConverter):
        """mxq's MXFP8 training as a TorchTitan model-config converter (module docstring)."""

        @dataclass(kw_only=True, slots=True)
        class Config(QuantizationConverter.Config):
            recipe: str = "mxfp8_rceil"
            """mxq's named recipe: "mxfp8_rceil" (RCEIL scales, 32x32 weight tiles), "mxfp8_floor",
            "mxfp8_rceil_1x32"."""
            include: list[str] = field(default_factory=list)
            """fnmatch patterns over module names to convert (empty: every candidate)."""
            exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
            """fnmatch patterns over module names to leave alone (default: the router gates)."""

        def __init__(self, config: Config, **kwargs):
            self.settings = Settings(recipe=config.recipe, include=list(config.include), exclude=list(config.exclude))
            self.mxfp8_config = self.settings.mxfp8_config()  # a bad recipe name fails here, before any build

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

else:
    from torchtitan.protocols.model_converter import register_model_converter

    class MXQConverter:
        """mxq's MXFP8 training as a TorchTitan 0.2 model converter, registered as ``"mxq"`` (module docstring)."""

        Config = Settings

        def __init__(self, job_config=None, parallel_dims=None):
            self.settings = Settings()
            self.mxfp8_config = self.settings.mxfp8_config()

        def convert(self, model) -> None:
            convert_model(model, self.settings, self.mxfp8_config)

        def post_optimizer_hook(self, model) -> None:
            return None

    register_model_converter(MXQConverter, "mxq")
