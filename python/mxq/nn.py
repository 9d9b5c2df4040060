"""mxq.nn: convert a model's layers to MXFP8 in place (docs/training.md).

    summary = mxq.nn.convert(model, include=None, exclude=None, weight_scaling="32x32",
                             activation_quantization_backend="fused")
    print(summary)          # a table of converted and skipped modules, with the reason for each skip

What is converted:

- every ``torch.nn.Linear`` (the class itself, not subclasses, whose forward may differ) whose in_features and
  out_features are multiples of 32 becomes an :class:`mxq.MXFP8Linear`;
- every expert module — a module declaring the expert-module interface below — whose dimensions are multiples of 32
  becomes an :class:`mxq.MXFP8GroupedExperts`.

The new modules hold the **same Parameter objects** as the old ones (nothing is copied; an optimizer built before
the conversion keeps working, tied weights stay tied); a module reachable under several names is replaced everywhere
by one new module. Modules are selected by fully qualified name (``model.named_modules()`` names, e.g.
``"layers.3.ffn.experts"``) with fnmatch patterns: ``include`` (None = every candidate) and then ``exclude``.
Candidates that are not converted are listed in the summary's ``skipped`` with the reason (not included, excluded,
a dimension not a multiple of 32, already MXFP8, a subclass of nn.Linear, the root module).

Expert-module interface (mxq.moe's docstring has the same text):

- ``mxq_experts``: the string ``"swiglu"`` or ``"linear"`` (a class or instance attribute): the opt-in marker;
- parameters: ``"swiglu"``: ``w1`` (G, H, D), ``w2`` (G, D, H), ``w3`` (G, H, D); ``"linear"``: ``weight`` (G, N, K);
- ``forward(x, offs)``: x (M, D) tokens sorted by expert, offs (G,) int32 cumulative group ends (multiples of 32,
  empty groups allowed, rows past offs[-1] are padding whose output is 0); returns
  ``(silu(x_g W1_gᵀ) * (x_g W3_gᵀ)) W2_gᵀ`` per group (``"swiglu"``) or ``x_g W_gᵀ`` (``"linear"``).

:class:`mxq.moe.GroupedExperts` is a high-precision implementation of it.

``with mxq.nn.reuse_quantized_weights(): ...`` quantizes each MXFP8 layer's weight once for several microbatches
between optimizer steps (docs/training.md).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import NamedTuple

import torch.nn as tnn

from .linear import (
    MXFP8Linear,
    check_choice,
    check_options,
    reuse_quantized_weights,
)
from .moe import GROUPED_GEMMS, MXFP8GroupedExperts, expert_dims, is_expert_module

__all__ = ["ConversionSummary", "Converted", "Skipped", "convert", "reuse_quantized_weights"]


class Converted(NamedTuple):
    name: str
    source: str  # the replaced module's class name
    target: str  # the new module's class name
    detail: str  # shapes


class Skipped(NamedTuple):
    name: str
    type: str
    reason: str


class ConversionSummary(NamedTuple):
    """What :func:`convert` did: ``converted`` and ``skipped`` lists; ``str()`` renders both as a table."""

    converted: list[Converted]
    skipped: list[Skipped]

    def __str__(self) -> str:
        lines = [f"mxq.nn.convert: {len(self.converted)} converted, {len(self.skipped)} skipped"]
        if self.converted:
            w = max(len(c.name) for c in self.converted)
            lines.append("converted:")
            lines += [f"  {c.name:<{w}}  {c.source} -> {c.target}  {c.detail}" for c in self.converted]
        if self.skipped:
            w = max(len(s.name) for s in self.skipped)
            lines.append("skipped:")
            lines += [f"  {s.name:<{w}}  {s.type}: {s.reason}" for s in self.skipped]
        return "\n".join(lines)


def _patterns(owner: str, name: str, value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable):
        out = list(value)
        if all(isinstance(p, str) for p in out):
            return out
    raise ValueError(f"{owner}: {name} must be None, a pattern string or a list of them, got {value!r}")


def _candidate_kind(m: tnn.Module) -> str | None:
    if isinstance(m, (MXFP8Linear, MXFP8GroupedExperts)):
        return "mxfp8"
    if isinstance(m, tnn.Linear):
        return "linear"
    if is_expert_module(m):
        return "experts"
    return None


def convert(
    model: tnn.Module,
    *,
    include=None,
    exclude=None,
    weight_scaling: str = "32x32",
    activation_quantization_backend: str = "fused",
    x_colwise: str = "high_precision",
    scaling_mode: str = "rceil",
    gemm: str = "auto",
    grouped_gemm: str = "auto",
) -> ConversionSummary:
    """Swaps ``model``'s nn.Linear and expert modules for MXFP8 ones in place (module docstring) and returns the
    summary. ``include`` / ``exclude``: an fnmatch pattern or a list of them, matched against fully qualified module
    names. The MXFP8 options go to every new module: ``weight_scaling`` ("32x32" default, "1x32"),
    ``activation_quantization_backend`` (the activation-gradient quantization, "fused" default, "composed"),
    ``x_colwise``, ``scaling_mode`` ("rceil" default), ``gemm`` (MXFP8Linear: "auto", "emulated", "scaled_mm") and
    ``grouped_gemm`` (experts: "auto", "emulated", "scaled_grouped_mm"). Raises ValueError for a bad option; an
    unconvertible module is skipped, not an error."""
    owner = "mxq.nn.convert"
    if not isinstance(model, tnn.Module):
        raise TypeError(f"{owner}: model must be a torch.nn.Module, got {type(model).__name__}")
    inc = _patterns(owner, "include", include)
    exc = _patterns(owner, "exclude", exclude)
    check_options(owner, weight_scaling, activation_quantization_backend, x_colwise, scaling_mode, gemm)
    check_choice(owner, "grouped_gemm", grouped_gemm, GROUPED_GEMMS)
    common = {
        "weight_scaling": weight_scaling,
        "activation_quantization_backend": activation_quantization_backend,
        "x_colwise": x_colwise,
        "scaling_mode": scaling_mode,
    }
    linear_opts = {**common, "gemm": gemm}
    expert_opts = {**common, "gemm": grouped_gemm}

    converted: list[Converted] = []
    skipped: list[Skipped] = []
    decided: dict[int, tnn.Module | None] = {}  # id(old module) -> its replacement (None: keep)

    def decide(name: str, m: tnn.Module, kind: str) -> tnn.Module | None:
        tname = type(m).__name__
        if kind == "mxfp8":
            skipped.append(Skipped(name, tname, "already MXFP8"))
            return None
        if inc is not None and not any(fnmatch.fnmatchcase(name, p) for p in inc):
            skipped.append(Skipped(name, tname, f"not matched by include {inc}"))
            return None
        hit = next((p for p in exc or () if fnmatch.fnmatchcase(name, p)), None)
        if hit is not None:
            skipped.append(Skipped(name, tname, f"excluded by pattern {hit!r}"))
            return None
        if kind == "linear":
            if type(m) is not tnn.Linear:
                skipped.append(Skipped(name, tname, "a subclass of nn.Linear (its forward may differ); not converted"))
                return None
            bad = [f"{a}={getattr(m, a)}" for a in ("in_features", "out_features") if getattr(m, a) % 32]
            if bad:
                skipped.append(Skipped(name, tname, f"{', '.join(bad)} not a multiple of 32"))
                return None
            new = MXFP8Linear.from_linear(m, share_parameters=True, **linear_opts)
            detail = f"({m.out_features}, {m.in_features}) bias={m.bias is not None}"
        else:
            try:
                G, D, H = expert_dims(m)
            except ValueError as e:
                skipped.append(Skipped(name, tname, str(e)))
                return None
            bad = [f"{a}={v}" for a, v in (("dim", D), ("hidden_dim", H)) if v % 32]
            if bad:
                skipped.append(Skipped(name, tname, f"{', '.join(bad)} not a multiple of 32"))
                return None
            new = MXFP8GroupedExperts.from_experts(m, share_parameters=True, **expert_opts)
            detail = f"{m.mxq_experts}: G={G}, dim={D}, hidden_dim={H}"
        new.train(m.training)
        converted.append(Converted(name, tname, type(new).__name__, detail))
        return new

    root_kind = _candidate_kind(model)
    if root_kind is not None:
        skipped.append(
            Skipped("", type(model).__name__, "the root module cannot be replaced in place (convert its parent)")
        )
    # Decide in named_modules order (each module once, however many names it has); nothing inside a converted
    # module is visited (it goes away with it).
    gone: list[str] = []
    for name, m in model.named_modules(remove_duplicate=False):
        kind = _candidate_kind(m)
        if not name or kind is None or id(m) in decided or any(name.startswith(g + ".") for g in gone):
            continue
        decided[id(m)] = decide(name, m, kind)
        if decided[id(m)] is not None:
            gone.append(name)
    # Replace along every (parent, child) edge, so a module registered under several names is replaced under all.
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):  # named_children() would skip repeats
            new = decided.get(id(child))
            if new is not None:
                setattr(parent, child_name, new)
    return ConversionSummary(converted, skipped)
