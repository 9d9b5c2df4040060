"""mxq.nn.reuse_quantized_weights: each weight quantized once per block across microbatches, the same bytes as
quantizing it every forward, a fresh quantization after an in-place update of the weight or an optimizer step,
nothing cached outside the block, under torch.compile or during CUDA-graph capture. (Under FSDP2:
tests/distributed/fsdp2_checks.py, checks microbatch and quantize_once.)"""

from __future__ import annotations

import pytest
import torch
from helpers import DEVICES, make_offs, requires_cuda
from mxq import MXFP8GroupedExperts, MXFP8Linear
from mxq.nn import reuse_quantized_weights
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


class _CountWeightQuantizations(TorchDispatchMode):
    """Counts torch.ops.mxq.quantize_weight calls per weight shape (the layers call the op directly)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.mxq.quantize_weight.default:
            self.calls.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


class _Model(nn.Module):
    """An MXFP8Linear (fp32 master weight: cast inside forward) feeding MXFP8 SwiGLU experts."""

    def __init__(self, device):
        super().__init__()
        torch.manual_seed(0)
        self.proj = MXFP8Linear(64, 64, bias=False, device=device, dtype=torch.float32)
        self.experts = MXFP8GroupedExperts(4, 64, 96, device=device, dtype=torch.bfloat16)

    def forward(self, x, offs):
        return self.experts(self.proj(x), offs)


def _microbatches(device, n=3):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(256, 64, generator=g).to(device=device, dtype=torch.bfloat16),
            make_offs(256, 4, seed=10 + i, align=32).to(device),
        )
        for i in range(n)
    ]


def _step(model, batches):
    """Forward and backward of every microbatch (gradients accumulate); the outputs and the gradients, cloned."""
    model.zero_grad(set_to_none=True)
    outs = []
    for x, offs in batches:
        y = model(x.requires_grad_(), offs)
        y.float().square().mean().backward()
        outs += [y.detach().clone(), x.grad.clone()]
    return outs + [p.grad.clone() for p in model.parameters()]


def _assert_bitwise(a, b):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert torch.equal(u.view(torch.uint8), v.view(torch.uint8)), f"tensor {i} differs"


@pytest.mark.parametrize("device", DEVICES)
def test_once_per_block_same_bytes_and_fresh_after_an_update(device):
    model = _Model(device)
    batches = _microbatches(device)
    n_weights = 4  # proj.weight, experts.w1 / w2 / w3
    with _CountWeightQuantizations() as every_forward:
        want = _step(model, [(x.clone(), o) for x, o in batches])
    assert len(every_forward.calls) == n_weights * len(batches)

    with _CountWeightQuantizations() as reused, reuse_quantized_weights():
        got = _step(model, [(x.clone(), o) for x, o in batches])
        assert len(reused.calls) == n_weights, reused.calls
        # An in-place update (as an optimizer step) makes the next forward quantize the weights again.
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.5)
        after_update = _step(model, [(x.clone(), o) for x, o in batches])
        assert len(reused.calls) == 2 * n_weights, reused.calls
        # An optimizer step clears the block's cache, whether or not the version counters saw the update (an FSDP2
        # all-gather into an unsharded weight bypasses them).
        torch.optim.SGD(model.parameters(), lr=0.0).step()
        _step(model, [(x.clone(), o) for x, o in batches])
        assert len(reused.calls) == 3 * n_weights, reused.calls
    _assert_bitwise(got, want)
    with _CountWeightQuantizations() as outside:
        fresh = _step(model, [(x.clone(), o) for x, o in batches])
    assert len(outside.calls) == n_weights * len(batches)
    _assert_bitwise(after_update, fresh)


def test_cached_operands_are_outside_autograd():
    """The cached quantized weights are plain tensors, as the ones quantized inside the layers' Function.forward:
    no grad_fn holding the cast of the weight from the first microbatch, no requires_grad."""
    import mxq.linear

    model = _Model("cpu")
    with reuse_quantized_weights():
        _step(model, _microbatches("cpu", n=1))
        cached = [t for _, _, ops in mxq._gemm._reuse.cache.values() for t in ops if t is not None]
        assert len(cached) == 4 * 4  # four weights, each (q_row, s_row, q_col, s_col)
        assert all(t.grad_fn is None and not t.requires_grad for t in cached)


def test_not_used_under_torch_compile():
    """Inside a block, a compiled model (fullgraph) traces and runs as outside it: the cache is bypassed while
    torch.compile traces, so the graph quantizes the weights itself (compiled and eager results differ in the last
    bits, inductor fusing the SwiGLU's elementwise ops: compiled is compared with compiled)."""
    model = _Model("cpu")
    batches = _microbatches("cpu", n=2)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    try:
        want = _step(compiled, [(x.clone(), o) for x, o in batches])
        with reuse_quantized_weights():
            got = _step(compiled, [(x.clone(), o) for x, o in batches])
    finally:
        torch._dynamo.reset()
    _assert_bitwise(got, want)


@requires_cuda
def test_not_used_during_graph_capture():
    """A captured step quantizes the weights it replays with: after an in-place update of the weights, a replay
    inside a reuse block gives the updated weights' outputs."""
    layer = MXFP8Linear(64, 64, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16)
    with reuse_quantized_weights():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            layer(x)  # warm-up (and a cache entry for the current weights)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            y = layer(x)
        with torch.no_grad():
            layer.weight.mul_(0.5)
        graph.replay()
        with torch.no_grad():
            want = layer(x)
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))


def test_seam_views_hit_the_cache_and_computed_weights_are_not_cached():
    """TorchTitan's grouped-GEMM seam hands mxq.grouped_mm ``w.transpose(-2, -1).transpose(-2, -1)``-style views of a
    parameter: a view covering its base exactly is the base, so it is quantized once per block. A computed weight (a
    cast of an fp32 master weight) is a new tensor every call: never cached, so the cache does not grow with calls."""
    import mxq

    w = nn.Parameter(torch.randn(4, 96, 64, dtype=torch.bfloat16))
    w32 = nn.Parameter(torch.randn(4, 96, 64))
    x = torch.randn(100, 64, dtype=torch.bfloat16)
    offs = torch.tensor([10, 10, 60, 100], dtype=torch.int32)
    with reuse_quantized_weights(), _CountWeightQuantizations() as count:
        for _ in range(3):
            mxq.grouped_mm(x, w.transpose(-2, -1).transpose(-2, -1), offs)
        assert len(count.calls) == 1
        for _ in range(3):
            mxq.grouped_mm(x, w32.bfloat16(), offs)
        assert len(count.calls) == 4
        assert len(mxq._gemm._reuse.cache) == 1
