"""Two-rank FSDP2 checks for MXFP8 training (docs/training.md, "FSDP2").

    torchrun --nproc_per_node=2 tests/distributed/fsdp2_checks.py --device cpu|cuda [--checks NAME ...]

The model: MXFP8Linear -> top-2 router + dispatcher -> MXFP8GroupedExperts (SwiGLU, 4 experts) + residual ->
MXFP8Linear, fp32 master weights, every mxq layer (and the root, which holds the router) its own ``fully_shard``
unit on a 2-rank mesh. Every check runs with both activation backends ("fused", "composed") and prints one line per
(check, backend): ``PASS|FAIL|SKIP|XFAIL|XPASS name[backend]: figures``, then a summary. Exit status 1 when a check
fails (or a known failure passes: XPASS), else 0.

Checks:

- ``parity``: forward, backward and AdamW step under FSDP2 equal, bit for bit, a single-rank run of the same model
  on the same data. Rank r trains on microbatch r; the reference (each rank computes it locally, without FSDP)
  runs both microbatches one after the other and sets each gradient to (g_0 + g_1) / 2 in fp32 — what the
  reduce-scatter computes: with 2 ranks the sum has one addition (commutative, so the reduction order cannot
  matter) and the division by 2 is exact (a power of two), whether the backend averages before or after summing.
  Losses, reduced gradients and updated parameters are compared bitwise at every step. (One rank on the two
  microbatches concatenated is not bitwise-equal — other wgrad roundings and expert-group blocks — and its step-1
  gradient distance is printed, not checked.)
- ``compile``: the same, with ``reshard_after_forward=True`` and the model compiled (``model.compile()``; FSDP2's
  hooks stay eager), against the same model compiled on one rank (bitwise); parameters are checked to be sharded
  after forward and all-gathered again for backward. The distance to the eager reference is printed, not checked
  (inductor fuses the SwiGLU and routing arithmetic, so its rounding differs from eager's).
- ``microbatch``: the pipeline-parallel pattern: two microbatches per step, weights all-gathered once by an explicit
  ``unshard()`` and kept unsharded between them (``reshard_after_forward=False``, ``set_reshard_after_backward``,
  ``set_requires_gradient_sync`` and ``set_is_last_backward`` off for the first microbatch); one all-gather and one
  reduce-scatter per unit per step; bitwise equal to the reference that accumulates both microbatches' gradients,
  with all steps inside one ``mxq.nn.reuse_quantized_weights()`` block (so its cache is invalidated correctly by
  every optimizer step and all-gather).
- ``quantize_once``: in that pattern, with the microbatches inside ``mxq.nn.reuse_quantized_weights()``, each
  weight is MXFP8-quantized once per unshard (counts ``torch.ops.mxq.quantize_weight`` calls with a dispatch mode).
  Without the block the layers quantize their weights in every forward (two microbatches: twice per unshard).
- ``cuda_graph`` (CUDA only): a whole FSDP2 training step (forward, backward with its reduce-scatters, SGD step)
  captured in a CUDA graph and replayed on new data matches the same steps run eagerly.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import os
import sys
import traceback
import warnings
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

try:
    import mxq
except ImportError:  # run from a checkout without an installed mxq: use python/ (MXQ_TORCH_LIBRARY names the .so)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import mxq

# FSDP2 warns once per module class that a unit returned a view (MXFP8Linear returns y.reshape(*lead, N), a view of
# the GEMM output, and the root returns proj_out's output): in-place ops on such an output would skip FSDP2's
# pre-backward hook. Nothing here modifies an output in place.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")

CHECKS = ("parity", "compile", "microbatch", "quantize_once", "cuda_graph")
BACKENDS = ("fused", "composed")
KNOWN_FAILURES: dict[str, str] = {}  # check name -> why it fails today (reported as XFAIL)
DIM, HIDDEN, EXPERTS, TOP_K, ALIGN = 64, 64, 4, 2, 32
TOKENS = 64  # per microbatch and rank
STEPS = 3
SEED = 0


# ---- the model ----


class TinyMoE(nn.Module):
    """MXFP8Linear -> top-2 MoE (router, dispatcher, MXFP8GroupedExperts) + residual -> MXFP8Linear."""

    def __init__(self, backend: str):
        super().__init__()
        config = mxq.MXFP8Config(activation_quantization_backend=backend)
        self.proj_in = mxq.MXFP8Linear(DIM, DIM, config=config)
        self.router = nn.Linear(DIM, EXPERTS, bias=False)  # 4 outputs: not an MXFP8 layer
        self.experts = mxq.MXFP8GroupedExperts(EXPERTS, DIM, HIDDEN, kind="swiglu", config=config)
        self.proj_out = mxq.MXFP8Linear(DIM, DIM, bias=False, config=config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj_in(x)  # bf16 (T, D)
        return self.proj_out(h + self.moe(h))

    def moe(self, x: torch.Tensor) -> torch.Tensor:
        """examples/train_moe.py's dispatcher (no host sync): sort the (token, choice) pairs by expert, pad each
        expert's group to 32 rows in a worst-case-sized buffer, run the experts with the group ends as offs, and
        combine the outputs with the renormalized gate weights."""
        T, E, k = x.shape[0], EXPERTS, TOP_K
        probs = self.router(x.float()).softmax(-1)
        gate, choice = probs.topk(k, dim=-1)
        gate = gate / gate.sum(-1, keepdim=True)
        flat = choice.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = (flat.unsqueeze(1) == torch.arange(E, device=x.device)).sum(0)  # bincount with a static shape
        padded = (counts + ALIGN - 1) // ALIGN * ALIGN
        ends = padded.cumsum(0)
        starts, first = ends - padded, counts.cumsum(0) - counts
        sorted_expert = flat[order]
        dest = starts[sorted_expert] + torch.arange(T * k, device=x.device) - first[sorted_expert]
        token = order // k
        rows = (T * k + (ALIGN - 1) * E + ALIGN - 1) // ALIGN * ALIGN
        buf = x.new_zeros(rows, x.shape[1]).index_copy(0, dest, x[token])
        out = self.experts(buf, ends.to(torch.int32))
        weight = gate.reshape(-1)[order].unsqueeze(1)
        y = torch.zeros(T, x.shape[1], device=x.device).index_add(0, token, out[dest].float() * weight)
        return y.to(x.dtype)


MXFP8_UNITS = ("proj_in", "experts", "proj_out")


def build(backend: str, device: torch.device) -> TinyMoE:
    torch.manual_seed(SEED)  # the same initial weights on every rank and for every backend
    return TinyMoE(backend).to(device)


def shard(model: TinyMoE, mesh, reshard_after_forward: bool) -> TinyMoE:
    for name in MXFP8_UNITS:
        fully_shard(getattr(model, name), mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def fsdp_modules(model: nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def loss_fn(model: nn.Module, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x).float(), t)


def make_data(device: torch.device, steps: int, micro: int) -> list:
    """data[step][rank][microbatch] = (x, target), fp32 (TOKENS, DIM); the same on every rank."""
    g = torch.Generator().manual_seed(SEED + 1)
    world = dist.get_world_size()

    def pair():
        return torch.randn(TOKENS, DIM, generator=g).to(device), torch.randn(TOKENS, DIM, generator=g).to(device)

    return [[[pair() for _ in range(micro)] for _ in range(world)] for _ in range(steps)]


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    """The same (single-tensor) AdamW implementation for DTensor shards and plain tensors, on every device."""
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, foreach=False)


# ---- the single-rank reference ----


def reference_step(ref: nn.Module, opt: torch.optim.Optimizer, step_data) -> tuple[list, list]:
    """One step of the reference: each rank's microbatches in turn (gradients accumulated by autograd, as FSDP2
    accumulates unsharded gradients), then every gradient set to (g_0 + g_1) / 2, then the optimizer step.
    Returns the losses per rank and microbatch and the averaged gradients."""
    params = list(ref.parameters())
    per_rank, losses = [], []
    for micro in step_data:
        for p in params:
            p.grad = None
        rank_losses = []
        for x, t in micro:
            loss = loss_fn(ref, x, t)
            loss.backward()
            rank_losses.append(loss.detach())
        losses.append(rank_losses)
        per_rank.append([p.grad.clone() for p in params])
    grads = [sum(gs[1:], gs[0]) / len(gs) for gs in zip(*per_rank)]
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()
    return losses, grads


# ---- comparisons and counters ----


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


class Diff:
    """Accumulates bitwise comparisons: elements compared, elements differing, the largest |a - b|."""

    def __init__(self):
        self.n = self.bad = 0
        self.max = 0.0

    def add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        a, b = (t.full_tensor().detach() if isinstance(t, DTensor) else t.detach() for t in (a, b))
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        self.n += a.numel()
        self.bad += int((bits(a) != bits(b)).sum())
        self.max = max(self.max, float((a.double() - b.double()).abs().max()))

    def __str__(self) -> str:
        return f"{self.bad}/{self.n} differ, max|d|={self.max:.3g}"


def step_and_compare(model, opt, ref, ref_grads, dg: Diff, dp: Diff) -> None:
    """The model's gradients against the reference's (dg), its optimizer step, then its parameters against the
    reference's, already stepped (dp)."""
    for p, g in zip(model.parameters(), ref_grads):
        dg.add(p.grad, g)
    opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        dp.add(p, q)


@contextlib.contextmanager
def count_collectives():
    """Counts FSDP2's all-gathers and reduce-scatters, as counts["all_gather"] and counts["reduce_scatter"]. Its
    default comms look the dist function up at call time: dist.all_gather_single / reduce_scatter_single where torch
    has them (newer releases), dist.all_gather_into_tensor / reduce_scatter_tensor before."""
    counts = Counter()
    single = hasattr(dist, "all_gather_single")
    functions = {
        "all_gather": "all_gather_single" if single else "all_gather_into_tensor",
        "reduce_scatter": "reduce_scatter_single" if single else "reduce_scatter_tensor",
    }
    originals = {f: getattr(dist, f) for f in functions.values()}

    def wrap(name, fn):
        def counted(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return counted

    for name, f in functions.items():
        setattr(dist, f, wrap(name, originals[f]))
    try:
        yield counts
    finally:
        for f, fn in originals.items():
            setattr(dist, f, fn)


class CountWeightQuantization(TorchDispatchMode):
    """Counts torch.ops.mxq.quantize_weight calls per MXFP8 unit (attributed by forward hooks on the units)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.counts = Counter()
        self.current = None
        self.handles = []
        for name in MXFP8_UNITS:
            m = getattr(model, name)
            self.handles.append(m.register_forward_pre_hook(lambda _m, _a, n=name: setattr(self, "current", n)))
            self.handles.append(m.register_forward_hook(lambda *_: setattr(self, "current", None)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.mxq.quantize_weight.default:
            self.counts[self.current] += 1
        return func(*args, **(kwargs or {}))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def params_sharded(module: nn.Module) -> bool:
    return all(isinstance(p, DTensor) for p in module.parameters(recurse=False))


def all_sharded(model: nn.Module) -> bool:
    return all(params_sharded(m) for m in fsdp_modules(model) if m is not model) and all(
        isinstance(p, DTensor) for p in model.parameters()
    )


def nonzero_grads(model: nn.Module) -> bool:
    return all(p.grad is not None and bool(p.grad.full_tensor().count_nonzero()) for p in model.parameters())


# ---- the checks: each returns (passed, figures) on this rank ----

RESULTS: dict = {}  # final parameters per (check, backend), for the fused-vs-composed comparison


def backend_note(check: str, backend: str, model: nn.Module) -> str:
    final = [p.full_tensor().detach().clone() for p in model.parameters()]
    RESULTS[check, backend] = final
    other = RESULTS.get((check, "fused"))
    if backend == "fused" or other is None:
        return ""
    d = Diff()
    for a, b in zip(final, other):
        d.add(a, b)
    return f"; final params vs fused backend: {d}"


def concatenated_batch_gap(model: nn.Module, step_data, grads: list) -> Diff:
    """One rank's step-1 gradients on the ranks' microbatches concatenated (one 128-token batch) vs ``grads`` (the
    average of the per-microbatch gradients), each tensor scaled by 1/max|g|. Not bitwise, and not expected to be:
    each wgrad's bf16 GEMM output is rounded once over 128 tokens instead of once per 64 before the fp32 average,
    and in the experts the tokens of both microbatches share each expert's group, so the 32x1 (colwise) blocks of x
    and dy hold other tokens and get other scales. Hence the bitwise reference is the average; this distance is
    printed to show the size of what the batch split changes (later steps are not compared: AdamW's normalized
    update turns tiny gradient differences into parameter differences of order lr)."""
    x, t = (torch.cat(v) for v in zip(*(micro[0] for micro in step_data)))
    loss_fn(model, x, t).backward()
    gap = Diff()
    for p, g in zip(model.parameters(), grads):
        gap.add(p.grad / g.abs().max(), g / g.abs().max())
    return gap


def check_parity(device, mesh, backend):
    """FSDP2 (default resharding) vs the single-rank reference, eager, bitwise: losses, grads, AdamW update."""
    rank = dist.get_rank()
    base = build(backend, device)
    ref, concat = copy.deepcopy(base), copy.deepcopy(base)
    model = shard(base, mesh, reshard_after_forward=True)
    local = [(p.to_local().numel(), p.full_tensor().numel()) for p in model.parameters()]
    assert all(2 * a == b for a, b in local), f"parameters not split in halves: {local}"
    opt, opt_ref = adamw(model), adamw(ref)
    dl, dg, dp = Diff(), Diff(), Diff()
    losses, grads_ok, gap = [], True, None
    for step_data in make_data(device, STEPS, 1):
        ref_losses, ref_grads = reference_step(ref, opt_ref, step_data)
        gap = gap or concatenated_batch_gap(concat, step_data, ref_grads)
        opt.zero_grad()
        x, t = step_data[rank][0]
        loss = loss_fn(model, x, t)
        loss.backward()
        dl.add(loss.detach(), ref_losses[rank][0])
        grads_ok &= nonzero_grads(model)
        step_and_compare(model, opt, ref, ref_grads, dg, dp)
        losses.append(float(loss.detach()))
    ok = dl.bad == dg.bad == dp.bad == 0 and grads_ok
    figures = (
        f"{STEPS} steps x 2 ranks x {TOKENS} tokens, rank-{rank} losses {' '.join(f'{v:.5f}' for v in losses)}; "
        f"vs single rank: loss {dl}, grads {dg}, params {dp}; every grad nonzero: {grads_ok}; step-1 grads of one "
        f"rank on the concatenated batch (not checked): {gap.bad}/{gap.n} differ, max|d|/max|g| {gap.max:.2g}"
    )
    return ok, figures + backend_note("parity", backend, model)


def mirror_fsdp_graph_breaks(ref: nn.Module) -> None:
    """FSDP2's module hooks are dynamo-disabled, so a compiled FSDP2 model's graphs break around every unit; the
    same (no-op, disabled) hooks on the reference give it the same graphs, hence the same inductor fusions and
    roundings."""
    noop = torch._dynamo.disable(lambda *args: None)
    for module in (ref, *(getattr(ref, n) for n in MXFP8_UNITS)):
        module.register_forward_pre_hook(noop)
        module.register_forward_hook(noop)


def check_compile(device, mesh, backend):
    """reshard_after_forward=True with model.compile(): bitwise vs the compiled single-rank reference; parameters
    sharded after every forward and all-gathered again in backward."""
    rank = dist.get_rank()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    base = build(backend, device)
    ref, eager_ref = copy.deepcopy(base), copy.deepcopy(base)
    model = shard(base, mesh, reshard_after_forward=True)
    mirror_fsdp_graph_breaks(ref)
    model.compile()
    ref.compile()
    opt, opt_ref, opt_eager = adamw(model), adamw(ref), adamw(eager_ref)
    dl, dg, dp, de = Diff(), Diff(), Diff(), Diff()
    sharded_after_forward, gathers = True, []
    units = len(fsdp_modules(model))
    for step_data in make_data(device, STEPS, 1):
        ref_losses, ref_grads = reference_step(ref, opt_ref, step_data)
        eager_losses, _ = reference_step(eager_ref, opt_eager, step_data)
        opt.zero_grad()
        x, t = step_data[rank][0]
        with count_collectives() as counts:
            loss = loss_fn(model, x, t)
            sharded_after_forward &= all_sharded(model)
            fwd = counts["all_gather"]
            loss.backward()
        gathers.append((fwd, counts["all_gather"] - fwd))
        dl.add(loss.detach(), ref_losses[rank][0])
        de.add(loss.detach(), eager_losses[rank][0])
        step_and_compare(model, opt, ref, ref_grads, dg, dp)
    stats = torch._dynamo.utils.counters["stats"]
    graphs = int(stats["unique_graphs"])
    regathered = all(f == units and b == units for f, b in gathers)
    ok = dl.bad == dg.bad == dp.bad == 0 and sharded_after_forward and regathered and graphs > 0
    figures = (
        f"{STEPS} steps, {graphs} graphs compiled (both models); sharded after forward: {sharded_after_forward}; "
        f"all-gathers per step (forward, backward) {gathers[0]} for {units} units; vs compiled single rank: "
        f"loss {dl}, grads {dg}, params {dp}; loss vs eager single rank (not checked): max|d|={de.max:.3g}"
    )
    return ok, figures + backend_note("compile", backend, model)


def microbatch_step(model, step_data, rank):
    """The pipeline-parallel pattern: explicit unshard, two microbatches, sync and reshard only after the last."""
    for m in fsdp_modules(model):
        m.unshard()
    losses, unsharded_between = [], True
    micro = step_data[rank]
    for j, (x, t) in enumerate(micro):
        last = j == len(micro) - 1
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)
        model.set_is_last_backward(last)
        loss = loss_fn(model, x, t)
        loss.backward()
        losses.append(loss.detach())
        if not last:
            unsharded_between &= not any(isinstance(p, DTensor) for p in model.parameters())
    return losses, unsharded_between


def check_microbatch(device, mesh, backend):
    """Two microbatches per step, weights unsharded between them: one all-gather and one reduce-scatter per unit
    per step, bitwise vs the reference that accumulates both microbatches."""
    rank = dist.get_rank()
    base = build(backend, device)
    ref = copy.deepcopy(base)
    model = shard(base, mesh, reshard_after_forward=False)
    opt, opt_ref = adamw(model), adamw(ref)
    units = len(fsdp_modules(model))
    dl, dg, dp = Diff(), Diff(), Diff()
    comm, unsharded, resharded = [], True, True
    # One reuse_quantized_weights block over every step: each optimizer step and all-gather must invalidate the
    # cached weight quantizations (a stale one would break the bitwise comparison).
    with mxq.nn.reuse_quantized_weights():
        for step_data in make_data(device, STEPS, 2):
            ref_losses, ref_grads = reference_step(ref, opt_ref, step_data)
            opt.zero_grad()
            with count_collectives() as counts:
                losses, between = microbatch_step(model, step_data, rank)
            comm.append((counts["all_gather"], counts["reduce_scatter"]))
            unsharded &= between
            resharded &= all_sharded(model)
            for a, b in zip(losses, ref_losses[rank]):
                dl.add(a, b)
            step_and_compare(model, opt, ref, ref_grads, dg, dp)
    once = all(c == (units, units) for c in comm)
    ok = dl.bad == dg.bad == dp.bad == 0 and unsharded and resharded and once
    figures = (
        f"{STEPS} steps x 2 microbatches; (all-gathers, reduce-scatters) per step {comm[0]} for {units} units; "
        f"unsharded between microbatches: {unsharded}; resharded after the step: {resharded}; vs single rank: "
        f"loss {dl}, grads {dg}, params {dp}"
    )
    return ok, figures + backend_note("microbatch", backend, model)


def check_quantize_once(device, mesh, backend):
    """In the microbatch pattern, quantize_weight runs once per weight per unshard (all-gather)."""
    rank = dist.get_rank()
    model = shard(build(backend, device), mesh, reshard_after_forward=False)
    weights = {n: sum(p.dim() >= 2 for p in getattr(model, n).parameters()) for n in MXFP8_UNITS}
    counter = CountWeightQuantization(model)
    step_data = make_data(device, 1, 2)[0]
    try:
        with count_collectives() as counts, counter, mxq.nn.reuse_quantized_weights():
            microbatch_step(model, step_data, rank)
    finally:
        counter.remove()
    unshards = counts["all_gather"] / len(fsdp_modules(model))
    per = {n: counter.counts[n] / (weights[n] * unshards) for n in MXFP8_UNITS}
    ok = all(v == 1 for v in per.values()) and counter.counts[None] == 0
    figures = (
        f"2 microbatches, {unshards:g} all-gather per unit; quantize_weight calls per weight per unshard: "
        + ", ".join(f"{n} {v:g}" for n, v in per.items())
        + " (want 1)"
    )
    return ok, figures


def check_cuda_graph(device, mesh, backend):
    """A captured FSDP2 training step (forward, backward and its reduce-scatters, SGD) replayed on new data equals
    the same steps run eagerly. Unsharded storage is kept (set_keep_unsharded_storage) so its addresses stay fixed."""
    if device.type != "cuda":
        return None, "CUDA only"
    rank = dist.get_rank()
    steps = make_data(device, 4, 1)

    def make():
        m = shard(build(backend, device), mesh, reshard_after_forward=False)
        m.set_keep_unsharded_storage(True)
        return m, torch.optim.SGD(m.parameters(), lr=1e-2)

    def step(model, opt, x, t):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model, x, t)
        loss.backward()
        opt.step()
        return loss

    eager, opt_e = make()
    losses_e = [step(eager, opt_e, *s[rank][0]).detach().clone() for s in steps]

    graphed, opt_g = make()
    init = [p.detach().clone() for p in graphed.parameters()]
    static_x, static_t = (v.clone() for v in steps[0][rank][0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up: lazy init, NCCL communicators, allocator, grads allocated
            step(graphed, opt_g, static_x, static_t)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    # thread_local: the NCCL watchdog thread queries events while this thread captures.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static_loss = step(graphed, opt_g, static_x, static_t)
    torch.cuda.synchronize()
    with torch.no_grad():  # undo the warm-up and capture updates, then replay the eager run's data
        for p, p0 in zip(graphed.parameters(), init):
            p.copy_(p0)
    dl, dp = Diff(), Diff()
    for s, want in zip(steps, losses_e):
        static_x.copy_(s[rank][0][0])
        static_t.copy_(s[rank][0][1])
        graph.replay()
        dl.add(static_loss.detach(), want)
    torch.cuda.synchronize()
    close = True
    for p, q in zip(graphed.parameters(), eager.parameters()):
        dp.add(p, q)
        close &= torch.allclose(p.full_tensor(), q.full_tensor(), rtol=1e-2, atol=1e-3)
    rel = dl.max / min(abs(float(v)) for v in losses_e)
    close &= rel <= 1e-2
    figures = (
        f"4 replays vs 4 eager steps: loss {dl} (rel {rel:.2g}), params {dp}; bitwise: "
        f"{dl.bad == dp.bad == 0}; within rtol 1e-2 (the single-GPU graph tests' bar): {close}"
    )
    return close, figures


CHECK_FUNCTIONS = {
    "parity": check_parity,
    "compile": check_compile,
    "microbatch": check_microbatch,
    "quantize_once": check_quantize_once,
    "cuda_graph": check_cuda_graph,
}


# ---- the driver ----


def run_one(name, device, mesh, backend) -> tuple[str, str]:
    try:
        passed, figures = CHECK_FUNCTIONS[name](device, mesh, backend)
    # A FAIL line, never an XFAIL; both ranks run the same code, so both get here. torch's errors (dynamo, inductor,
    # c10d, the mxq ops) are RuntimeErrors; anything else ends the run with a traceback and a non-zero exit.
    except (AssertionError, RuntimeError, TypeError, ValueError) as e:
        traceback.print_exc()
        return "FAIL", f"{type(e).__name__}: {e}".splitlines()[0]
    if passed is None:
        return "SKIP", figures
    known = KNOWN_FAILURES.get(name)
    if known is None:
        return ("PASS" if passed else "FAIL"), figures
    if passed:
        return "XPASS", f"{figures} (the known failure is gone: drop it from KNOWN_FAILURES)"
    return "XFAIL", f"{figures}; known failure: {known}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS))
    ap.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    args = ap.parse_args()

    timeout = datetime.timedelta(seconds=600)
    if args.device == "cuda":
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local_rank))
        device = torch.device("cuda", local_rank)
    else:
        dist.init_process_group("gloo", timeout=timeout)
        device = torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit(f"fsdp2_checks.py: run it with torchrun --nproc_per_node=2 (world size {world})")
    mesh = init_device_mesh(args.device, (world,))

    tally = Counter()
    for name in args.checks:
        for backend in args.backends:
            status, figures = run_one(name, device, mesh, backend)
            gathered = [None] * world
            dist.all_gather_object(gathered, (status, figures))
            statuses = {s for s, _ in gathered}
            if len(statuses) > 1:  # the ranks disagree: the worst status wins, every rank's figures shown
                order = ("FAIL", "XPASS", "XFAIL", "SKIP", "PASS")
                status = min(statuses, key=order.index)
                figures = " | ".join(f"rank {r}: {s} {f}" for r, (s, f) in enumerate(gathered))
            tally[status] += 1
            if rank == 0:
                print(f"{status} {name}[{backend}]: {figures}", flush=True)
    failed = tally["FAIL"] + tally["XPASS"]
    if rank == 0:
        counts = ", ".join(f"{tally[s]} {s.lower()}" for s in ("PASS", "FAIL", "SKIP", "XFAIL", "XPASS") if tally[s])
        print(
            f"fsdp2_checks: {counts} (device {args.device}, world {world}, torch {torch.__version__}, "
            f"mxq CUDA kernels: {mxq.has_cuda_kernels()})",
            flush=True,
        )
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
