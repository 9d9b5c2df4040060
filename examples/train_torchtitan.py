"""Train TorchTitan's DeepSeek-V3 debug model twice — bf16, then MXFP8 through the mxq TorchTitan converter — and
check that the two loss curves agree.

    python examples/train_torchtitan.py                          # 300 steps of 8x512 tokens, CUDA if present
    python examples/train_torchtitan.py --steps 500 --seed 1 --out-dir /tmp/tt
    python examples/train_torchtitan.py --tiny --bf16-only --device cpu --out-dir /tmp/tt_out   # CPU smoke test

Needs torchtitan 0.2.x (``pip install torchtitan==0.2.2``; 0.3 changed the model and config API, and 0.3.0 does
not import with torch 2.11). Hugging Face ``datasets``, which torchtitan's data loaders import, is not needed: the
data is made here, and a placeholder module stands in when ``datasets`` is not installed.

The model: TorchTitan's own ``deepseek_v3`` ``debugmodel`` flavor (vocab 2048, dim 256, 6 layers — 1 dense, 5 MoE
with 8 routed experts (top-3) and 2 shared ones —, multi-head latent attention through SDPA; ~33M parameters),
built the way TorchTitan's trainer builds it: on the meta device, model converters applied, then ``to_empty`` and
``init_weights``. Training follows TorchTitan's single-device recipe: fp32 parameters, bf16 autocast (what
``training.mixed_precision_param`` does without FSDP), AdamW (lr 8e-4, betas 0.9/0.95, weight decay 0.1; linear
warm-up, then linear decay to 10%), gradient clipping at 1.0 and the auxiliary-loss-free MoE load balancing (the
expert-bias update TorchTitan runs before each optimizer step). On a CPU, bf16 autocast is off by default
(``--precision auto``): CPUs without native bf16 GEMMs run them tens of times slower than fp32.

The two runs start from the same weights and see the same batches. Run 1: the model as TorchTitan builds it. Run 2:
the mxq converter applied by name, the way a TorchTitan job config does it — ``--experimental.custom_import
mxq.integrations.torchtitan`` (the trainer imports that module, which registers the converter as "mxq") and
``--model.converters mxq`` (``build_model_converters(job_config, parallel_dims).convert(model)``).

The data: a synthetic language made here, no download — each sequence draws one of a few hidden topics, and every
topic is a sparse random Markov chain over the 2048-token vocabulary (each token has a few likely successors). The
loss falls from ln(2048) (chance) towards the chain's entropy given the topic (printed as the entropy floor).

Output: a progress line every ``--log-every`` steps, ``results.json`` (per-step losses, tokens/s, the config, the
versions, the conversion summary, the last-50-step mean losses and their ratio) and ``losses.png`` in ``--out-dir``.
Exit status 1 when the MXFP8 run's last-50 mean loss is not within ``--tolerance`` (default 1%) of bf16's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
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

FLAVOR = "debugmodel"
CUSTOM_IMPORT = "mxq.integrations.torchtitan"  # what `--experimental.custom_import` names in a TorchTitan config
CONVERTER = "mxq"  # the name that module registers, for `--model.converters`
WINDOW = 50  # the final mean loss is over the last WINDOW steps (all of them when there are fewer)
TIMING_SKIP = 10  # tokens/s is the median step time after the first TIMING_SKIP steps (compilation, allocator)

# Per-run settings: the defaults, and --tiny's (a CPU smoke test). Explicit flags override either.
PRESETS: dict[str, dict[str, int]] = {
    "default": {"steps": 300, "batch": 8, "seq_len": 512, "log_every": 25, "warmup": 20},
    "tiny": {"steps": 8, "batch": 2, "seq_len": 64, "log_every": 2, "warmup": 2},
}


@dataclasses.dataclass(frozen=True)
class LanguageSpec:
    topics: int = 4
    successors: int = 4  # likely next tokens per (topic, token)


@dataclasses.dataclass
class RunResult:
    losses: list[float]
    step_seconds: list[float]
    tokens_per_s: float
    final_mean_loss: float


# ---- torchtitan 0.2.x ----


def install_datasets_placeholder() -> bool:
    """Put a placeholder ``datasets`` module in ``sys.modules`` when Hugging Face ``datasets`` is not installed.

    ``torchtitan.models.deepseek_v3`` imports ``torchtitan.hf_datasets.text_datasets`` (its C4 loader), which
    imports ``datasets`` at module level; this script never loads a data set, and ``datasets`` pulls in pyarrow
    and pandas. The placeholder raises if anything calls it. Returns whether it was installed."""
    if importlib.util.find_spec("datasets") is not None:
        return False

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Hugging Face `datasets` is not installed (train_torchtitan.py put a placeholder here)")

    datasets = types.ModuleType("datasets")
    distributed = types.ModuleType("datasets.distributed")
    datasets.Dataset = type("Dataset", (), {})  # type: ignore[attr-defined]
    datasets.load_dataset = unavailable  # type: ignore[attr-defined]
    distributed.split_dataset_by_node = unavailable  # type: ignore[attr-defined]
    datasets.distributed = distributed  # type: ignore[attr-defined]
    sys.modules["datasets"] = datasets
    sys.modules["datasets.distributed"] = distributed
    return True


def load_torchtitan() -> types.SimpleNamespace:
    """The torchtitan 0.2.x names this script uses; exits with a message for a missing or other torchtitan."""
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("torchtitan is not installed: pip install torchtitan==0.2.2 (this script targets torchtitan 0.2.x)")
    major_minor = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if major_minor != (0, 2):
        sys.exit(
            f"this script targets torchtitan 0.2.x for now, found torchtitan {version}: 0.3 reorganized the model "
            "and config API (and 0.3.0 does not import with torch 2.11). pip install torchtitan==0.2.2"
        )
    placeholder = install_datasets_placeholder()
    try:
        import torchtitan
        from torchtitan.config import JobConfig
        from torchtitan.distributed import ParallelDims
        from torchtitan.models.deepseek_v3 import DeepSeekV3Model, deepseekv3_args
        from torchtitan.models.moe import MoE
        from torchtitan.protocols.model_converter import build_model_converters
    except ImportError as e:
        sys.exit(f"torchtitan {version} does not have the 0.2.x API this script uses ({e})")
    return types.SimpleNamespace(
        version=getattr(torchtitan, "__version__", version),
        datasets_placeholder=placeholder,
        JobConfig=JobConfig,
        ParallelDims=ParallelDims,
        DeepSeekV3Model=DeepSeekV3Model,
        model_args=deepseekv3_args,
        MoE=MoE,
        build_model_converters=build_model_converters,
    )


def patch_cpu_histc() -> None:
    """torchtitan 0.2.2's MoE router counts tokens per expert with ``torch.histc`` on int64 expert ids, which has
    a CUDA kernel but no CPU one. For CPU runs only: integer inputs go through float32 (exact for ids < 2**24)
    and the counts come back in the input's dtype, as on CUDA."""
    histc = torch.histc

    def histc_any_dtype(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if input.is_floating_point():
            return histc(input, *args, **kwargs)
        return histc(input.float(), *args, **kwargs).to(input.dtype)

    torch.histc = histc_any_dtype  # type: ignore[assignment]


# ---- data: a topic-conditioned sparse Markov chain ----


def make_language(vocab: int, spec: LanguageSpec, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(successor ids (topics, V, S), their CDFs (topics, V, S), the entropy of each row in nats (topics, V)), a
    function of ``seed`` alone."""
    g = torch.Generator().manual_seed(seed + 1000)
    t, s = spec.topics, spec.successors
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
    seq[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for i in range(1, seq_len + 1):
        prev = seq[:, i - 1]
        u = torch.rand(n, 1, generator=g)
        pick = torch.searchsorted(cdf[topic, prev], u).clamp_(max=spec.successors - 1)  # (n, 1)
        seq[:, i] = succ[topic, prev].gather(1, pick).squeeze(1)
    floor = float(entropy[topic.unsqueeze(1), seq[:, :-1]].mean())
    return seq.view(steps, batch, seq_len + 1), floor


# ---- the model, built as TorchTitan's trainer builds it ----


def build_job_config(tt: types.SimpleNamespace, args: argparse.Namespace, converters: list[str]) -> Any:
    """The JobConfig a TorchTitan TOML would give: [model] name/flavor/converters, [training] batch and sequence,
    [experimental] custom_import (what makes the "mxq" converter name known)."""
    job_config = tt.JobConfig()
    job_config.model.name = "deepseek_v3"
    job_config.model.flavor = FLAVOR
    job_config.model.converters = list(converters)
    job_config.training.local_batch_size = args.batch
    job_config.training.seq_len = args.seq_len
    job_config.training.steps = args.steps
    job_config.experimental.custom_import = CUSTOM_IMPORT if converters else ""
    return job_config


def build_model_args(tt: types.SimpleNamespace, job_config: Any, device: torch.device) -> Any:
    model_args = copy.deepcopy(tt.model_args[FLAVOR])  # the registry entry is shared: update a copy
    model_args.update_from_config(job_config)  # seq_len, grouped-mm availability (SM90+), MoE backend
    if model_args.attn_type != "sdpa":
        # Flex attention needs block masks from a tokenizer's EOS id and has no CPU backward; this data has no
        # documents, so causal SDPA is the same attention.
        model_args.attn_type, model_args.attn_mask_type = "sdpa", "causal"
    if device.type != "cuda":
        model_args.moe_args.use_grouped_mm = False  # torch._grouped_mm is a CUDA (SM90+) path
    return model_args


def build_model(
    tt: types.SimpleNamespace, model_args: Any, job_config: Any, device: torch.device, seed: int
) -> tuple[nn.Module, Any]:
    """TorchTitan's order (torchtitan/train.py): build on the meta device, apply the model converters, then
    ``to_empty`` on the device and ``init_weights``. Returns (model, the converters container)."""
    # ParallelDims is a plain dataclass: building it for one process needs no torch.distributed (only its device
    # meshes do, and neither build_model_converters nor this script asks for one).
    parallel_dims = tt.ParallelDims(dp_replicate=1, dp_shard=-1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
    with torch.device("meta"):
        model = tt.DeepSeekV3Model(model_args)
    converters = tt.build_model_converters(job_config, parallel_dims)  # a no-op container when converters == []
    converters.convert(model)
    model.to_empty(device=device)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    return model, converters


def import_converter_module() -> types.ModuleType:
    """What ``--experimental.custom_import mxq.integrations.torchtitan`` does in TorchTitan's trainer: importing
    the module registers its converter under the name "mxq"."""
    try:
        return importlib.import_module(CUSTOM_IMPORT)
    except ImportError as e:
        sys.exit(f"cannot import {CUSTOM_IMPORT} ({e}); --bf16-only runs the baseline alone")


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
    """TorchTitan's auxiliary-loss-free load balancing (build_optimizers_with_moe_load_balancing, single process):
    before each optimizer step, nudge each MoE's expert bias towards under-used experts, then reset the counts.
    Reimplemented because TorchTitan's hook asks ParallelDims for its "loss" mesh, which needs torch.distributed."""
    with torch.no_grad():
        for moe in moes:
            if moe.load_balance_coeff is None:
                continue
            counts = moe.tokens_per_expert.float()
            delta = moe.load_balance_coeff * torch.sign(counts.mean() - counts)
            moe.expert_bias.add_(delta - delta.mean())
            moe.tokens_per_expert.zero_()


def train(
    name: str,
    model: nn.Module,
    converters: Any,
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
    # The hooks TorchTitan registers on its optimizers: the expert-bias update before the step, the converters'
    # post-optimizer hook (given the list of model parts) after it.
    opt.register_step_pre_hook(lambda *_: update_expert_bias(moes))
    opt.register_step_post_hook(lambda *_: converters.post_optimizer_hook([model]))
    amp: Callable[[], contextlib.AbstractContextManager[Any]] = (
        (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    )

    tokens_per_step = data.shape[1] * (data.shape[2] - 1)
    losses: list[torch.Tensor] = []
    seconds: list[float] = []
    for step in range(steps):
        batch = data[step].to(device)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        sync(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp():
            logits = model(inputs)
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
    values = [float(v) for v in torch.stack(losses).cpu()]
    window = values[-WINDOW:]
    timed = seconds[min(TIMING_SKIP, steps // 2) :]
    return RunResult(
        losses=values,
        step_seconds=seconds,
        tokens_per_s=tokens_per_step / statistics.median(timed),
        final_mean_loss=sum(window) / len(window),
    )


def write_plot(path: str, runs: dict[str, RunResult], chance: float, floor: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): skipping losses.png; results.json has the curves")
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in runs.items():
        window = min(WINDOW, len(run.losses))
        steps = range(1, len(run.losses) + 1)
        ax.plot(steps, run.losses, label=f"{name} (last-{window} mean {run.final_mean_loss:.4f})")
    ax.axhline(chance, color="grey", ls=":", label=f"chance ln(V) = {chance:.2f}")
    ax.axhline(floor, color="black", ls="--", lw=0.8, label=f"entropy floor = {floor:.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(f"TorchTitan DeepSeek-V3 {FLAVOR}: {' vs '.join(runs)}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---- command line ----


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, torch.device]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d, tiny = PRESETS["default"], PRESETS["tiny"]
    p.add_argument("--steps", type=int, help=f"training steps per run (default {d['steps']}; --tiny {tiny['steps']})")
    p.add_argument("--batch", type=int, help=f"sequences per step (default {d['batch']}; --tiny {tiny['batch']})")
    p.add_argument(
        "--seq-len", type=int, help=f"tokens per sequence (default {d['seq_len']}; --tiny {tiny['seq_len']})"
    )
    p.add_argument("--warmup", type=int, help=f"linear warm-up steps (default {d['warmup']}; --tiny {tiny['warmup']})")
    p.add_argument("--log-every", type=int, help=f"print every N steps (default {d['log_every']})")
    p.add_argument("--lr", type=float, default=8e-4, help="peak AdamW learning rate (default 8e-4, TorchTitan's)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed, the same for both runs (default 0)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda[:N] or cpu")
    p.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="compute dtype of both runs: bf16 autocast over fp32 weights, or fp32; auto = bf16 on CUDA, fp32 on CPU",
    )
    p.add_argument("--out-dir", default="train_torchtitan_out", help="where results.json and losses.png go")
    p.add_argument("--tolerance", type=float, default=0.01, help="allowed relative gap of the last-50 mean losses")
    p.add_argument("--tiny", action="store_true", help="a few small steps (the CPU smoke test)")
    p.add_argument("--bf16-only", action="store_true", help="run the baseline only (no mxq needed)")
    args = p.parse_args(argv)

    for key, value in PRESETS["tiny" if args.tiny else "default"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key, low in (("steps", 1), ("batch", 1), ("seq_len", 2), ("log_every", 1), ("warmup", 0)):
        if getattr(args, key) < low:
            p.error(f"--{key.replace('_', '-')} must be at least {low}")
    if not args.lr > 0:
        p.error("--lr must be positive")
    if not args.tolerance >= 0:
        p.error("--tolerance must be non-negative")

    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"--device must be cuda[:N] or cpu, not {args.device!r}")
    if device.type not in ("cuda", "cpu"):
        p.error(f"--device must be cuda[:N] or cpu, not {args.device!r}")
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
    if device.type == "cpu":
        patch_cpu_histc()
    autocast = args.precision == "bf16"
    base = args.precision  # the baseline run's label: "bf16" (or "fp32" on a CPU)

    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"torch {torch.__version__}, torchtitan {tt.version}, device {device} ({device_name})")
    if tt.datasets_placeholder:
        print("Hugging Face datasets is not installed: a placeholder stands in (this script makes its own data)")

    job_config = build_job_config(tt, args, converters=[])
    model_args = build_model_args(tt, job_config, device)
    vocab = model_args.vocab_size
    print(
        f"model: deepseek_v3 {FLAVOR}, attention {model_args.attn_type} ({model_args.attn_mask_type}), "
        f"experts {'grouped_mm' if model_args.moe_args.use_grouped_mm else 'for-loop'}, "
        f"compute {'bf16 autocast, fp32 weights' if autocast else 'fp32'}"
    )

    spec = LanguageSpec()
    data, floor = make_batches(vocab, spec, args.steps, args.batch, args.seq_len, args.seed)
    chance = math.log(vocab)
    print(
        f"data: {args.steps} batches of {args.batch}x{args.seq_len} tokens, {spec.topics} topics x "
        f"{spec.successors} successors per token; chance ln(V) {chance:.3f}, entropy floor {floor:.3f} nats"
    )

    runs: dict[str, RunResult] = {}
    model, converters = build_model(tt, model_args, job_config, device, args.seed)
    n_params, flops_per_token = model_args.get_nparams_and_flops(model, args.seq_len)
    print(f"parameters {n_params:,}, {flops_per_token / 1e6:.0f} MFLOP per token (fwd+bwd)")
    initial_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    runs[base] = train(base, model, converters, tt.MoE, data, args, device, autocast)
    del model, converters

    summary_text, counts = None, None
    if converter_module is not None:
        mx_job_config = build_job_config(tt, args, converters=[CONVERTER])
        model, converters = build_model(tt, model_args, mx_job_config, device, args.seed)
        load_initial_state(model, initial_state)
        summary = converter_module.last_summary
        summary_text = str(summary)
        counts = {"converted": len(summary.converted), "skipped": len(summary.skipped)}
        print(summary_text)
        runs["mxfp8"] = train(
            "mxfp8", model, converters, tt.MoE, data, args, device, autocast, (base, runs[base].losses)
        )
        del model, converters

    window = min(WINDOW, args.steps)
    result: dict[str, Any] = {
        "args": vars(args),
        "model": {"name": "deepseek_v3", "flavor": FLAVOR, **dataclasses.asdict(model_args)},
        "attention": f"{model_args.attn_type} ({model_args.attn_mask_type})",
        "experts": "torch._grouped_mm" if model_args.moe_args.use_grouped_mm else "for-loop",
        "compute": "bf16 autocast, fp32 weights" if autocast else "fp32",
        "parameters": n_params,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "torchtitan": tt.version},
        "device": str(device),
        "device_name": device_name,
        "language": {**dataclasses.asdict(spec), "vocab": vocab, "chance": chance, "entropy_floor": floor},
        "window": window,
        "timing": f"median step time over steps {min(TIMING_SKIP, args.steps // 2) + 1}.., synchronized",
        "runs": {name: dataclasses.asdict(run) for name, run in runs.items()},
    }
    status = 0
    for name, run in runs.items():
        print(f"[{name:>5}] last-{window} mean loss {run.final_mean_loss:.4f}, {run.tokens_per_s:,.0f} tokens/s")
    if "mxfp8" in runs:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            result["versions"]["mxq"] = importlib.metadata.version("mxq")
        ratio = runs["mxfp8"].final_mean_loss / runs[base].final_mean_loss
        ok = abs(ratio - 1) <= args.tolerance
        status = 0 if ok else 1
        result.update(
            conversion_summary=summary_text,
            conversion_counts=counts,
            ratio_mxfp8_over_baseline=ratio,
            tolerance=args.tolerance,
            within_tolerance=ok,
        )
        print(
            f"last-{window} mean loss ratio mxfp8/{base} {ratio:.4f} "
            f"({'within' if ok else 'NOT within'} {args.tolerance:.1%})"
        )

    json_path = os.path.join(args.out_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    png_path = os.path.join(args.out_dir, "losses.png")
    plotted = write_plot(png_path, runs, chance, floor)
    print(f"wrote {json_path}" + (f" and {png_path}" if plotted else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
