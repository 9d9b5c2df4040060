"""mxq.quantize_routed (docs/numerics.md §12.1) against its composition from torch ops — gather with torch indexing,
``(x[index].float() * scale[:, None]).to(x.dtype)``, pad into mxq.moe's padded row space, ``mxq.quantize(padded,
offs=offs_p)`` — raw bytes, on the CPU dispatch (the C++ reference) and on CUDA; adversarial routings; opcheck, Meta
shapes, torch.compile(fullgraph=True), a CUDA graph; the error messages."""

from __future__ import annotations

import mxq
import pytest
import torch
from helpers import DEVICES, assert_outputs_equal, random_bf16, requires_cuda, stable_seed
from mxq.moe import padded_row_space
from torch_reference import assert_bytes_equal

NAMES = ("q_row", "s_row", "q_col", "s_col")
ROUTED_NAMES = (*NAMES, "offs_p", "dest")


def composed(x, index, counts, scale=None, scaling_mode="rceil", rowwise=True, colwise=True):
    """The composed pipeline, written from the spec with torch ops and mxq.quantize, on mxq.moe.padded_row_space (the
    Python reference of the padded row space)."""
    N = index.shape[0]
    offs = torch.cumsum(counts.long(), 0).to(torch.int32)
    offs_p, dest, Mp = padded_row_space(offs, N)
    v = x[index.long()]
    if scale is not None:
        v = (v.float() * scale[:, None]).to(x.dtype)
    padded = v.new_zeros(Mp, v.shape[1]).index_copy_(0, dest, v)
    q = mxq.quantize(padded, offs=offs_p, scaling_mode=scaling_mode, rowwise=rowwise, colwise=colwise)
    return q, offs_p, dest.to(torch.int32)


def routing(T, N, E, kind, seed):
    """index (N,) int64 and counts (E,) int64 of one routing kind."""
    g = torch.Generator().manual_seed(seed)
    if kind == "one_expert":
        counts = torch.zeros(E, dtype=torch.int64)
        counts[E // 2] = N
    elif kind == "empty":
        experts = torch.randint(0, 3, (N,), generator=g) * (E // 3)
        counts = torch.bincount(experts, minlength=E)
    else:
        counts = torch.bincount(torch.randint(0, E, (N,), generator=g), minlength=E)
    index = torch.randint(0, T, (N,), generator=g)
    if kind == "duplicates":  # a token routed to the same expert twice
        index[1::2] = index[0::2][: index[1::2].numel()]
    return index, counts


def make_x(T, K, dtype, seed, specials=True):
    x = random_bf16(max(T, 1), K, seed, specials=specials)[:T]
    if specials and T > 2:
        x[1, ::7] = float("nan")
        x[2, ::5] = float("-inf")
    return x.to(dtype)


def make_scale(N, seed, specials=True):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(N, generator=g) * 4 - 2
    if specials:
        pool = torch.tensor([0.0, -0.0, -1.5, 1.0, float("nan"), float("inf"), 1e30, 1e-30, -3e-8])
        s[::5] = pool[torch.arange(0, N, 5) // 5 % pool.numel()]
    return s


def assert_same(got, want_q, want_offs_p, want_dest):
    assert_outputs_equal(got, (*want_q, want_offs_p.to(got.offs_p.device), want_dest.to(got.dest.device)), ROUTED_NAMES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("kind", ["random", "empty", "one_expert", "duplicates"])
@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
def test_equals_composition(device, dtype, mode, kind, scaled):
    T, K, N, E = 70, 160, 211, 6
    seed = stable_seed(dtype, mode, kind, scaled)
    x = make_x(T, K, dtype, seed).to(device)
    index, counts = routing(T, N, E, kind, seed)
    scale = make_scale(N, seed).to(device) if scaled else None
    for index_dtype in (torch.int32, torch.int64):
        idx, cnt = index.to(index_dtype).to(device), counts.to(index_dtype).to(device)
        got = mxq.quantize_routed(x, idx, cnt, scale=scale, scaling_mode=mode)
        want_q, offs_p, dest = composed(x, idx, cnt, scale, mode)
        assert_same(got, want_q, offs_p, dest)
    for rowwise, colwise in ((True, False), (False, True)):
        got = mxq.quantize_routed(x, idx, cnt, scale=scale, scaling_mode=mode, rowwise=rowwise, colwise=colwise)
        want_q, offs_p, dest = composed(x, idx, cnt, scale, mode, rowwise, colwise)
        assert_same(got, want_q, offs_p, dest)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "T,K,N,E", [(512, 256, 4096, 256), (5, 32, 0, 3), (64, 96, 31, 1), (1, 64, 64, 64)], ids=lambda v: str(v)
)
def test_shapes(device, T, K, N, E):
    seed = stable_seed(T, K, N, E)
    x = make_x(T, K, torch.bfloat16, seed).to(device)
    index, counts = routing(T, N, E, "random", seed)
    scale = make_scale(N, seed).to(device)
    got = mxq.quantize_routed(x, index.to(device), counts.to(device), scale=scale)
    assert got.q_row.shape == ((N + 31 * E + 31) // 32 * 32, K)
    assert_same(got, *composed(x, index.to(device), counts.to(device), scale))


@requires_cuda
@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
def test_cuda_equals_cpu(scaled):
    T, K, N, E = 300, 416, 1500, 33
    seed = stable_seed(T, scaled)
    x = make_x(T, K, torch.bfloat16, seed)
    index, counts = routing(T, N, E, "empty", seed)
    scale = make_scale(N, seed) if scaled else None
    cpu = mxq.quantize_routed(x, index, counts, scale=scale)
    gpu = mxq.quantize_routed(x.cuda(), index.cuda(), counts.cuda(), scale=None if scale is None else scale.cuda())
    for name, c, g in zip(mxq.RoutedMXTensors._fields, cpu, gpu):
        assert_bytes_equal(g.cpu(), c, name)


# ---- torch integration ----


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    T, K, N, E = 40, 64, 90, 4
    x = make_x(T, K, torch.bfloat16, 1, specials=False).to(device)
    index, counts = routing(T, N, E, "random", 1)
    scale = make_scale(N, 1, specials=False).to(device)
    for args in (
        (x, index.to(device), counts.to(device), scale, "rceil", True, True),
        (x, index.int().to(device), counts.int().to(device), None, "floor", True, False),
    ):
        torch.library.opcheck(torch.ops.mxq.quantize_routed.default, args)


def test_meta_shapes():
    T, K, N, E = 33, 96, 100, 5
    x = torch.empty(T, K, dtype=torch.bfloat16, device="meta")
    index = torch.empty(N, dtype=torch.int64, device="meta")
    counts = torch.empty(E, dtype=torch.int32, device="meta")
    out = mxq.quantize_routed(x, index, counts)
    Mp = (N + 31 * E + 31) // 32 * 32
    assert out.q_row.shape == (Mp, K)
    assert out.q_col.shape == (Mp, K) and out.q_col.stride() == (1, Mp)
    assert out.s_row.shape == ((Mp + 127) // 128 * 128 + 128 * E, (K // 32 + 3) // 4 * 4)
    assert out.s_col.shape == ((K + 127) // 128 * 128, Mp // 32 + 4 * E)
    assert out.offs_p.shape == (E,) and out.offs_p.dtype == torch.int32
    assert out.dest.shape == (N,) and out.dest.dtype == torch.int32
    cpu = mxq.quantize_routed(
        torch.zeros(T, K, dtype=torch.bfloat16), torch.zeros(N, dtype=torch.int64), torch.tensor([N, 0, 0, 0, 0])
    )
    for m, c in zip(out, cpu):
        assert m.shape == c.shape and m.stride() == c.stride() and m.dtype == c.dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()

    def step(x, index, counts, scale):
        out = mxq.quantize_routed(x * 2, index, counts, scale=scale)
        return out.q_row, out.s_row, out.q_col, out.s_col, out.offs_p, out.dest

    compiled = torch.compile(
        step, fullgraph=True, dynamic=dynamic, backend="aot_eager" if device == "cpu" else "inductor"
    )
    for T, N in ((40, 100), (72, 180)):
        x = make_x(T, 64, torch.bfloat16, T, specials=False).to(device)
        index, counts = routing(T, N, 4, "random", N)
        scale = make_scale(N, N, specials=False).to(device)
        args = (x, index.to(device), counts.to(device), scale)
        for name, g, w in zip(mxq.RoutedMXTensors._fields, compiled(*args), step(*args)):
            assert g.shape == w.shape and g.stride() == w.stride(), name
            assert_bytes_equal(g, w, name)


@requires_cuda
def test_cuda_graph():
    T, K, N, E = 128, 256, 700, 8
    x = make_x(T, K, torch.bfloat16, 3).cuda()
    index, counts = (t.cuda() for t in routing(T, N, E, "random", 3))
    scale = make_scale(N, 3).cuda()
    want = mxq.quantize_routed(x, index, counts, scale=scale)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        mxq.quantize_routed(x, index, counts, scale=scale)  # warm up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mxq.quantize_routed(x, index, counts, scale=scale)
    for t in out:
        t.fill_(0) if t.dtype == torch.int32 else t.view(torch.uint8).fill_(0xA5)
    graph.replay()
    torch.cuda.synchronize()
    for name, g, w in zip(mxq.RoutedMXTensors._fields, out, want):
        assert_bytes_equal(g, w, name)


# ---- errors ----

OP = "mxq.quantize_routed"


def _args(device="cpu"):
    x = make_x(10, 64, torch.bfloat16, 0, specials=False).to(device)
    index, counts = routing(10, 40, 3, "random", 0)
    return x, index.to(device), counts.to(device)


@pytest.mark.parametrize(
    "change,exc,match",
    [
        (lambda x, i, c: (x.double(), i, c, {}), TypeError, "x must be torch.bfloat16, torch.float16 or torch.float32"),
        (lambda x, i, c: (x[:, :48].contiguous(), i, c, {}), ValueError, "K must be a multiple of 32, got 48"),
        (lambda x, i, c: (x[0], i, c, {}), ValueError, r"x must be 2-D \(T, K\)"),
        (lambda x, i, c: (x, i.float(), c, {}), TypeError, "index must be torch.int32 or torch.int64"),
        (lambda x, i, c: (x, i.view(2, -1), c, {}), ValueError, "index must be 1-D"),
        (lambda x, i, c: (x, i, c.short(), {}), TypeError, "counts must be torch.int32 or torch.int64"),
        (lambda x, i, c: (x, i, c[:0], {}), ValueError, "counts must hold 1 to 1024 experts, got E=0"),
        (
            lambda x, i, c: (x, i, c, {"scale": torch.ones(40, dtype=torch.float64)}),
            TypeError,
            "scale must be torch.float32",
        ),
        (lambda x, i, c: (x, i, c, {"scale": torch.ones(39)}), ValueError, "scale must have one entry per routed row"),
        (lambda x, i, c: (x, i, c, {"scaling_mode": "round"}), ValueError, 'scaling_mode must be "rceil" or "floor"'),
        (lambda x, i, c: (x, i, c, {"rowwise": False, "colwise": False}), ValueError, "at least one of rowwise"),
        (lambda x, i, c: (x, i, c, {"rowwise": 1}), TypeError, "rowwise must be a bool"),
        (lambda x, i, c: (x, i.clone().fill_(10), c, {}), ValueError, r"index\[0\]=10 is outside \[0, T\) for T=10"),
        (lambda x, i, c: (x, i, c + 1, {}), ValueError, "counts must sum to N=40"),
        (lambda x, i, c: (x, i, torch.cat([c[:1] - 100, c[1:]]), {}), ValueError, r"counts\[0\]=-\d+ is negative"),
        # A later negative entry whose predecessor overshoots N is still named as negative (it was "got more by").
        (
            lambda x, i, c: (x, i, torch.cat([c[:-1] + 100, c[-1:] * 0 - 1]), {}),
            ValueError,
            r"counts\[\d+\]=-1 is negative",
        ),
    ],
)
def test_errors(change, exc, match):
    x, index, counts, kwargs = change(*_args())
    with pytest.raises(exc, match=f"^{OP}: {match}"):
        mxq.quantize_routed(x, index, counts, **kwargs)


@requires_cuda
def test_cuda_device_errors():
    x, index, counts = _args("cuda")
    with pytest.raises(ValueError, match=f"^{OP}: index must be on x's device"):
        mxq.quantize_routed(x, index.cpu(), counts)
    with pytest.raises(ValueError, match=f"^{OP}: counts must be on x's device"):
        mxq.quantize_routed(x, index, counts.cpu())
    # On the device, bad routing raises nothing and writes nothing outside the outputs: a bad index is a zero row.
    bad = index.clone()
    bad[3] = 10
    out = mxq.quantize_routed(x, bad, counts)
    fixed = torch.cat([x, torch.zeros_like(x[:1])])
    want = mxq.quantize_routed(fixed, bad, counts)
    for name, g, w in zip(mxq.RoutedMXTensors._fields, out, want):
        assert_bytes_equal(g, w, name)
