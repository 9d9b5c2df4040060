"""Train TorchTitan's DeepSeek-V3 (the debug model, or 16B's widths cut to a few layers) twice — bf16, then through
the mxq TorchTitan converter — and check that the two loss curves agree.

    python examples/train_torchtitan.py                          # 300 steps of 8x512 tokens, CUDA if present
    python examples/train_torchtitan.py --steps 500 --seed 1 --out-dir /tmp/tt
    python examples/train_torchtitan.py --tiny --device cpu --out-dir /tmp/tt_out   # CPU smoke test, both runs
    python examples/train_torchtitan.py --recipe fp8_blockwise --flavor 16B    # the speed run on one GPU

Versions: torchtitan 0.3.x only (``pip install torchtitan==0.3.0``, with what its model code imports:
``spmd_types==0.2.3 tyro docstring_parser dill tqdm typeguard``; scripts/test.sh installs the same). torch ≥ 2.11:
torch 2.11 lacks ``torch.distributed.fsdp.DataParallelMeshDims``, which torchtitan 0.3.0 imports for annotations
only, so a placeholder stands in there. TorchTitan 0.3's own attention cannot train here — its flex attention has no
CPU backward and on torch 2.11 calls torch 2.12's ``create_block_mask(separate_full_blocks=...)``, its varlen
attention needs FA3 (``flash_attn_interface``) and has no CPU kernel, and 0.3 removed the "sdpa" backend for language
models — so this script swaps each layer's inner attention for a causal-SDPA module of its own and calls the model
without attention masks (the synthetic data has no document boundaries, so causal attention is what the model's
block-causal masks would give). With that, both runs train on CUDA (MXFP8 GEMMs emulated below SM100) and on a CPU
(mxq's CPU reference ops; ``--tiny`` is the smoke test).

The model: TorchTitan's own ``deepseek_v3`` ``debugmodel`` flavor (vocab 2048, dim 256, 6 layers — 1 dense, 5 MoE
with 8 routed experts (top-3) and 2 shared ones —, multi-head latent attention), built the way TorchTitan's trainer
builds it: ``model_registry(flavor, converters=[...])``, ``spec.model.build()`` on the meta device (the converters
act during the build), then ``to_empty`` and ``init_weights``. Training follows TorchTitan's single-device recipe:
fp32 parameters, bf16 autocast (what ``training.mixed_precision_param`` does without FSDP), AdamW (lr 8e-4, betas
0.9/0.95, weight decay 0.1; linear warm-up, then linear decay to 10%), gradient clipping at 1.0 and the
auxiliary-loss-free MoE load balancing (the expert-bias update TorchTitan runs before each optimizer step). On a
CPU, bf16 autocast is off by default (``--precision auto``): CPUs without native bf16 GEMMs run them tens of times
slower than fp32.

``--flavor 16B`` builds the ``16B`` flavor instead, at its widths (dim 2048, 64 routed experts of 1408, top-6,
vocab 102400) and cut to its first ``--layers`` layers: the default 4 (1 dense, 3 MoE, 2.25B parameters) fit one
80 GB GPU with fp32 weights and AdamW. It is the speed run: its preset is 150 steps of 4x2048 tokens, and the
tokens/s ratio is printed and stored.

The two runs start from the same weights and see the same batches. Run 1: the model as TorchTitan builds it. Run 2:
the model built with mxq's converter in the model registry's converters, as a TorchTitan trainer config lists it —
``deepseek_v3.model_registry("debugmodel", converters=[MXQConverter.Config()])`` (``MXQConverter`` from
``mxq.integrations.torchtitan``, with its defaults: the router gates excluded, mxq's token dispatcher).

The data: a synthetic language made here, no download — each sequence draws one of a few hidden topics, and every
topic is a sparse random Markov chain over the 2048-token vocabulary (each token has a few likely successors). The
loss falls from ln(2048) (chance) towards the chain's entropy given the topic (printed as the entropy floor).

Output: a progress line every ``--log-every`` steps, ``results.json`` (per-step losses, tokens/s, the config, the
versions, the conversion summary, the last-50-step mean losses and their ratio) and ``losses.png`` in ``--out-dir``.
``--profile ROWS`` (CUDA) also runs each run's last two steps under torch.profiler, out of the timing, and prints
and stores their GPU time per step by kernel kind (GEMMs, attention, mxq's kernels, optimizer, the rest), which the
plot draws beside the loss curves.
Exit status 1 when the MXFP8 run's last-50 mean loss is not within ``--tolerance`` (default 1%) of bf16's; 2 for
arguments it cannot run (checked before any work: the converted run needs --batch x --seq-len a multiple of its
recipe's block, 32 for MXFP8 and 128 for FP8 blockwise; ``--recipe`` picks the recipe, default mxfp8_rceil).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# TorchTitan 0.3.0's deepseek_v3 flavors this script trains, each with the layers it keeps by default (None: all).
# 16B's 27 layers (15.7B parameters; fp32 weights, gradients and AdamW state take 16 bytes each) do not fit one GPU;
# its first 4 (1 dense, 3 MoE, at the flavor's full widths: 2.25B parameters, ~36 GB of that state) do.
FLAVORS: dict[str, int | None] = {"debugmodel": None, "16B": 4}
TORCHTITAN = "0.3.0"  # the release this script was written against (any 0.3.x is taken)
CONVERTER_MODULE = "mxq.integrations.torchtitan"  # its MXQConverter.Config goes in a model registry's converters
MAX_SEQ_LEN = 4096 * 4  # the flavors' RoPE length (torchtitan 0.3.0's deepseek_v3 debugmodel and 16B)
VERSIONS = """versions: torchtitan 0.3.x only; torch >= 2.11 (2.11: a placeholder for DataParallelMeshDims).
Both runs use the script's causal-SDPA inner attention (TorchTitan 0.3's flex/varlen attention cannot train on a
CPU or on torch 2.11): on CUDA both train (MXFP8 emulated below SM100); on a CPU both train too (--tiny: about a minute on 2 cores)."""
WINDOW = 50  # the final mean loss is over the last WINDOW steps (all of them when there are fewer)
TIMING_SKIP = 10  # tokens/s is the median step time after the first TIMING_SKIP steps (compilation, allocator)
PROFILED_STEPS = 2  # --profile: each run's last two steps, under torch.profiler and out of the timing
# --profile's kernel kinds, by the first pattern a kernel's name contains (lowercase; mxq's GEMMs are CUTLASS's).
KERNEL_KINDS = {
    "GEMMs": ("gemm", "cutlass", "xmma", "nvjet", "cublas"),
    "attention": ("flash", "fmha", "attention", "sdpa"),
    "mxq (quantize, dispatch, combine)": ("mxq",),
    "optimizer, grad norm": ("adam", "multi_tensor", "lpnorm"),
}

# Per-run settings: the defaults, and --tiny's (a CPU smoke test). Explicit flags override either.
PRESETS: dict[str, dict[str, int]] = {
    "default": {"steps": 300, "batch": 8, "seq_len": 512, "log_every": 25, "warmup": 20},
    "16B": {"steps": 150, "batch": 4, "seq_len": 2048, "log_every": 10, "warmup": 20},
    "tiny": {"steps": 4, "batch": 1, "seq_len": 64, "log_every": 1, "warmup": 1},
}


@dataclasses.dataclass(frozen=True)
class LanguageSpec:
    topics: int = 4
    successors: int = 4  # likely next tokens per (topic, token)
    # The language uses the first max_vocab token ids of a larger vocabulary (16B's 102400): its successor draw is
    # (topics, V, V) random numbers, 42 G of them at V = 102400.
    max_vocab: int = 4096


@dataclasses.dataclass
class RunResult:
    losses: list[float]
    step_seconds: list[float]
    tokens_per_s: float
    final_mean_loss: float
    kernel_ms_per_step: dict[str, float] | None = None  # --profile: GPU ms per step by kernel kind


# ---- torchtitan 0.3.x ----


def install_mesh_dims_placeholder() -> bool:
    """Give ``torch.distributed.fsdp`` a placeholder ``DataParallelMeshDims`` when this torch lacks it (torch < 2.12).

    torchtitan 0.3.0's DeepSeek-V3 code (``models/deepseek_v3/mtp.py``) imports the name at module level but uses it
    only in the annotations of its parallelize function, which this script never calls (one device, no FSDP); without
    the name, ``from torchtitan.models import deepseek_v3`` fails on torch 2.11. Returns whether it was installed."""
    from torch.distributed import fsdp

    if hasattr(fsdp, "DataParallelMeshDims"):
        return False
    fsdp.DataParallelMeshDims = type(  # type: ignore[attr-defined]
        "DataParallelMeshDims", (), {"__doc__": "placeholder set by train_torchtitan.py (torch < 2.12)"}
    )
    return True


def load_torchtitan() -> types.SimpleNamespace:
    """The torchtitan 0.3.x names this script uses; exits with a message for a missing or other torchtitan."""
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"torchtitan is not installed: pip install torchtitan=={TORCHTITAN} (this script targets 0.3.x)")
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if major_minor != (0, 3):
        sys.exit(
            f"this script targets torchtitan 0.3.x, found torchtitan {version} (0.2 built models through JobConfig "
            f"and named converters; 0.3 through model registries): pip install torchtitan=={TORCHTITAN}"
        )
    placeholder = install_mesh_dims_placeholder()
    try:
        import torchtitan
        from torchtitan.models import deepseek_v3
        from torchtitan.models.common.moe import MoE
    except ImportError as e:
        sys.exit(f"torchtitan {version} does not import here ({e}); see this script's docstring for what it needs")
    return types.SimpleNamespace(
        version=getattr(torchtitan, "__version__", version),
        mesh_dims_placeholder=placeholder,
        deepseek_v3=deepseek_v3,
        MoE=MoE,
    )


class CausalSDPA(nn.Module):
    """Causal attention through ``F.scaled_dot_product_attention``, in place of a TorchTitan 0.3 model's inner
    attention (``attention.inner_attention``): q, k, v come in (batch, seq, heads, head_dim), as TorchTitan hands
    them to its backends, with the softmax scale. TorchTitan 0.3's language models attend through flex attention
    (no CPU backward; on torch 2.11 its block masks call torch 2.12's ``create_block_mask(separate_full_blocks=)``)
    or varlen (FA3's ``flash_attn_interface``; no CPU kernel), and 0.3 removed their "sdpa" backend. This data has
    no documents, so plain causal attention is the block-causal attention those backends would compute."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        attention_masks: Any = None,
        scale: float | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if attention_masks is not None:
            raise ValueError("CausalSDPA takes no attention masks: call the model without them")
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=scale
        )
        return out.transpose(1, 2)


def use_causal_sdpa(model: nn.Module) -> int:
    """Replaces every ``inner_attention`` submodule of ``model`` with :class:`CausalSDPA`; returns how many."""
    owners = [m for m in model.modules() if isinstance(getattr(m, "inner_attention", None), nn.Module)]
    for m in owners:
        m.inner_attention = CausalSDPA()
    return len(owners)


# ---- data: a topic-conditioned sparse Markov chain ----


def make_language(vocab: int, spec: LanguageSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(successor ids (topics, V, S), their CDFs (topics, V, S), the entropy of each row in nats (topics, V)) over
    the first V = min(vocab, spec.max_vocab) token ids, a function of ``seed`` alone."""
    g = torch.Generator().manual_seed(seed + 1000)
    t, s, vocab = spec.topics, spec.successors, min(vocab, spec.max_vocab)
    succ = torch.rand(t, vocab, vocab, generator=g).topk(s, dim=-1).indices  # s distinct ids per row
    # Dirichlet(1, ..., 1) weights: i.i.d. Exp(1) draws, normalized (torch.distributions takes no generator).
    w = torch.empty(t, vocab, s).exponential_(generator=g)
    p = w / w.sum(-1, keepdim=True)
    entropy = -(p * p.log()).sum(-1)
    return succ, p.cumsum(-1), entropy


def make_batches(
    vocab: int, spec: LanguageSpec, steps: int, batch: int, seq_len: int, seed: int
) -> tuple[torch.Tensor, float]:
    """((steps, batch, seq_len + 1) int64 token ids, the entropy floor), generated on the CPU from ``seed``: both
    runs see these batches in this order. The floor is the mean entropy of the chain's transitions at the
    generated positions given the topic — the loss of a model that knows the chain and the sequence's topic."""
    succ, cdf, entropy = make_language(vocab, spec, seed)
    g = torch.Generator().manual_seed(seed + 2000)
    n = steps * batch
    topic = torch.randint(0, spec.topics, (n,), generator=g)
    seq = torch.empty(n, seq_len + 1, dtype=torch.int64)
    seq[:, 0] = torch.randint(0, succ.shape[1], (n,), generator=g)
    for i in range(1, seq_len + 1):
        prev = seq[:, i - 1]
        u = torch.rand(n, 1, generator=g)
        pick = torch.searchsorted(cdf[topic, prev], u).clamp_(max=spec.successors - 1)  # (n, 1)
        seq[:, i] = succ[topic, prev].gather(1, pick).squeeze(1)
    floor = float(entropy[topic.unsqueeze(1), seq[:, :-1]].mean())
    return seq.view(steps, batch, seq_len + 1), floor


# ---- the model, built as TorchTitan's trainer builds it ----


def model_spec(tt: types.SimpleNamespace, args: argparse.Namespace, converters: list[Any]) -> Any:
    """TorchTitan's model spec for DeepSeek-V3's ``--flavor``, with ``converters`` (model-config converters, as a
    TorchTitan trainer config lists them) applied to its model config, cut to its first ``--layers`` layers."""
    spec = tt.deepseek_v3.model_registry(args.flavor, attn_backend="flex", converters=converters or None)
    if args.layers is not None and args.layers > len(spec.model.layers):
        sys.exit(f"--layers {args.layers}: the {args.flavor} flavor has {len(spec.model.layers)} layers")
    spec.model.layers = spec.model.layers[: args.layers]
    return spec


def build_model(spec: Any, device: torch.device, seed: int) -> tuple[nn.Module, int]:
    """TorchTitan's order (torchtitan/trainer.py, one device): build on the meta device (the converters in the spec
    convert the model as it is built), ``to_empty`` on the device, ``init_weights``; then the inner attention is
    swapped for causal SDPA (no parameters). Returns (model, the number of attention modules swapped)."""
    with torch.device("meta"):
        model = spec.model.build()
    model.verify_module_protocol()
    model.to_empty(device=device)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    swapped = use_causal_sdpa(model)
    model.train()
    return model, swapped


def import_converter_module() -> types.ModuleType:
    """``mxq.integrations.torchtitan``, whose ``MXQConverter.Config`` goes in the model registry's converters."""
    try:
        return importlib.import_module(CONVERTER_MODULE)
    except ImportError as e:
        sys.exit(f"cannot import {CONVERTER_MODULE} ({e}); --bf16-only runs the baseline alone")


def load_initial_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy the baseline's initial weights into the converted model, so both runs start from the same weights
    whatever the converted modules' init does. Every baseline tensor must land; converted modules may have
    buffers of their own (left as initialized)."""
    result = model.load_state_dict(state, strict=False)
    params = {name for name, _ in model.named_parameters()}
    missing = [k for k in result.missing_keys if k in params]
    if result.unexpected_keys or missing:
        raise RuntimeError(
            f"the converted model's parameters do not match the baseline's: unexpected {result.unexpected_keys}, "
            f"missing parameters {missing}"
        )


# ---- training ----


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def update_expert_bias(moes: list[nn.Module]) -> None:
    """TorchTitan's auxiliary-loss-free load balancing (register_moe_load_balancing_hook, single process): before
    each optimizer step, nudge each MoE's expert bias towards under-used experts, then reset the counts.
    Reimplemented because TorchTitan's hook asks ParallelDims for its "loss" mesh, which needs torch.distributed."""
    with torch.no_grad():
        for moe in moes:
            if moe.load_balance_coeff is None:
                continue
            counts = moe.tokens_per_expert_E.float()
            delta = moe.load_balance_coeff * torch.sign(counts.mean() - counts)
            moe.expert_bias_E.add_(delta - delta.mean())
            moe.tokens_per_expert_E.zero_()


def timed_steps(steps: int, profile: int) -> range:
    """The steps tokens/s is the median of (0-based): after the first TIMING_SKIP (or half), before --profile's."""
    end = steps - PROFILED_STEPS if profile else steps
    return range(min(TIMING_SKIP, end // 2), end)


def train(
    name: str,
    model: nn.Module,
    moe_cls: type,
    data: torch.Tensor,
    args: argparse.Namespace,
    device: torch.device,
    autocast: bool,
    reference: tuple[str, list[float]] | None = None,
) -> RunResult:
    """One training run; ``reference`` (name, per-step losses) adds the other run's loss to the progress lines."""
    fused = device.type == "cuda"  # TorchTitan's default optimizer implementation is "fused"
    opt = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=fused or None
    )
    steps, warmup = data.shape[0], args.warmup

    def lr_at(step: int) -> float:  # linear warm-up, then linear decay to 10%
        if step < warmup:
            return (step + 1) / warmup
        return 1.0 - 0.9 * (step - warmup) / max(steps - warmup, 1)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    moes = [m for m in model.modules() if isinstance(m, moe_cls)]
    # The hook TorchTitan registers on its optimizers for MoE models: the expert-bias update before each step.
    opt.register_step_pre_hook(lambda *_: update_expert_bias(moes))
    amp: Callable[[], contextlib.AbstractContextManager[Any]] = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    )

    tokens_per_step = data.shape[1] * (data.shape[2] - 1)
    losses: list[torch.Tensor] = []
    seconds: list[float] = []
    timed = timed_steps(steps, args.profile)
    profiled_from = timed.stop  # --profile's steps follow the timed ones
    profiler = contextlib.ExitStack()
    for step in range(steps):
        if step == profiled_from:
            prof = profiler.enter_context(torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]))
        batch = data[step].to(device)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        sync(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp():
            logits = model(inputs)  # no positions, no attention masks: one causal document per sequence
            # TorchTitan's cross-entropy loss: fp32 logits, mean over the tokens.
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        del logits
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
        sync(device)
        seconds.append(time.perf_counter() - t0)
        losses.append(loss.detach())
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            recent = statistics.median(seconds[-args.log_every :])
            line = f"[{name:>5}] step {step + 1:5d}/{steps}  loss {loss.item():.4f}"
            if reference is not None:
                ref_name, ref = reference
                line += f" ({ref_name} {ref[step]:.4f}, ratio {loss.item() / ref[step]:.4f})"
            print(f"{line}  {tokens_per_step / recent:,.0f} tokens/s", flush=True)
    profiler.close()
    kernel_ms = print_kernel_profile(name, prof, args.profile) if args.profile else None
    values = [float(v) for v in torch.stack(losses).cpu()]
    window = values[-WINDOW:]
    return RunResult(
        losses=values,
        step_seconds=seconds,
        tokens_per_s=tokens_per_step / statistics.median(seconds[timed.start : timed.stop]),
        final_mean_loss=sum(window) / len(window),
        kernel_ms_per_step=kernel_ms,
    )


def print_kernel_profile(name: str, prof: Any, rows: int) -> dict[str, float]:
    """Prints the profiled steps' GPU time per step by kernel kind (KERNEL_KINDS, the rest "other"), then the top
    kernels; returns {kind: ms per step, "total": ms per step}."""
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    per_step = lambda us: us / PROFILED_STEPS / 1e3  # ms
    kinds = dict.fromkeys([*KERNEL_KINDS, "other"], 0.0)
    for e in kernels:
        key = e.key.lower()
        kind = next((k for k, pats in KERNEL_KINDS.items() if any(p in key for p in pats)), "other")
        kinds[kind] += per_step(e.device_time_total)
    total = sum(kinds.values())
    print(f"[{name:>5}] kernels per step (torch.profiler, last {PROFILED_STEPS} steps): {total:.1f} ms")
    for kind, ms in kinds.items():
        print(f"[{name:>5}]   {ms:8.2f} ms  {ms / max(total, 1e-9):6.1%}  {kind}")
    for e in sorted(kernels, key=lambda e: -e.device_time_total)[:rows]:
        calls = e.count // PROFILED_STEPS
        print(f"[{name:>5}]   {per_step(e.device_time_total):8.2f} ms {calls:5d}x  {e.key[:110]}")
    return {kind: round(ms, 3) for kind, ms in kinds.items()} | {"total": round(total, 3)}


def write_plot(path: str, title: str, runs: dict[str, RunResult], chance: float, floor: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): skipping losses.png; results.json has the curves")
        return False
    profiled = {name: run.kernel_ms_per_step for name, run in runs.items() if run.kernel_ms_per_step}
    if profiled:  # --profile: the loss curves, and beside them each run's GPU time per step by kernel kind
        fig, (ax, bars) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in runs.items():
        window = min(WINDOW, len(run.losses))
        steps = range(1, len(run.losses) + 1)
        label = f"{name} (last-{window} mean {run.final_mean_loss:.4f}; {run.tokens_per_s:,.0f} tokens/s)"
        ax.plot(steps, run.losses, label=label)
    ax.axhline(chance, color="grey", ls=":", label=f"chance ln(V) = {chance:.2f}")
    ax.axhline(floor, color="black", ls="--", lw=0.8, label=f"entropy floor = {floor:.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(f"TorchTitan DeepSeek-V3 {title}: {' vs '.join(runs)}", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    if profiled:
        names = list(profiled)
        left = [0.0] * len(names)
        for kind in [*KERNEL_KINDS, "other"]:
            ms = [profiled[n].get(kind, 0.0) for n in names]
            bars.barh(names, ms, left=left, label=kind)
            left = [a + b for a, b in zip(left, ms)]
        for i, total in enumerate(left):
            bars.text(total, i, f" {total:.1f}", va="center")
        bars.set_xlabel(f"GPU ms per step (kernels; torch.profiler, last {PROFILED_STEPS} steps)")
        bars.set_title("where a step's GPU time goes", fontsize=10)
        bars.invert_yaxis()
        bars.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
        bars.set_xlim(0, max(left) * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---- command line ----


def check_recipe(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The converted run's label ("mxfp8", or "fp8bw" for an FP8 blockwise recipe), after checking --recipe against
    mxq's recipes and the token count against the recipe's block. Every converted Linear (attention, shared experts,
    the dense feed-forward, lm_head) sees all the step's tokens as its M dimension, which is quantized in blocks
    along M for the weight gradient (MXFP8: 32; FP8 blockwise: 128) and mxq does not pad: MXFP8Linear would raise at
    its first call."""
    try:
        mxq = importlib.import_module("mxq")
    except ImportError as e:
        p.error(f"cannot import mxq ({e}); --bf16-only runs the baseline alone")
    recipe = mxq.config.RECIPES.get(args.recipe)
    if recipe is None:
        p.error(f"--recipe must be one of {', '.join(mxq.config.RECIPES)}, got {args.recipe!r}")
    block, tokens = mxq.ops.FORMAT_BLOCK[recipe.format], args.batch * args.seq_len
    if tokens % block:
        p.error(
            f"--batch x --seq-len (the token count each converted Linear sees) must be a multiple of {block} for "
            f"the {args.recipe} run, got {args.batch}x{args.seq_len} = {tokens} (or pass --bf16-only)"
        )
    return "mxfp8" if recipe.format == "mxfp8" else "fp8bw"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, torch.device]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=VERSIONS, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    d, tiny, big = PRESETS["default"], PRESETS["tiny"], PRESETS["16B"]
    p.add_argument(
        "--flavor",
        choices=tuple(FLAVORS),
        default="debugmodel",
        help="TorchTitan's deepseek_v3 flavor (default debugmodel; 16B: its widths, cut to --layers, for speed)",
    )
    p.add_argument(
        "--layers",
        type=int,
        help="keep the flavor's first N layers (1 dense, N-1 MoE; default all of debugmodel's, 4 of 16B's)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help=f"training steps per run (default {d['steps']}; 16B {big['steps']}; --tiny {tiny['steps']})",
    )
    p.add_argument(
        "--batch",
        type=int,
        help=f"sequences per step (default {d['batch']}; 16B {big['batch']}; --tiny {tiny['batch']})",
    )
    p.add_argument(
        "--seq-len",
        type=int,
        help=f"tokens per sequence (default {d['seq_len']}; 16B {big['seq_len']}; --tiny {tiny['seq_len']})",
    )
    p.add_argument("--warmup", type=int, help=f"linear warm-up steps (default {d['warmup']}; --tiny {tiny['warmup']})")
    p.add_argument(
        "--log-every", type=int, help=f"print every N steps (default {d['log_every']}; --tiny {tiny['log_every']})"
    )
    p.add_argument("--lr", type=float, default=8e-4, help="peak AdamW learning rate (default 8e-4, TorchTitan's)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed, the same for both runs (default 0)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda[:N] or cpu")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="compute dtype of both runs: bf16 autocast over fp32 weights, or fp32; auto = bf16 on CUDA, fp32 on CPU",
    )
    p.add_argument(
        "--out-dir",
        default="train_torchtitan_out",
        help="where results.json and losses.png go (default ./train_torchtitan_out; git ignores it in the repo root)",
    )
    p.add_argument("--tolerance", type=float, default=0.01, help="allowed relative gap of the last-50 mean losses")
    p.add_argument("--tiny", action="store_true", help="a few small steps (the CPU smoke test)")
    p.add_argument("--bf16-only", action="store_true", help="run the baseline only (no mxq needed)")
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help=f"profile each run's last {PROFILED_STEPS} steps (kept out of tokens/s): GPU time by kernel kind and the "
        "top ROWS kernels",
    )
    p.add_argument(
        "--recipe",
        default="mxfp8_rceil",
        help="mxq's recipe for the converted run (a name in mxq.config.RECIPES; default mxfp8_rceil; fp8_blockwise: "
        "Hopper's native FP8 GEMMs, which need --batch x --seq-len a multiple of 128)",
    )
    args = p.parse_args(argv)

    preset = "tiny" if args.tiny else args.flavor if args.flavor in PRESETS else "default"
    for key, value in PRESETS[preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key, low in (("steps", 1), ("batch", 1), ("seq_len", 2), ("log_every", 1), ("warmup", 0), ("profile", 0)):
        if getattr(args, key) < low:
            p.error(f"--{key.replace('_', '-')} must be at least {low}")
    if args.profile and args.steps <= PROFILED_STEPS:
        p.error(f"--profile needs more than {PROFILED_STEPS} --steps (the profiled steps are not timed)")
    if not args.lr > 0:
        p.error("--lr must be positive")
    if not args.tolerance >= 0:
        p.error("--tolerance must be non-negative")
    if args.seq_len > MAX_SEQ_LEN:
        p.error(f"--seq-len must be at most {MAX_SEQ_LEN} (the flavors' RoPE length), got {args.seq_len}")
    if args.layers is None:
        args.layers = FLAVORS[args.flavor]
    elif args.layers < 2:
        p.error("--layers must be at least 2 (the first layer is dense, the MoE layers follow)")
    args.label = None if args.bf16_only else check_recipe(p, args)

    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"--device must be cuda[:N] or cpu, not {args.device!r}")
    if device.type not in ("cuda", "cpu"):
        p.error(f"--device must be cuda[:N] or cpu, not {args.device!r}")
    if args.profile and device.type != "cuda":
        p.error("--profile tables GPU kernels: it needs --device cuda")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            p.error("--device cuda: CUDA is not available here (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            p.error(f"--device {args.device}: there are {torch.cuda.device_count()} CUDA devices")
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)  # torchtitan's capability checks look at the current device

    try:
        os.makedirs(args.out_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.out_dir):
            pass
    except OSError as e:
        p.error(f"--out-dir {args.out_dir!r} is not a writable directory ({e})")
    if args.precision == "auto":
        args.precision = "bf16" if device.type == "cuda" else "fp32"
    return args, device


def main(argv: list[str] | None = None) -> int:
    args, device = parse_args(argv)
    tt = load_torchtitan()
    # Before any training, so that a missing mxq stops the script at once.
    converter_module = None if args.bf16_only else import_converter_module()
    label = args.label
    autocast = args.precision == "bf16"
    base = args.precision  # the baseline run's label: "bf16" (or "fp32" on a CPU)

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"torch {torch.__version__}, torchtitan {tt.version}, device {device} ({device_name})")
    if tt.mesh_dims_placeholder:
        print("torch.distributed.fsdp.DataParallelMeshDims is missing (torch < 2.12): a placeholder stands in")

    spec = model_spec(tt, args, converters=[])
    title = f"{args.flavor} ({len(spec.model.layers)} layers)"
    vocab = spec.model.vocab_size
    attention = "causal SDPA (in place of TorchTitan's flex attention)"
    print(
        f"model: deepseek_v3 {title}, dim {spec.model.dim}, vocab {spec.model.vocab_size}, attention {attention}, experts torch._grouped_mm (bf16), "
        f"compute {'bf16 autocast, fp32 weights' if autocast else 'fp32'}"
    )

    language = LanguageSpec()
    data, floor = make_batches(vocab, language, args.steps, args.batch, args.seq_len, args.seed)
    chance = math.log(vocab)
    print(
        f"data: {args.steps} batches of {args.batch}x{args.seq_len} tokens, {language.topics} topics x "
        f"{language.successors} successors per token over ids 0..{min(vocab, language.max_vocab) - 1}; chance ln(V) "
        f"{chance:.3f}, entropy floor {floor:.3f} nats"
    )

    runs: dict[str, RunResult] = {}
    model, swapped = build_model(spec, device, args.seed)
    n_params, flops_per_token = spec.model.get_nparams_and_flops(model, args.seq_len)
    print(
        f"parameters {n_params:,}, {flops_per_token / 1e6:.0f} MFLOP per token (fwd+bwd); inner attention of "
        f"{swapped} layers swapped for causal SDPA"
    )
    initial_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    runs[base] = train(base, model, tt.MoE, data, args, device, autocast)
    del model

    summary_text, counts, converter_config = None, None, None
    if converter_module is not None:
        # The converter as a TorchTitan trainer config lists it: in the model registry's converters.
        converter_config = converter_module.MXQConverter.Config(recipe=args.recipe)
        model, _ = build_model(model_spec(tt, args, converters=[converter_config]), device, args.seed)
        load_initial_state(model, initial_state)
        summary = converter_module.last_summary
        summary_text = str(summary)
        counts = {"converted": len(summary.converted), "skipped": len(summary.skipped)}
        print(f"converter: {converter_config}")
        print(summary_text)
        runs[label] = train(label, model, tt.MoE, data, args, device, autocast, (base, runs[base].losses))
        del model

    window = min(WINDOW, args.steps)
    timed = timed_steps(args.steps, args.profile)
    result: dict[str, Any] = {
        "args": vars(args),
        "model": {
            "name": "deepseek_v3",
            "flavor": args.flavor,
            "dim": spec.model.dim,
            "vocab": vocab,
            "layers": len(spec.model.layers),
        },
        "attention": attention,
        "experts": "torch._grouped_mm (bf16)",
        "compute": "bf16 autocast, fp32 weights" if autocast else "fp32",
        "parameters": n_params,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "torchtitan": tt.version},
        "device": str(device),
        "device_name": device_name,
        "language": {**dataclasses.asdict(language), "vocab": vocab, "chance": chance, "entropy_floor": floor},
        "window": window,
        "timing": f"median step time over steps {timed.start + 1}..{timed.stop}, synchronized",
        "runs": {name: dataclasses.asdict(run) for name, run in runs.items()},
    }
    status = 0
    for name, run in runs.items():
        print(f"[{name:>5}] last-{window} mean loss {run.final_mean_loss:.4f}, {run.tokens_per_s:,.0f} tokens/s")
    if label in runs:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            result["versions"]["mxq"] = importlib.metadata.version("mxq")
        ratio = runs[label].final_mean_loss / runs[base].final_mean_loss
        speed = runs[label].tokens_per_s / runs[base].tokens_per_s
        ok = abs(ratio - 1) <= args.tolerance
        status = 0 if ok else 1
        result.update(
            converter=repr(converter_config),
            conversion_summary=summary_text,
            conversion_counts=counts,
            recipe=args.recipe,
            **{f"ratio_{label}_over_baseline": ratio, f"tokens_per_s_{label}_over_baseline": speed},
            tolerance=args.tolerance,
            within_tolerance=ok,
        )
        print(
            f"last-{window} mean loss ratio {label}/{base} {ratio:.4f} "
            f"({'within' if ok else 'NOT within'} {args.tolerance:.1%}); tokens/s {label}/{base} {speed:.3f}x"
        )

    json_path = os.path.join(args.out_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    png_path = os.path.join(args.out_dir, "losses.png")
    plotted = write_plot(png_path, f"{title} on {device_name}", runs, chance, floor)
    print(f"wrote {json_path}" + (f" and {png_path}" if plotted else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
