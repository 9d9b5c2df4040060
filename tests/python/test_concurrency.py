"""Concurrency (issue "Reliability", item 4): mxq ops issued from two Python threads at once, each on its own CUDA
stream; CUDA-graph replays interleaved with eager calls; torch.compile with dynamic shapes. Every result is compared
byte for byte with plain serial eager calls of the same ops on the same data. The thread and compile tests also run
on the CPU dispatch (the C++ reference), which proves their logic everywhere; the CUDA halves and the graph test are
skipped visibly without a CUDA device. (Single-stream capture/replay and compile over the op set are in test_cuda.py
and test_torch_integration.py.)"""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import mxq
import torch
import torch_reference as T
from helpers import DEVICES, assert_outputs_equal, make_offs, random_bf16, requires_cuda, stable_seed
from torch._dynamo.testing import CompileCounterWithBackend

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
MODES = ["rceil", "floor"]
INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _input(M: int, K: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """An (M, K) CPU tensor of ``dtype`` whose 32-element blocks span many magnitudes (with specials for bf16/fp32;
    fp16 blocks stay within its exponent range so that they do not all saturate or flush)."""
    if dtype != torch.float16:
        return random_bf16(M, K, seed=seed, specials=True).to(dtype)
    g = torch.Generator().manual_seed(seed)
    exps = torch.randint(-14, 14, (M, K // 32), generator=g).float().repeat_interleave(32, dim=1)
    return (torch.randn(M, K, generator=g) * torch.exp2(exps)).half()


def _tensors(out) -> tuple[torch.Tensor, ...]:
    """An op's outputs as a flat tuple: a single tensor, or an MXTensors without the axes not requested."""
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(t for t in out if t is not None)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of ``t`` as a same-size integer view (any strides), for a comparison that never syncs."""
    return t.view(INT_OF_SIZE[t.element_size()])


def _names(outs) -> list[str]:
    return [f"out{i}" for i in range(len(outs))]


@contextlib.contextmanager
def _own_stream(device: str):
    """A fresh CUDA stream, current for the block, on "cuda" (yields it); nothing on "cpu" (yields None)."""
    if device != "cuda":
        yield None
        return
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        yield stream


# ---- two threads, each on its own stream ----


def _workload(device: str, M: int, K: int, seed: int) -> list[tuple[str, object]]:
    """(label, call) pairs covering the API: dense and grouped quantize (fused and composed), the single-axis
    variants, RCEIL and FLOOR, bf16/fp16/fp32 inputs, dequantize of every layout, quantize_weight (2-D and 3-D,
    32x32 and 1x32, one or both axes). Inputs are derived from ``seed`` and built without an mxq op (the dequantize
    inputs come from the pure-torch reference), so that the concurrent calls can be the process's first."""
    calls = []
    for dtype in DTYPES:
        x = _input(M, K, dtype, stable_seed("x", seed, str(dtype))).to(device)
        offs = make_offs(M, 4, seed=stable_seed("offs", seed, str(dtype)), align=32).to(device)
        for mode in MODES:
            tag = f"{dtype}/{mode}"
            calls += [
                (f"{tag}/quantize", partial(mxq.quantize, x, scaling_mode=mode)),
                (f"{tag}/quantize grouped", partial(mxq.quantize, x, scaling_mode=mode, offs=offs)),
                (
                    f"{tag}/composed grouped",
                    partial(mxq.quantize, x, scaling_mode=mode, offs=offs, backend="composed"),
                ),
                (
                    f"{tag}/rowwise",
                    partial(mxq.quantize, x, colwise=False, scaling_mode=mode, offs=offs if mode == "floor" else None),
                ),
                (
                    f"{tag}/colwise",
                    partial(mxq.quantize, x, rowwise=False, scaling_mode=mode, offs=offs if mode == "rceil" else None),
                ),
            ]
        w = _input(3 * 64, K, dtype, stable_seed("w", seed, str(dtype))).view(3, 64, K).to(device)
        calls += [
            (f"{dtype}/weight 3-D 32x32", partial(mxq.quantize_weight, w)),
            (
                f"{dtype}/weight 2-D 1x32 floor",
                partial(mxq.quantize_weight, w[1], scaling_mode="floor", weight_scaling="1x32"),
            ),
            (f"{dtype}/weight 3-D 1x32 rowwise", partial(mxq.quantize_weight, w, weight_scaling="1x32", colwise=False)),
            (f"{dtype}/weight 3-D 32x32 colwise", partial(mxq.quantize_weight, w, rowwise=False)),
        ]
    x = _input(M, K, torch.bfloat16, stable_seed("deq", seed))
    offs = make_offs(M, 4, seed=stable_seed("deq offs", seed), align=32)
    dense = [t.to(device) for t in T.quantize(x, "rceil")]
    grouped = [t.to(device) for t in T.quantize(x, "floor", offs)]
    offs = offs.to(device)
    assert dense[2].t().is_contiguous() and grouped[2].t().is_contiguous()
    calls += [
        ("dequantize rowwise", partial(mxq.dequantize_rowwise, dense[0], dense[1])),
        ("dequantize colwise", partial(mxq.dequantize_colwise, dense[2], dense[3])),
        ("dequantize m_groups", partial(mxq.dequantize, grouped[0], grouped[1], offs, layout="m_groups")),
        ("dequantize k_groups", partial(mxq.dequantize, grouped[2].t(), grouped[3], offs, layout="k_groups")),
        ("dequantize_colwise grouped", partial(mxq.dequantize_colwise, grouped[2], grouped[3], offs)),
    ]
    return calls


def _run_repeatedly(device: str, calls, iterations: int, barrier: threading.Barrier):
    """One thread's work: on its own stream, every call ``iterations`` times. Returns the first iteration's outputs
    and, per call, the number of elements of the later iterations whose bits differ from the first's (counted on the
    device, so the loop never waits for the GPU)."""
    with _own_stream(device) as stream:
        barrier.wait()  # both threads start issuing together
        first = [_tensors(call()) for _, call in calls]
        differ = torch.zeros(len(calls), dtype=torch.int64, device=device)
        for _ in range(iterations - 1):
            for j, (label, call) in enumerate(calls):
                got = _tensors(call())
                assert [(g.dtype, g.shape, g.stride()) for g in got] == [
                    (f.dtype, f.shape, f.stride()) for f in first[j]
                ], label
                for g, f in zip(got, first[j]):
                    differ[j] += (_bits(g) != _bits(f)).sum()
    if stream is not None:
        stream.synchronize()
    return first, differ.tolist()


# (M, K) of thread 0's activations (thread 1 adds 256 rows and 128 columns) and the iterations per thread: small on
# the CPU, where the C++ reference is slow.
THREAD_SIZES = {"cpu": ((256, 512), 4), "cuda": ((2048, 1024), 50)}


@pytest.mark.parametrize("device", DEVICES)
def test_two_threads_on_their_own_streams_match_serial(device):
    """Two threads, each with a CUDA stream of its own (on the CPU: plain threads), issue the whole API on different
    inputs and shapes at the same time, many times over; every output of every iteration is byte-identical to a
    serial call of the same op on the default stream afterwards. So lazily initialized state, shared buffers,
    allocator reuse across streams or one thread's stream cannot leak into the other thread's results."""
    (M, K), iterations = THREAD_SIZES[device]
    workloads = [_workload(device, M + 256 * t, K + 128 * t, seed=t) for t in range(2)]
    if device == "cuda":
        torch.cuda.synchronize()  # the inputs were copied on the default stream
    barrier = threading.Barrier(len(workloads), timeout=120)  # a thread that fails early cannot hang the other
    with ThreadPoolExecutor(max_workers=len(workloads)) as pool:
        futures = [pool.submit(_run_repeatedly, device, calls, iterations, barrier) for calls in workloads]
        results = [f.result() for f in futures]  # re-raises a thread's exception here
    for t, (calls, (first, differ)) in enumerate(zip(workloads, results)):
        for (label, call), got, n in zip(calls, first, differ):
            assert n == 0, f"thread {t}/{label}: {n} elements changed between iterations"
            serial = _tensors(call())
            assert_outputs_equal(got, serial, _names(serial), f"thread {t}/{label}/concurrent-vs-serial/")


# ---- CUDA-graph replays interleaved with eager calls ----


def _graph_ops(x, offs, w):
    """The captured ops: grouped quantize, a FLOOR rowwise-only quantize, both grouped dequantizes, quantize_weight."""
    a = mxq.quantize(x, offs=offs)
    r = mxq.quantize(x, colwise=False, scaling_mode="floor")
    d_row = mxq.dequantize_rowwise(a.q_row, a.s_row, offs)
    d_col = mxq.dequantize_colwise(a.q_col, a.s_col, offs)
    return (*a, *_tensors(r), d_row, d_col, *mxq.quantize_weight(w))


def _eager_ops(y, offs, w):
    """Eager calls between replays, on other inputs (another shape, dtype and mode): they allocate outside the
    graph's pool and run the same kernels while the graph's outputs are alive."""
    a = mxq.quantize(y, scaling_mode="floor", offs=offs, backend="composed")
    k = mxq.quantize(y, rowwise=False)
    d = mxq.dequantize(a.q_col.t(), a.s_col, offs, layout="k_groups")
    return (*a, *_tensors(k), d, *_tensors(mxq.quantize_weight(w, weight_scaling="1x32", colwise=False)))


@requires_cuda
def test_cuda_graph_replays_interleaved_with_eager():
    """A graph of mxq ops replayed over fresh data (static x, offs and w refilled before each replay, new group
    boundaries included), with eager mxq calls on other inputs just before and just after each replay: the graph's
    outputs equal eager calls on the same data, byte for byte, and the eager results equal their serial runs."""
    M, K, G = 1024, 512, 4
    rounds = 6

    def graph_data(i):
        return (
            _input(M, K, torch.bfloat16, stable_seed("graph x", i)).cuda(),
            make_offs(M, G, seed=stable_seed("graph offs", i), align=32).cuda(),
            _input(4 * 128, K, torch.bfloat16, stable_seed("graph w", i)).view(4, 128, K).cuda(),
        )

    def eager_data(i):
        dtype = DTYPES[1 + i % 2]  # fp16 and fp32
        return (
            _input(768, 256, dtype, stable_seed("eager y", i)).cuda(),
            make_offs(768, 3, seed=stable_seed("eager offs", i), align=32).cuda(),
            _input(2 * 64, 256, dtype, stable_seed("eager w", i)).view(2, 64, 256).cuda(),
        )

    data = [graph_data(i) for i in range(rounds)]
    other = [(eager_data(2 * i), eager_data(2 * i + 1)) for i in range(rounds)]
    expected = [_graph_ops(*d) for d in data]
    expected_other = [(_eager_ops(*a), _eager_ops(*b)) for a, b in other]

    static = list(graph_data(rounds))  # neither of the rounds' data: each replay must refill
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before capture, as torch recommends
        _graph_ops(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _graph_ops(*static)

    replayed, eager = [], []
    for i in range(rounds):
        for s, d in zip(static, data[i]):
            s.copy_(d)
        before = _eager_ops(*other[i][0])
        graph.replay()
        after = _eager_ops(*other[i][1])
        replayed.append([t.clone() for t in outs])  # taken after the eager calls: they must not touch the outputs
        eager.append((before, after))
    torch.cuda.synchronize()

    for i in range(rounds):
        assert_outputs_equal(replayed[i], expected[i], _names(outs), f"round {i}/replay-vs-eager/")
        for when, got, want in zip(("before", "after"), eager[i], expected_other[i]):
            assert_outputs_equal(got, want, _names(want), f"round {i}/eager {when} replay/")


# ---- torch.compile with dynamic shapes ----


def _compiled_ops(x, offs, w):
    a = mxq.quantize(x, offs=offs)
    r = mxq.quantize(x, colwise=False, scaling_mode="floor")
    k = mxq.quantize(x, rowwise=False, offs=offs)
    c = mxq.quantize(x, offs=offs, backend="composed")
    return (
        *a,
        *_tensors(r),
        *_tensors(k),
        *c,
        mxq.dequantize_rowwise(a.q_row, a.s_row, offs),
        mxq.dequantize_colwise(a.q_col, a.s_col, offs),
        mxq.dequantize(r.q_row, r.s_row),
        *mxq.quantize_weight(w),
        *_tensors(mxq.quantize_weight(w, weight_scaling="1x32", rowwise=False)),
    )


# (M, K, G, E): M and K multiples of 32, mostly not of 128 (the scale layouts' padding varies with them); the number
# of token groups G and of weight experts E change too. The first shape's sizes are all distinct, so that duck sizing
# ties no two of them together (equal sizes would get one symbol and a recompilation once they differ).
DYNAMIC_SHAPES = [(128, 256, 2, 3), (96, 160, 3, 2), (320, 64, 4, 4), (256, 512, 8, 2)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compile_dynamic_shapes(dtype, device):
    """torch.compile(dynamic=True, fullgraph=True) over the API compiles once and serves every (M, K, G, E) of
    DYNAMIC_SHAPES (no recompilation: the Meta impls keep the sizes symbolic and guard on none of them), with
    outputs byte-identical to eager ones, strides included."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(_compiled_ops, dynamic=True, fullgraph=True, backend=counter)
    for M, K, G, E in DYNAMIC_SHAPES:
        seed = stable_seed(M, K, G, E, str(dtype))
        x = _input(M, K, dtype, seed).to(device)
        offs = make_offs(M, G, seed=seed, align=32).to(device)
        w = _input(E * K, M, dtype, seed + 1).view(E, K, M).to(device)  # E experts of (N, K) = (K, M)
        want = _compiled_ops(x, offs, w)
        got = compiled(x, offs, w)
        assert_outputs_equal(got, want, _names(want), f"{M}x{K} G={G} E={E}/compiled-vs-eager/")
    assert counter.frame_count == 1, f"{counter.frame_count} compilations for {len(DYNAMIC_SHAPES)} shapes"
    torch._dynamo.reset()
