"""mxq.grouped_mm_fp8_blockwise (docs/numerics.md §13.6): the CPU op (the C++ reference) against a torch-written
emulation — dequantize each operand with its factors, fp32 matmul per group, bf16 — exactly on inputs whose fp32 sums
are exact in any order, and within a bf16 ulp on the operands mxq's own quantizers produce (forward, dgrad, wgrad);
Meta shapes, opcheck, the error messages. On CUDA (SM90): CUTLASS's kernel against the CPU op within the stated
fp32-accumulation tolerance, G up to 64 with empty groups, and under CUDA-graph capture."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import blockwise_reference as bref
import mxq
from helpers import make_offs, raises, requires_cuda, stable_seed

BLOCK = 128
GROUPINGS = ["m_grouped", "k_grouped"]


# ---- the emulation, from the spec ----


def groups(offs: torch.Tensor) -> list[tuple[int, int]]:
    ends = offs.tolist()
    return list(zip([0] + ends[:-1], ends))


def emulate(grouping, a, a_scale, b, b_scale, offs) -> torch.Tensor:
    """The grouped GEMM on dequantized operands: fp32 matmul per group, rounded to bf16."""
    if grouping == "m_grouped":
        A, B = bref.values(a, a_scale), torch.stack([bref.tile_values(b[g], b_scale[g]) for g in range(b.shape[0])])
        out = torch.zeros(A.shape[0], B.shape[1], dtype=torch.bfloat16)
        for g, (s, e) in enumerate(groups(offs)):
            out[s:e] = (A[s:e] @ B[g].T).bfloat16()
        return out
    A, B = bref.values(a, a_scale), bref.values(b, b_scale)  # (N, M), (K, M)
    return torch.stack([(A[:, s:e] @ B[:, s:e].T).bfloat16() for s, e in groups(offs)])


# ---- inputs ----


def exact_operands(grouping: str, M: int, N: int, K: int, G: int, seed: int):
    """e4m3 integers in [-6, 6] and power-of-two factors in [1/4, 4]: every product is a multiple of 2^-4 below 2^10
    and every sum of up to 2^9 of them is exact in fp32, so any summation order gives the same result."""
    gen = torch.Generator().manual_seed(seed)

    def data(*shape):
        return torch.randint(-6, 7, shape, generator=gen).float().to(torch.float8_e4m3fn)

    def factors(*shape):
        return torch.pow(2.0, torch.randint(-2, 3, shape, generator=gen).float())

    def outer_major(rows, cols):  # (rows, cols) with strides (1, rows), as quantize returns factors
        return factors(cols, rows).t()

    offs = make_offs(M, G, seed)
    if grouping == "m_grouped":
        return data(M, K), outer_major(M, K // BLOCK), data(G, N, K), weight_factors(factors, G, N, K), offs
    return data(N, M), outer_major(N, M // BLOCK), data(K, M), outer_major(K, M // BLOCK), offs


def weight_factors(factors, G, N, K):
    """(G, N/128, roundup(K/128, 4)), the padding columns 0 as quantize_weight writes them."""
    s = torch.zeros(G, N // BLOCK, -(-K // BLOCK // 4) * 4)
    s[:, :, : K // BLOCK] = factors(G, N // BLOCK, K // BLOCK)
    return s


def quantized_operands(grouping: str, M: int, N: int, K: int, G: int, seed: int, dgrad: bool = False):
    """The operands as mxq's quantizers produce them (format fp8_blockwise)."""
    gen = torch.Generator().manual_seed(seed)
    offs = make_offs(M, G, seed)
    if grouping == "m_grouped":
        # forward: x (M, K) with W (G, N, K); dgrad: dY (M, N) with W (G, N, K) -> the GEMM's K is W's N.
        w = torch.randn(G, N, K, generator=gen).bfloat16()
        wq = mxq.quantize_weight(w, format="fp8_blockwise")
        if dgrad:
            b, b_scale = wq.q_col.transpose(-2, -1), wq.s_col  # (G, K, N) with the dgrad's tile factors
            width = N
        else:
            b, b_scale, width = wq.q_row, wq.s_row, K
        x = torch.randn(M, width, generator=gen).bfloat16()
        xq = mxq.quantize(x, offs=offs, colwise=False, format="fp8_blockwise")
        return xq.q_row, xq.s_row, b, b_scale, offs
    dy = torch.randn(M, N, generator=gen).bfloat16()
    x = torch.randn(M, K, generator=gen).bfloat16()
    dyq = mxq.quantize(dy, offs=offs, rowwise=False, format="fp8_blockwise")
    xq = mxq.quantize(x, offs=offs, rowwise=False, format="fp8_blockwise")
    return dyq.q_col.t(), dyq.s_col, xq.q_col.t(), xq.s_col, offs


# ---- the CPU op against the emulation ----


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("G", [1, 3, 8])
def test_cpu_equals_emulation_exactly(grouping, G):
    args = exact_operands(grouping, M=1024, N=256, K=384, G=G, seed=stable_seed(grouping, G))
    out = mxq.grouped_mm_fp8_blockwise(*args, grouping=grouping)
    want = emulate(grouping, *args)
    assert out.dtype == torch.bfloat16 and out.shape == want.shape
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("case", ["forward", "dgrad", "wgrad"])
def test_cpu_on_quantizer_outputs(case):
    """The layouts the quantizers write are the ones the op reads: against the emulation within a bf16 ulp (the fp32
    sums of random values differ in their last bits between summation orders)."""
    grouping = "k_grouped" if case == "wgrad" else "m_grouped"
    args = quantized_operands(grouping, M=640, N=256, K=384, G=4, seed=stable_seed(case), dgrad=case == "dgrad")
    out = mxq.grouped_mm_fp8_blockwise(*args, grouping=grouping)
    torch.testing.assert_close(out.float(), emulate(grouping, *args).float(), rtol=2**-7, atol=1e-6)
    if grouping == "m_grouped":
        tail = int(args[4][-1])
        assert torch.count_nonzero(out[tail:]) == 0, "rows past offs[-1] must be zero"


def test_k_grouped_empty_group_is_zero():
    a, a_scale, b, b_scale, _ = exact_operands("k_grouped", M=512, N=128, K=256, G=3, seed=1)
    offs = torch.tensor([256, 256, 512], dtype=torch.int32)
    out = mxq.grouped_mm_fp8_blockwise(a, a_scale, b, b_scale, offs, grouping="k_grouped")
    assert torch.count_nonzero(out[1]) == 0 and torch.count_nonzero(out[0]) > 0 and torch.count_nonzero(out[2]) > 0


# ---- torch integration ----


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_meta_shapes(grouping):
    args = [t.to("meta") for t in exact_operands(grouping, M=512, N=256, K=384, G=4, seed=2)]
    out = torch.ops.mxq.grouped_mm_fp8_blockwise(*args, grouping)
    assert out.device.type == "meta" and out.dtype == torch.bfloat16
    assert tuple(out.shape) == ((512, 256) if grouping == "m_grouped" else (4, 256, 384))


# test_schema compares inputs with torch.allclose, which has no float8 kernels (as for dequantize).
OPCHECK_TESTS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_opcheck(grouping):
    args = exact_operands(grouping, M=512, N=128, K=256, G=3, seed=3)
    torch.library.opcheck(torch.ops.mxq.grouped_mm_fp8_blockwise.default, (*args, grouping), test_utils=OPCHECK_TESTS)


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_compile_fullgraph(grouping):
    args = exact_operands(grouping, M=512, N=128, K=256, G=3, seed=6)
    compiled = torch.compile(lambda *a: mxq.grouped_mm_fp8_blockwise(*a, grouping=grouping), fullgraph=True)
    assert torch.equal(compiled(*args).view(torch.int16), emulate(grouping, *args).view(torch.int16))


# ---- errors ----

OP = "mxq.grouped_mm_fp8_blockwise: "


def _m_args():
    return list(exact_operands("m_grouped", M=512, N=256, K=384, G=3, seed=4))


def test_errors():
    a, a_scale, b, b_scale, offs = _m_args()
    call = mxq.grouped_mm_fp8_blockwise
    with raises(ValueError, OP + 'grouping must be "m_grouped" or "k_grouped", got "n_grouped"'):
        call(a, a_scale, b, b_scale, offs, grouping="n_grouped")
    with raises(TypeError, OP + "grouping must be a str, got int"):
        call(a, a_scale, b, b_scale, offs, grouping=1)
    with raises(TypeError, OP + "a must be torch.float8_e4m3fn, got torch.bfloat16"):
        call(a.bfloat16(), a_scale, b, b_scale, offs)
    with raises(TypeError, OP + "b_scale must be torch.float32, got torch.float64"):
        call(a, a_scale, b, b_scale.double(), offs)
    with raises(TypeError, OP + "offs must be torch.int32, got torch.int64"):
        call(a, a_scale, b, b_scale, offs.long())
    with raises(ValueError, OP + "a_scale must have shape [512, 3] and strides (1, 512)"):
        call(a, a_scale.contiguous(), b, b_scale, offs)
    with raises(ValueError, OP + "b must have one matrix per group (G=2, offs' length)"):
        call(a, a_scale, b, b_scale, offs[:2])
    with raises(ValueError, OP + "b must have K=384 in its last dimension"):
        call(a, a_scale, b[:, :, :256].contiguous(), b_scale, offs)
    with raises(ValueError, OP + "b_scale must be contiguous of shape [3, 2, 4]"):
        call(a, a_scale, b, b_scale[:, :, :3], offs)
    with raises(ValueError, OP + "N must be a multiple of 128, got 200"):
        call(a, a_scale, b[:, :200].contiguous(), b_scale, offs)
    bad = torch.tensor([128, 192, 512], dtype=torch.int32)
    with raises(ValueError, OP + "offs[1]=192 is not a multiple of 128 (group sizes must be)"):
        call(a, a_scale, b, b_scale, bad)
    with raises(ValueError, OP + "the group count (offs' length) must be 1 to 1024, got 0"):
        call(a, a_scale, b[:0], b_scale[:0], offs[:0])


# ---- CUDA (SM90): CUTLASS against the CPU op ----


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_sm90 = pytest.mark.skipif(not _sm90(), reason="needs an SM90 GPU (H100, H200)")


def assert_within_accumulation_tolerance(got: torch.Tensor, want: torch.Tensor, abs_sum: torch.Tensor) -> None:
    """§13.6: |got - want| <= 2^-7 |want| + 2^-10 sum|a*b| (the two bf16 roundings, and fp32 sums in another order)."""
    err = (got.float() - want.float()).abs()
    bound = 2**-7 * want.float().abs() + 2**-10 * abs_sum.float()
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} elements outside the tolerance; worst excess {float((err - bound).max())}"


def _abs_operands(a, a_scale, b, b_scale, offs):
    """The operands with |values| (e4m3 sign bit cleared): the op of them is sum|a*b| per output."""

    def absolute(q):
        return (q.view(torch.uint8) & 0x7F).view(torch.float8_e4m3fn)

    return absolute(a), a_scale.abs(), absolute(b), b_scale.abs(), offs


@requires_sm90
@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("G", [1, 4, 64])
def test_cuda_matches_cpu(grouping, G):
    M = 128 * (G + 8)
    cpu = quantized_operands(grouping, M=M, N=512, K=768, G=G, seed=stable_seed("cuda", grouping, G))
    got = mxq.grouped_mm_fp8_blockwise(*[t.cuda() for t in cpu], grouping=grouping)
    want = mxq.grouped_mm_fp8_blockwise(*cpu, grouping=grouping)
    abs_sum = mxq.grouped_mm_fp8_blockwise(*_abs_operands(*cpu), grouping=grouping)
    assert_within_accumulation_tolerance(got.cpu(), want, abs_sum)


@requires_sm90
def test_cuda_graph_capture():
    cpu = quantized_operands("m_grouped", M=1024, N=256, K=256, G=4, seed=5)
    args = [t.cuda() for t in cpu]
    mxq.grouped_mm_fp8_blockwise(*args)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mxq.grouped_mm_fp8_blockwise(*args)
    out.fill_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    want = mxq.grouped_mm_fp8_blockwise(*cpu)
    assert_within_accumulation_tolerance(out.cpu(), want, mxq.grouped_mm_fp8_blockwise(*_abs_operands(*cpu)))


@requires_cuda
@pytest.mark.skipif(_sm90(), reason="checks the refusal on a GPU that is not SM90")
def test_cuda_refuses_other_architectures():
    args = [t.cuda() for t in _m_args()]
    with raises(RuntimeError, OP + "needs"):
        mxq.grouped_mm_fp8_blockwise(*args)
