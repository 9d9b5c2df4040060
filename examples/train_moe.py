"""Train a small MoE transformer twice — bf16, then MXFP8 via mxq.nn.convert — and check the two loss curves agree.

    python examples/train_moe.py                       # defaults: 300 steps, CUDA if present, ./train_moe_out
    python examples/train_moe.py --steps 500 --device cuda --out-dir /tmp/moe --seed 1
    python examples/train_moe.py --tiny --steps 5 --device cpu   # the smoke-test config (seconds on a CPU)
    python examples/train_moe.py --recipe fp8_blockwise          # Run 2 in FP8 blockwise (Hopper's native recipe)

The model: token + position embeddings, ``Config.layers`` pre-norm transformer blocks (causal attention, then a
feed-forward that is dense — Linear, GELU, Linear — in even blocks and a mixture of experts in odd ones), a final
norm and an LM head. A MoE feed-forward has a router (nn.Linear to the expert count, softmax, top-k, renormalized
gate weights, a Switch-style load-balancing loss) and SwiGLU experts (mxq.GroupedExperts, the expert-module interface
of docs/training.md). In bf16 the (token, choice) pairs are sorted by expert, the experts run on the routed rows
(groups of any size) and the outputs are scaled by the gate weights and scatter-added to their tokens. Once the
experts are converted (mxq.nn.convert), the same steps run through mxq.TokenDispatcher: dispatch quantizes the
routed tokens once on both axes (gather, pad to the format's block and quantize in one pass), the experts' GEMMs read
those operands, and the combine's backward quantizes the score-weighted output gradient in one pass.

The data: a synthetic language the example generates — each sequence draws one of ``Config.topics`` hidden topics, and
every topic is a sparse random Markov chain over the vocabulary (each token has a few likely successors). The
model must learn the transition tables and infer the topic from the context; the loss falls from ln(vocab) (chance)
towards the chain's entropy. Both runs see the same batches in the same order and start from the same weights
(same seed).

Run 1: the model as built (bf16 autocast, fp32 master weights). Run 2: the same model after ``mxq.nn.convert``
with the recipe ``--recipe`` (a name in ``mxq.config.RECIPES``; default mxfp8_rceil: 32x32 weight tiles, fused
activation casts, RCEIL): every nn.Linear becomes MXFP8Linear and the experts MXFP8GroupedExperts, dispatched by
mxq.TokenDispatcher (``--routed-quantization``: the fused one-pass op, or the composed gather + pad + quantize); the
router (out_features = expert count) is skipped, as the summary shows. The run is labelled by its format: "mxfp8",
or "fp8bw" for FP8 blockwise (``--recipe fp8_blockwise``: 1x128 activation blocks, 128x128 weight tiles). The
config's widths and token count must be multiples of the format's block (32, FP8 blockwise 128; both configs are),
checked before any training. The GEMMs run natively where the device has the format's (MXFP8: SM100+; FP8
blockwise: SM90, cuBLASLt dense and mxq's CUTLASS grouped GEMM); elsewhere (MXFP8 below SM100, e.g. an H200; a CPU)
they are emulated — mxq dequantizes the operands and runs high-precision GEMMs — so the run measures the format's
numerics, not its speed.

Output: a progress line every ``--log-every`` steps (step, loss, tokens/s), ``losses.png`` (both curves; skipped
with a message when matplotlib is missing) and ``results.json`` (per-step losses, tokens/s, the config, the
conversion summary, the mean loss over the last 50 steps of each run and their ratio, the tokens/s ratio) in
``--out-dir``. Exit status 1 when the converted run's last-50 mean loss is not within ``--tolerance`` (default 1%) of
bf16's, 2 for arguments it cannot run (checked before any work), else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time

import mxq
import torch
import torch.nn.functional as F
from mxq._gemm import NATIVE_GEMMS, grouped_gemm_path, use_native_gemm
from torch import nn

WINDOW = 50  # the final mean loss is over the last WINDOW steps (all steps when there are fewer)
FORMAT_NAMES = {"mxfp8": "MXFP8", "fp8_blockwise": "FP8 blockwise"}  # per recipe format, for the output


@dataclasses.dataclass
class Config:
    vocab: int = 256
    dim: int = 256
    heads: int = 4
    layers: int = 4
    dense_hidden: int = 1024
    experts: int = 8
    top_k: int = 2
    expert_hidden: int = 512
    seq_len: int = 256
    batch: int = 32
    topics: int = 4
    successors: int = 4
    lr: float = 3e-3
    warmup: int = 30
    aux_loss: float = 0.01


# Every width and the token count (batch x seq_len) are multiples of 128, FP8 blockwise's block (MXFP8's is 32).
TINY = Config(
    vocab=128,
    dim=128,
    heads=2,
    layers=2,
    dense_hidden=256,
    experts=4,
    top_k=2,
    expert_hidden=128,
    seq_len=64,
    batch=4,
    topics=2,
    warmup=2,
)


# ---- data: a topic-conditioned sparse Markov chain ----


def make_language(cfg: Config, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(transition CDFs (topics, V, V), start distribution (V,)) of the synthetic language, a function of ``seed``
    alone: every draw comes from its own generator, so the batches and the entropy floor describe one language."""
    g = torch.Generator().manual_seed(seed + 1000)
    V = cfg.vocab
    probs = torch.zeros(cfg.topics, V, V)
    for t in range(cfg.topics):
        succ = torch.stack([torch.randperm(V, generator=g)[: cfg.successors] for _ in range(V)])  # (V, S)
        # Dirichlet(1, ..., 1) weights: i.i.d. Exp(1) draws, normalized (torch.distributions takes no generator).
        e = torch.empty(V, cfg.successors).exponential_(generator=g)
        probs[t].scatter_(1, succ, e / e.sum(-1, keepdim=True))
    return probs.cumsum(-1), torch.full((V,), 1.0 / V)


def make_batches(cfg: Config, steps: int, seed: int) -> torch.Tensor:
    """(steps, batch, seq_len + 1) int64 token ids, generated on the CPU from ``seed`` (identical for both runs)."""
    cdf, start = make_language(cfg, seed)
    g = torch.Generator().manual_seed(seed + 2000)
    n = steps * cfg.batch
    topic = torch.randint(0, cfg.topics, (n,), generator=g)
    seq = torch.empty(n, cfg.seq_len + 1, dtype=torch.int64)
    seq[:, 0] = torch.multinomial(start, n, replacement=True, generator=g)
    for i in range(1, cfg.seq_len + 1):
        rows = cdf[topic, seq[:, i - 1]]  # (n, V)
        u = torch.rand(n, 1, generator=g)
        seq[:, i] = torch.searchsorted(rows, u).squeeze(1).clamp_(max=cfg.vocab - 1)
    return seq.view(steps, cfg.batch, cfg.seq_len + 1)


def language_entropy(cfg: Config, seed: int) -> float:
    """Mean per-token entropy (nats) of the chain's transitions given the topic: a floor for the loss."""
    cdf, _ = make_language(cfg, seed)
    p = torch.diff(cdf, dim=-1, prepend=torch.zeros_like(cdf[..., :1])).clamp_min(0)
    h = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    return float(h.mean())


# ---- the model ----


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class DenseFFN(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.up = nn.Linear(cfg.dim, cfg.dense_hidden)
        self.down = nn.Linear(cfg.dense_hidden, cfg.dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.down(F.gelu(self.up(x))), x.new_zeros((), dtype=torch.float32)


class MoEFFN(nn.Module):
    """Top-k router + grouped SwiGLU experts; converted experts are dispatched by mxq.TokenDispatcher."""

    routed_quantization = "fused"  # mxq.TokenDispatcher's routed quantization (main() sets it from the command line)

    def __init__(self, cfg: Config):
        super().__init__()
        self.num_experts, self.top_k = cfg.experts, cfg.top_k
        self.router = nn.Linear(cfg.dim, cfg.experts, bias=False)
        self.experts = mxq.GroupedExperts(cfg.experts, cfg.dim, cfg.expert_hidden, kind="swiglu")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        T, E, k = x.shape[0], self.num_experts, self.top_k
        probs = self.router(x).float().softmax(-1)  # (T, E)
        gate, choice = probs.topk(k, dim=-1)  # (T, k)
        gate = gate / gate.sum(-1, keepdim=True)
        flat = choice.reshape(-1)  # (T·k,)
        counts = torch.bincount(flat, minlength=E)  # (E,), for the load-balancing loss

        config = getattr(self.experts, "mxfp8_config", None)
        if config is not None:
            # Converted experts: the routed tokens are gathered, padded to the format's block per expert and
            # quantized in one pass; the experts' GEMMs read those operands; the combine applies the gates and
            # scatter-adds to the tokens.
            d = mxq.TokenDispatcher(E, config=config, routed_quantization=self.routed_quantization)
            y = d.experts(d.dispatch(x, gate, choice), self.experts)
        else:
            # bf16: sort the (token, choice) pairs by expert, run the experts on the routed rows (groups of any
            # size), scale by the gates and scatter-add back to the tokens.
            order = torch.argsort(flat, stable=True)
            token = order // k
            out = self.experts(x[token], counts.cumsum(0).to(torch.int32))  # (T·k, dim)
            scaled = (out.float() * gate.reshape(-1)[order].unsqueeze(1)).to(out.dtype)
            y = scaled.new_zeros(T, out.shape[1]).index_put_((token,), scaled, accumulate=True)

        # Switch-style load balancing: E · Σ_e (fraction of pairs routed to e) · (mean router prob of e).
        aux = E * (counts.float() / (T * k) * probs.mean(0)).sum()
        return y.to(x.dtype).view(shape), aux


class Block(nn.Module):
    def __init__(self, cfg: Config, moe: bool):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.dim)
        self.ffn = MoEFFN(cfg) if moe else DenseFFN(cfg)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h, aux = self.ffn(self.norm2(x))
        return x + h, aux


class TinyMoETransformer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, moe=i % 2 == 1) for i in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        aux = x.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            x, a = block(x)
            aux = aux + a
        return self.head(self.norm(x)), aux


# ---- training ----


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(name: str, model: nn.Module, data: torch.Tensor, cfg: Config, args, device: torch.device) -> dict:
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    steps = data.shape[0]

    def lr_at(step: int) -> float:  # linear warm-up, then cosine to 10%
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        t = (step - cfg.warmup) / max(steps - cfg.warmup, 1)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    tokens_per_step = cfg.batch * cfg.seq_len
    losses, rates = [], []
    sync(device)
    t0, last_step = time.perf_counter(), 0
    for step in range(steps):
        batch = data[step].to(device, non_blocking=True)
        inp, tgt = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits, aux = model(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + cfg.aux_loss * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.detach())
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            sync(device)
            now = time.perf_counter()
            rate = tokens_per_step * (step + 1 - last_step) / (now - t0)
            rates.append(rate)
            print(f"[{name}] step {step + 1:5d}/{steps}  loss {loss.item():.4f}  {rate:,.0f} tokens/s", flush=True)
            t0, last_step = now, step + 1
    losses = [float(v) for v in torch.stack(losses).cpu()]
    window = losses[-WINDOW:]
    # The first interval includes warm-up (allocator, lazy init): report the steady rate when there is one.
    steady = rates[1:] or rates
    return {
        "losses": losses,
        "tokens_per_s": sum(steady) / len(steady),
        "final_mean_loss": sum(window) / len(window),
    }


def write_plot(path: str, title: str, runs: dict, chance: float, floor: float) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed (pip install matplotlib): skipping the loss plot; results.json has the curves"
        )
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, r in runs.items():
        ax.plot(
            range(1, len(r["losses"]) + 1), r["losses"], label=f"{name} (last-{WINDOW} mean {r['final_mean_loss']:.4f})"
        )
    ax.axhline(chance, color="grey", ls=":", label=f"chance ln(V) = {chance:.2f}")
    ax.axhline(floor, color="black", ls="--", lw=0.8, label=f"chain entropy = {floor:.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def check_recipe(p: argparse.ArgumentParser, args: argparse.Namespace, cfg: Config) -> tuple[mxq.MXFP8Config, str]:
    """--recipe's config and the converted run's label ("mxfp8", or "fp8bw" for FP8 blockwise), after checking
    ``cfg`` against the recipe's block (MXFP8: 32; FP8 blockwise: 128): mxq.nn.convert skips a Linear or the experts
    whose widths are not multiples of it (the run would not be the recipe's), and every converted Linear sees the
    step's tokens as its M, quantized in blocks along M for the weight gradient, which mxq does not pad."""
    recipe = mxq.config.RECIPES[args.recipe]
    block = mxq.ops.FORMAT_BLOCK[recipe.format]
    dims = {
        "dim": cfg.dim,
        "dense_hidden": cfg.dense_hidden,
        "expert_hidden": cfg.expert_hidden,
        "vocab": cfg.vocab,
        "batch x seq_len": cfg.batch * cfg.seq_len,
    }
    bad = [f"{name} = {value}" for name, value in dims.items() if value % block]
    if bad:
        p.error(
            f"--recipe {args.recipe} needs the model's widths and token count to be multiples of {block}; the "
            f"{'TINY' if args.tiny else 'default'} config (Config in {os.path.basename(__file__)}) has {', '.join(bad)}"
        )
    return recipe, "mxfp8" if recipe.format == "mxfp8" else "fp8bw"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300, help="training steps per run (default 300)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda or cpu")
    p.add_argument("--out-dir", default="train_moe_out", help="where losses.png and results.json go")
    p.add_argument("--seed", type=int, default=0, help="model init and data seed, the same for both runs")
    p.add_argument("--log-every", type=int, default=25, help="print a progress line every N steps")
    p.add_argument("--tolerance", type=float, default=0.01, help="allowed relative gap of the final mean losses")
    p.add_argument("--tiny", action="store_true", help="a tiny config (the CPU smoke test)")
    p.add_argument(
        "--recipe",
        choices=tuple(mxq.config.RECIPES),
        default="mxfp8_rceil",
        help="mxq's recipe for the converted run (default mxfp8_rceil; fp8_blockwise: Hopper's native FP8 GEMMs on "
        "SM90, emulated elsewhere)",
    )
    p.add_argument(
        "--routed-quantization",
        choices=mxq.dispatch.ROUTED_QUANTIZATIONS,
        default="fused",
        help="mxq.TokenDispatcher's routed quantization: fused (one pass) or composed (gather + pad + quantize)",
    )
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    if args.log_every < 1:
        p.error(f"--log-every must be at least 1, got {args.log_every}")
    if not args.tolerance >= 0:  # also refuses nan
        p.error(f"--tolerance must be a non-negative fraction (0.01 = 1%), got {args.tolerance}")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        p.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if device.type not in ("cpu", "cuda"):
        p.error(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no CUDA device (use --device cpu)")
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=args.out_dir):
            pass
    except OSError as e:
        p.error(f"--out-dir {args.out_dir!r} is not a writable directory: {e.strerror}")
    cfg = TINY if args.tiny else Config()
    recipe, label = check_recipe(p, args, cfg)
    routed = args.routed_quantization
    MoEFFN.routed_quantization = routed
    if device.type == "cpu" and not args.tiny:
        print(
            "note: the full config on a CPU takes about 18 minutes for 300 steps (2 cores); --tiny runs the "
            "smoke-test config in seconds"
        )
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    print(f"mxq {mxq.__version__}, torch {torch.__version__}, device {device}", end="")
    if device.type == "cuda":
        print(
            f" ({torch.cuda.get_device_name(device)}, SM {'.'.join(map(str, torch.cuda.get_device_capability(device)))})"
        )
    else:
        print()
    print(f"config: {dataclasses.asdict(cfg)}")
    native = use_native_gemm("train_moe.py", recipe, device)
    print(
        f"{FORMAT_NAMES[recipe.format]} GEMMs on this device (recipe {args.recipe}): "
        f"linear {'native' if native else 'emulated'}, grouped {grouped_gemm_path(device, native, recipe.format)}, "
        f"routed quantization {routed}" + ("" if native else f"; native GEMMs need {NATIVE_GEMMS[recipe.format][1]}")
    )
    data = make_batches(cfg, args.steps, args.seed)
    chance, floor = math.log(cfg.vocab), language_entropy(cfg, args.seed)
    print(f"data: {args.steps} batches of {cfg.batch}x{cfg.seq_len} tokens; chance {chance:.3f}, entropy {floor:.3f}")

    runs, summary = {}, None
    for name in ("bf16", label):
        torch.manual_seed(args.seed)
        model = TinyMoETransformer(cfg).to(device)
        if name == label:
            summary = mxq.nn.convert(model, config=recipe)
            print(summary)
        runs[name] = train(name, model, data, cfg, args, device)
        del model

    bf, mx = runs["bf16"]["final_mean_loss"], runs[label]["final_mean_loss"]
    ratio = mx / bf
    speed = runs[label]["tokens_per_s"] / runs["bf16"]["tokens_per_s"]
    ok = abs(ratio - 1) <= args.tolerance
    window = min(WINDOW, args.steps)
    result = {
        "config": dataclasses.asdict(cfg),
        "args": vars(args),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "chance_loss": chance,
        "entropy_floor": floor,
        "window": window,
        "conversion": {
            "converted": [c._asdict() for c in summary.converted],
            "skipped": [s._asdict() for s in summary.skipped],
        },
        "recipe": args.recipe,
        "label": label,
        **runs,
        "final_mean_loss_bf16": bf,
        f"final_mean_loss_{label}": mx,
        f"ratio_{label}_over_bf16": ratio,
        f"tokens_per_s_{label}_over_bf16": speed,
        "tolerance": args.tolerance,
        "within_tolerance": ok,
    }
    json_path = os.path.join(args.out_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    png_path = os.path.join(args.out_dir, "losses.png")
    title = f"Tiny MoE transformer: bf16 vs {FORMAT_NAMES[recipe.format]} (mxq, {args.recipe})"
    plotted = write_plot(png_path, title, runs, chance, floor)
    print(
        f"final mean loss over the last {window} steps: bf16 {bf:.4f}, {label} {mx:.4f}, ratio {ratio:.4f} "
        f"({'within' if ok else 'NOT within'} {args.tolerance:.0%}); "
        f"tokens/s bf16 {runs['bf16']['tokens_per_s']:,.0f}, {label} {runs[label]['tokens_per_s']:,.0f}, "
        f"ratio {label}/bf16 {speed:.3f}x"
    )
    print(f"wrote {json_path}" + (f" and {png_path}" if plotted else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
