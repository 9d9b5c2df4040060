"""The CUDA impls against the CPU reference and the pure-torch reference, raw bytes (docs/numerics.md §7-§8), plus the
properties a torch user relies on: CUDA-graph capture, the current stream, every output byte written, no host sync.
Skipped visibly without a CUDA device."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import ctypes

import mxq
import torch
import torch_reference as T
from helpers import (
    OUTPUT_NAMES,
    QUANT_OPS,
    assert_bf16_equal_nan_canonical,
    assert_outputs_equal,
    make_offs,
    op,
    random_bf16,
    reference_outputs,
    requires_cuda,
    spec4_matrix,
    stable_seed,
)

pytestmark = requires_cuda

MODES = ["rceil", "floor"]
DUAL = ("q_row", "s_row", "q_col", "s_col")


def _check_three_ways(name, x, mode, offs, label=""):
    """op(x.cuda()) == op(x.cpu()) == tests/python/torch_reference.py, raw bytes, dtypes, shapes and strides."""
    names = OUTPUT_NAMES[name]
    ref = reference_outputs(name, x, mode, offs)
    cpu = op(name)(x, 32, mode, offs)
    assert_outputs_equal(cpu, ref, names, f"{label}{name}/cpu-vs-pure-torch/")
    gpu = op(name)(x.cuda(), 32, mode, None if offs is None else offs.cuda())
    assert all(t.is_cuda for t in gpu)
    assert_outputs_equal(gpu, cpu, names, f"{label}{name}/cuda-vs-cpu/")


# ---- byte-exact agreement ----

SHAPES = [(128, 128), (256, 512), (512, 384), (384, 1024), (2048, 1024)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("specials", [False, True], ids=["random", "specials"])
@pytest.mark.parametrize("name", QUANT_OPS)
def test_dense_matches_references(name, specials, mode, shape):
    x = random_bf16(*shape, seed=stable_seed(shape, mode, specials, name), specials=specials)
    _check_three_ways(name, x, mode, None)


@pytest.mark.parametrize("shape", [(1024, 256), (2048, 384)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("G", [1, 4, 8])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", QUANT_OPS)
def test_grouped_matches_references(name, mode, G, shape):
    M, K = shape
    x = random_bf16(M, K, seed=G + M, specials=True)
    offs = make_offs(M, G, seed=G + K)
    assert offs[-1] < M, "the offsets must leave an uncovered tail"
    _check_three_ways(name, x, mode, offs, f"G={G} offs={offs.tolist()}/")


@pytest.mark.parametrize("offs", [[1024], [0], [0, 0, 1024], [256, 256, 256, 1024]], ids=str)
def test_grouped_edge_offsets(offs):
    x = random_bf16(1024, 256, seed=5, specials=True)
    for name in QUANT_OPS:
        _check_three_ways(name, x, "rceil", torch.tensor(offs, dtype=torch.int32))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", QUANT_OPS)
def test_spec4_special_blocks(name, mode):
    # The docs/numerics.md §4 blocks along K (rowwise) and, through x.t(), along M (colwise); tests/python/torch_reference.py is checked against
    # the table itself in test_reference.py.
    x, _ = spec4_matrix(128)
    for xx in (x, x.t().contiguous()):
        _check_three_ways(name, xx, mode, None)


@pytest.mark.parametrize("shape", [(0, 256), (256, 0)], ids=str)
@pytest.mark.parametrize("name", QUANT_OPS)
def test_zero_sized(name, shape):
    _check_three_ways(name, torch.empty(shape, dtype=torch.bfloat16), "rceil", None)
    _check_three_ways(name, torch.empty(shape, dtype=torch.bfloat16), "rceil", torch.tensor([0], dtype=torch.int32))


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_fused_equals_composed(mode, grouped):
    M, K = 4096, 2048
    x = random_bf16(M, K, seed=42, specials=True).cuda()
    offs = make_offs(M, 8, seed=3).cuda() if grouped else None
    fused = torch.ops.mxq.quantize(x, 32, mode, offs)
    composed = torch.ops.mxq.quantize_composed(x, 32, mode, offs)
    assert_outputs_equal(fused, composed, DUAL, "fused-vs-composed/")
    row = torch.ops.mxq.quantize_rowwise(x, 32, mode, offs)
    col = torch.ops.mxq.quantize_colwise(x, 32, mode, offs)
    assert_outputs_equal((*row, *col), fused, DUAL, "single-axis-vs-fused/")
    assert_outputs_equal(
        fused, T.quantize(x.cpu(), mode, None if offs is None else offs.cpu()), DUAL, "fused-vs-pure-torch/"
    )


def test_deterministic_across_calls():
    x = random_bf16(1024, 512, seed=9, specials=True).cuda()
    offs = make_offs(1024, 4, seed=9).cuda()
    for name in QUANT_OPS:
        first = op(name)(x, 32, "rceil", offs)
        for _ in range(3):
            assert_outputs_equal(op(name)(x, 32, "rceil", offs), first, OUTPUT_NAMES[name], f"{name}/repeat/")


@pytest.mark.parametrize("grouped", [False, True])
def test_dequantize_matches_references(grouped):
    M, K = 1024, 512
    x = random_bf16(M, K, seed=4, specials=True)
    offs = make_offs(M, 4, seed=4) if grouped else None
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, offs=offs)
    layouts = ("m_groups", "k_groups") if grouped else ("blocked", "blocked")
    o_cuda = None if offs is None else offs.cuda()
    for q, s, layout, n in ((q_row, s_row, layouts[0], "rowwise"), (q_col.t(), s_col, layouts[1], "colwise")):
        gpu = mxq.dequantize(q.cuda(), s.cuda(), o_cuda, layout=layout)
        assert gpu.is_cuda and gpu.dtype == torch.bfloat16 and gpu.shape == q.shape
        # NaN payloads are not part of the contract (the GPU's fp32 NaN is canonical, the CPU keeps a payload).
        assert_bf16_equal_nan_canonical(gpu, mxq.dequantize(q, s, offs, layout=layout), f"{n}/cuda-vs-cpu")
        assert_bf16_equal_nan_canonical(gpu, T.dequantize(q, s, offs, layout), f"{n}/cuda-vs-pure-torch")


# ---- every byte written (docs/numerics.md §7): outputs land in poisoned cache blocks ----


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("name", QUANT_OPS)
def test_every_output_byte_written(name, grouped):
    M, K = 1024, 640
    x = random_bf16(M, K, seed=6, specials=True)
    offs = make_offs(M, 4, seed=6) if grouped else None
    expected = op(name)(x, 32, "rceil", offs)
    xg, og = x.cuda(), None if offs is None else offs.cuda()
    torch.cuda.synchronize()
    # Hand the caching allocator blocks of exactly the outputs' sizes, filled with 0xA5, so that at::empty in the
    # op gets them back: an unwritten byte (padding, slack, tail) then shows up as 0xA5 instead of a fresh 0.
    sizes = [t.numel() for t in expected] + [M * K // 32]  # + the composed path's workspace
    poison = [torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda") for n in sizes if n]
    ptrs = {p.data_ptr() for p in poison}
    del poison
    out = op(name)(xg, 32, "rceil", og)
    assert ptrs & {t.data_ptr() for t in out}, "no output reused a poisoned block; the check would be vacuous"
    assert_outputs_equal(out, expected, OUTPUT_NAMES[name], f"{name}/poisoned/")


# ---- no host synchronization, the current stream, CUDA graphs ----


def _all_ops(x, offs):
    q = torch.ops.mxq.quantize(x, 32, "rceil", offs)
    c = torch.ops.mxq.quantize_composed(x, 32, "rceil", offs)
    r = torch.ops.mxq.quantize_rowwise(x, 32, "rceil", offs)
    k = torch.ops.mxq.quantize_colwise(x, 32, "rceil", offs)
    grouped = offs is not None
    d_row = torch.ops.mxq.dequantize(q[0], q[1], offs, "m_groups" if grouped else "blocked")
    d_col = torch.ops.mxq.dequantize(q[2].t(), q[3], offs, "k_groups" if grouped else "blocked")
    return q, c, r, k, d_row, d_col


def _check_all_ops(results, x_cpu, offs_cpu, label):
    q, c, r, k, d_row, d_col = results
    ref = T.quantize(x_cpu, "rceil", offs_cpu)
    assert_outputs_equal(q, ref, DUAL, f"{label}/fused/")
    assert_outputs_equal(c, ref, DUAL, f"{label}/composed/")
    assert_outputs_equal(r, ref[:2], DUAL[:2], f"{label}/1x32/")
    assert_outputs_equal(k, ref[2:], DUAL[2:], f"{label}/32x1/")
    row_layout, col_layout = ("m_groups", "k_groups") if offs_cpu is not None else ("blocked", "blocked")
    assert_bf16_equal_nan_canonical(
        d_row, T.dequantize(ref[0], ref[1], offs_cpu, row_layout), f"{label}/dequantize rowwise"
    )
    assert_bf16_equal_nan_canonical(
        d_col, T.dequantize(ref[2].t(), ref[3], offs_cpu, col_layout), f"{label}/dequantize colwise"
    )


def test_no_host_synchronization():
    x = random_bf16(1024, 512, seed=1).cuda()
    offs = make_offs(1024, 4, seed=1).cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _all_ops(x, offs)
        mxq.quantize(x, offs=offs, backend="fused")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_runs_on_the_current_stream():
    M, K = 2048, 1024
    new = random_bf16(M, K, seed=12, specials=True)
    offs_cpu = make_offs(M, 4, seed=12)
    x = torch.zeros(M, K, dtype=torch.bfloat16, device="cuda")
    offs = offs_cpu.cuda()
    new_gpu = new.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # keep the side stream busy, so that only stream order protects x
        x.copy_(new_gpu)  # on the side stream, after the sleep
        results = _all_ops(x, offs)  # must read x after the copy: same stream
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    _check_all_ops(results, new, offs_cpu, "side-stream")


def _cudart():
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcudart.so" in line:
                return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")


def _kernel_nodes(graph: torch.cuda.CUDAGraph) -> int:
    """Number of kernel nodes in a graph captured with keep_graph=True (cudaGraphNodeTypeKernel == 0)."""
    lib = _cudart()
    raw = ctypes.c_void_p(graph.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert lib.cudaGraphGetNodes(raw, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert lib.cudaGraphGetNodes(raw, nodes, ctypes.byref(n)) == 0
    kinds = []
    for node in nodes[: n.value]:
        kind = ctypes.c_int(-1)
        assert lib.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)) == 0
        kinds.append(kind.value)
    return sum(k == 0 for k in kinds)


def test_cuda_graph_capture_and_replay():
    M, K = 1024, 512
    offs_cpu = make_offs(M, 4, seed=2)
    offs = offs_cpu.cuda()
    x = random_bf16(M, K, seed=0).cuda()
    # Warm up on a side stream before capture, as torch recommends.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _all_ops(x, offs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        results = _all_ops(x, offs)
    # Six ops, each at least one kernel: a kernel launched outside the capture stream would leave this short
    # (and would have run once, now, instead of on every replay).
    assert _kernel_nodes(graph) >= 6, "the captured graph is missing kernels"
    for seed in (1, 2, 3):
        new = random_bf16(M, K, seed=seed, specials=True)
        x.copy_(new.cuda())
        graph.replay()
        torch.cuda.synchronize()
        _check_all_ops(results, new, offs_cpu, f"replay {seed}")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_device_guard_on_a_second_device():
    x = random_bf16(512, 256, seed=3, specials=True)
    offs = make_offs(512, 4, seed=3)
    with torch.cuda.device(0):
        results = _all_ops(x.to("cuda:1"), offs.to("cuda:1"))
        torch.cuda.synchronize(1)
    assert all(t.device == torch.device("cuda:1") for t in results[0])
    _check_all_ops(results, x, offs, "cuda:1")


def test_quantize_wrapper_backends():
    x = random_bf16(1024, 512, seed=8, specials=True).cuda()
    offs = make_offs(1024, 4, seed=8).cuda()
    a = mxq.quantize(x, offs=offs, backend="composed")
    b = mxq.quantize(x, offs=offs, backend="fused")
    assert_outputs_equal(tuple(a), tuple(b), DUAL, "wrapper/")
    assert_outputs_equal(tuple(b), tuple(mxq.quantize(x.cpu(), offs=offs.cpu())), DUAL, "wrapper vs reference/")
