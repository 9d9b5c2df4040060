"""mxq.nn: convert a model's layers to MXFP8 in place (docs/training.md, "The converter").

    summary = mxq.nn.convert(model, config=mxq.MXFP8Config(), include=None, exclude=None)
    print(summary)          # every module: converted (how) or skipped (why), and the modules that are neither

Conversion is **in place and keeps every module object**: a converted module's class is swapped for an MXFP8
subclass of its own class (``MXFP8<Name>``; ``nn.Linear`` itself becomes :class:`mxq.MXFP8Linear`) that overrides
only the computation and holds the recipe as ``module.mxfp8_config``. Parameters, buffers, hooks, other methods
(TorchTitan's ``init_weights`` / ``init_states``), ``isinstance`` checks against the old class, state-dict keys and
the optimizer's parameter references all stay as they were; tied weights stay tied; a module reachable under
several names is converted once.

What is converted (each candidate must also have its GEMM dimensions multiples of 32, else it is skipped with that
reason):

- **Linears**: ``nn.Linear`` and every subclass whose ``forward`` is ``nn.Linear.forward`` (TorchTitan's ``Linear``,
  say). Safe because such a module computes exactly ``F.linear(x, self.weight, self.bias)`` from its own attributes,
  and the MXFP8 forward computes the MXFP8 form of that same expression from the same attributes; a subclass that
  overrides ``forward`` may compute anything else and is skipped, and so is ``nn.MultiheadAttention``'s
  ``out_proj`` (torch's ``NonDynamicallyQuantizableLinear``: its parent uses the weight without calling it).
- **Expert modules**, recognized in this order:

  1. ``mxq_experts = "swiglu"`` or ``"linear"`` (mxq's marker; the interface in mxq.moe's docstring): ``forward``
     becomes the interface's function on :func:`mxq.grouped_mm`;
  2. the grouped-GEMM seam ``_grouped_mm(A, B_t, offs)`` (TorchTitan 0.3's ``GroupedExperts`` and the experts built
     on it): only the seam is replaced, by ``mxq.grouped_mm(A, B_t.transpose(-2, -1), offs)`` — the module's own
     forward (routing of weights, activation, DTensor handling) is untouched;
  3. 3-D parameters ``w1``, ``w2``, ``w3`` (TorchTitan 0.2's ``GroupedExperts``): SwiGLU experts,
     ``(silu(x W1ᵀ) * (x W3ᵀ)) W2ᵀ`` per group; ``forward``'s second argument is token counts per expert when its
     name starts with ``num_tokens`` or ``counts``, cumulative ends when it starts with ``offs`` (any other name is
     skipped). Orientation, read from x's width D at each call: ``w1`` (G, H, D) is nn.Linear's (out, in) layout,
     ``w1`` (G, D, H) the transposed one; with D == H nothing can tell, and (out, in) — TorchTitan's layout — is
     taken (the summary says so).

Groups of any size are fine everywhere: :func:`mxq.grouped_mm` pads them on the device.

Modules are selected by fully qualified name (``model.named_modules()`` names) with fnmatch patterns: ``include``
(None = every candidate) and then ``exclude``.

``with mxq.nn.reuse_quantized_weights(): ...`` quantizes each MXFP8 layer's weight once for several microbatches
between optimizer steps (docs/training.md).
"""

from __future__ import annotations

import fnmatch
import inspect
from collections import Counter
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch import nn as tnn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from ._gemm import format_block
from .config import MXFP8Config, check_config
from .linear import MXFP8Linear, reuse_quantized_weights
from .moe import GroupedExperts, MXFP8GroupedExperts, expert_dims, grouped_mm, is_expert_module

__all__ = ["ConversionSummary", "Converted", "Skipped", "convert", "reuse_quantized_weights"]


class Converted(NamedTuple):
    name: str
    source: str  # the module's class before (class_name)
    target: str  # its MXFP8 subclass
    detail: str  # what runs in MXFP8, and the shapes


class Skipped(NamedTuple):
    name: str
    type: str
    reason: str


class ConversionSummary(NamedTuple):
    """What :func:`convert` decided for every module: ``converted`` and ``skipped`` (candidates: linears and expert
    modules) and ``others`` (every other module, named with its class). ``str()`` renders the first two as tables
    and counts the others by class."""

    converted: list[Converted]
    skipped: list[Skipped]
    others: list[Skipped]

    def __str__(self) -> str:
        counts = f"{len(self.converted)} converted, {len(self.skipped)} skipped, {len(self.others)} other modules"
        lines = [f"mxq.nn.convert: {counts}"]
        if self.converted:
            w = max(len(c.name) for c in self.converted)
            lines.append("converted:")
            lines += [f"  {c.name:<{w}}  {c.source} -> {c.target}  {c.detail}" for c in self.converted]
        if self.skipped:
            w = max(len(s.name) for s in self.skipped)
            lines.append("skipped:")
            lines += [f"  {s.name:<{w}}  {s.type}: {s.reason}" for s in self.skipped]
        if self.others:
            by_class = Counter(o.type for o in self.others)
            listed = ", ".join(f"{n} {t}" for t, n in sorted(by_class.items()))
            lines.append(f"others (neither a linear nor an expert module; names in .others): {listed}")
        return "\n".join(lines)


# ---- the MXFP8 computations a converted module runs ----


def _seam_grouped_mm(self, A: Tensor, B_t: Tensor, offs: Tensor) -> Tensor:
    return grouped_mm(A, B_t.transpose(-2, -1), offs, config=self.mxfp8_config)


def _swiglu_forward(self, x: Tensor, groups: Tensor) -> Tensor:
    """SwiGLU experts from 3-D w1/w2/w3 (TorchTitan 0.2's GroupedExperts): ``groups`` are token counts per expert or
    cumulative ends (``self.mxfp8_groups``); the weights are (out, in) per expert unless x's width says they are
    transposed (w1 (G, D, H) for x (M, D) with D != H)."""
    w1, w2, w3 = (getattr(self, n) for n in ("w1", "w2", "w3"))
    if hasattr(w1, "to_local"):  # DTensor parameters, as TorchTitan's own forward handles them
        w1, w2, w3 = w1.to_local(), w2.to_local(), w3.to_local()
    if x.shape[-1] != w1.shape[-1]:
        w1, w2, w3 = (w.transpose(-2, -1) for w in (w1, w2, w3))
    offs = torch.cumsum(groups, 0, dtype=torch.int32) if self.mxfp8_groups == "counts" else groups.to(torch.int32)
    h = F.silu(grouped_mm(x, w1, offs, config=self.mxfp8_config)) * grouped_mm(x, w3, offs, config=self.mxfp8_config)
    return grouped_mm(h, w2, offs, config=self.mxfp8_config).type_as(x)


def _extra_repr(self) -> str:
    own = super(type(self), self).extra_repr()
    return f"{own}, config={self.mxfp8_config}" if own else f"config={self.mxfp8_config}"


# style -> the methods the MXFP8 subclass overrides
_OVERRIDES = {
    "linear": {"forward": MXFP8Linear.forward},
    "marker": {"forward": GroupedExperts.forward, "_mm": MXFP8GroupedExperts._mm},
    "seam": {"_grouped_mm": _seam_grouped_mm},
    "w123": {"forward": _swiglu_forward},
}
# (class, style) -> its MXFP8 subclass; mxq's own classes have theirs
_classes: dict[tuple[type, str], type] = {
    (tnn.Linear, "linear"): MXFP8Linear,
    (GroupedExperts, "marker"): MXFP8GroupedExperts,
}


def mxfp8_class(cls: type, style: str) -> type:
    """The MXFP8 subclass of ``cls`` for a conversion ``style`` (one per class and style, made once): ``cls`` with
    the computation of ``_OVERRIDES[style]``."""
    key = (cls, style)
    if key not in _classes:
        body = {**_OVERRIDES[style], "extra_repr": _extra_repr, "__module__": cls.__module__}
        _classes[key] = type(f"MXFP8{cls.__name__}", (cls,), body)
    return _classes[key]


# ---- what a module is ----


def _params_3d(m: tnn.Module) -> dict[str, Tensor]:
    return {n: p for n, p in m.named_parameters(recurse=False) if p.dim() == 3}


def _seam(m: tnn.Module) -> bool:
    fn = getattr(type(m), "_grouped_mm", None)
    if not callable(fn):
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return params[1:4] == ["A", "B_t", "offs"]


def classify(m: tnn.Module) -> str | None:
    """The conversion style of a module: "mxfp8" (already converted), "linear", "marker", "seam", "w123", or None
    (neither a linear nor an expert module)."""
    if isinstance(getattr(m, "mxfp8_config", None), MXFP8Config):
        return "mxfp8"
    if isinstance(m, tnn.Linear):
        return "linear"
    if is_expert_module(m):
        return "marker"
    if _seam(m):
        return "seam"
    if all(n in _params_3d(m) for n in ("w1", "w2", "w3")):
        return "w123"
    return None


def class_name(cls: type) -> str:
    """``nn.Linear`` for torch.nn's classes, the module-qualified name for any other (TorchTitan's ``Linear`` is not
    nn.Linear)."""
    if cls.__module__.startswith("torch.nn."):
        return f"nn.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def plan(m: tnn.Module, style: str, config: MXFP8Config) -> tuple[dict, str] | str:
    """(the per-module attributes of the converted module, the summary's detail) for a convertible module, or the
    reason it is not converted (with ``config``: its format's block, and whether the format has grouped GEMMs)."""
    cls, block = type(m), format_block(config)

    def _not_multiples(dims: dict[str, int]) -> str | None:
        bad = [f"{n}={v}" for n, v in dims.items() if v % block]
        return f"{', '.join(bad)} not a multiple of {block}" if bad else None

    if style == "linear":
        if isinstance(m, NonDynamicallyQuantizableLinear):
            return "nn.MultiheadAttention's out_proj: its parent reads the weight itself, never calls its forward"
        if cls.forward is not tnn.Linear.forward:
            return f"overrides forward ({cls.__qualname__}.forward); only nn.Linear's own forward is converted"
        bad = _not_multiples({"in_features": m.in_features, "out_features": m.out_features})
        return bad or ({}, f"({m.out_features}, {m.in_features}) bias={m.bias is not None}")
    if style == "marker":
        try:
            G, D, H = expert_dims(m)
        except ValueError as e:
            return str(e)
        bad = _not_multiples({"dim": D, "hidden_dim": H})
        return bad or ({}, f"{m.mxq_experts} experts (mxq_experts): G={G}, dim={D}, hidden_dim={H}")
    params = _params_3d(m)
    if style == "seam":
        if not params:
            return "has the _grouped_mm seam but no 3-D expert parameters"
        dims = {f"{n}.shape[{i}]": p.shape[i] for n, p in params.items() for i in (1, 2)}
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in params.items())
        return _not_multiples(dims) or ({}, f"the _grouped_mm seam: {shapes}")
    # w123
    s1, s2, s3 = (tuple(params[n].shape) for n in ("w1", "w2", "w3"))
    G, a, b = s1
    if s3 != s1 or s2 != (G, b, a):
        return f"w1 {s1}, w2 {s2} and w3 {s3} are not SwiGLU experts' shapes (w1 == w3, w2 its per-expert transpose)"
    arg = list(inspect.signature(cls.forward).parameters)[2:3]
    name = arg[0] if arg else ""
    groups = "counts" if name.startswith(("num_tokens", "counts")) else "offs" if name.startswith("offs") else None
    if groups is None:
        return f"forward's second argument {name!r} is neither token counts (num_tokens*, counts*) nor offsets (offs*)"
    bad = _not_multiples({"w1.shape[1]": a, "w1.shape[2]": b})
    if bad:
        return bad
    layout = "(out, in) or transposed, read from x's width" if a != b else "(out, in) assumed: dim == hidden_dim"
    detail = f"SwiGLU experts from w1/w2/w3, {layout}, forward(x, {name}): G={G}, w1 {s1}"
    return {"mxfp8_groups": groups}, detail


def to_mxfp8(m: tnn.Module, style: str, config: MXFP8Config, attrs: dict) -> type:
    """Converts ``m`` in place (its class swapped for the MXFP8 subclass) and returns the new class."""
    new = mxfp8_class(type(m), style)
    m.__class__ = new
    m.mxfp8_config = config
    for k, v in attrs.items():
        setattr(m, k, v)
    return new


def check_patterns(owner: str, name: str, value) -> list[str] | None:
    """``value`` as a list of fnmatch patterns: None stays None, one string is one pattern (never its characters), a
    list or tuple of strings is itself; anything else is a TypeError naming ``owner`` and the field ``name``."""
    if value is None or isinstance(value, str):
        return value if value is None else [value]
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) for p in value):
        return list(value)
    raise TypeError(f"{owner}: {name} must be a pattern string or a list of them, got {value!r}")


def convert(model: tnn.Module, *, config: MXFP8Config | None = None, include=None, exclude=None) -> ConversionSummary:
    """Converts ``model``'s linears and expert modules to MXFP8 in place with the recipe ``config`` (default:
    ``mxq.MXFP8Config()``) and returns the summary (module docstring). ``include`` / ``exclude``: an fnmatch pattern
    or a list of them, matched against fully qualified module names (the root module is ""). Raises TypeError for a
    model that is not a Module, a config that is not a MXFP8Config or patterns that are not strings; a module that
    cannot be converted is skipped with its reason, not an error."""
    owner = "mxq.nn.convert"
    if not isinstance(model, tnn.Module):
        raise TypeError(f"{owner}: model must be a torch.nn.Module, got {type(model).__name__}")
    config = check_config(owner, config)
    inc = check_patterns(owner, "include", include)
    exc = check_patterns(owner, "exclude", exclude)

    summary = ConversionSummary([], [], [])
    for name, m in model.named_modules():  # each module once, under its first name
        tname = class_name(type(m))
        style = classify(m)
        if style is None:
            summary.others.append(Skipped(name, tname, "neither a linear nor an expert module"))
            continue
        if style == "mxfp8":
            summary.skipped.append(Skipped(name, tname, "already MXFP8"))
            continue
        if inc is not None and not any(fnmatch.fnmatchcase(name, p) for p in inc):
            summary.skipped.append(Skipped(name, tname, f"not matched by include {inc}"))
            continue
        hit = next((p for p in exc or () if fnmatch.fnmatchcase(name, p)), None)
        if hit is not None:
            summary.skipped.append(Skipped(name, tname, f"excluded by pattern {hit!r}"))
            continue
        decision = plan(m, style, config)
        if isinstance(decision, str):
            summary.skipped.append(Skipped(name, tname, decision))
            continue
        attrs, detail = decision
        new = to_mxfp8(m, style, config, attrs)
        summary.converted.append(Converted(name, tname, new.__name__, detail))
    return summary
