"""mxq as torch ops: opcheck, Meta/fake shapes and strides, torch.compile(fullgraph=True). Runs on the CPU dispatch
everywhere and on CUDA where a device is present (skipped visibly otherwise)."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import re

import mxq
import torch
from helpers import DEVICES, OUTPUT_NAMES, QUANT_OPS, assert_outputs_equal, make_offs, op, random_bf16
from torch._subclasses.fake_tensor import FakeTensorMode

# test_schema compares inputs before/after with torch.allclose, which has no float8 kernels; dequantize's inputs
# are float8, so its schema check is replaced by test_dequantize_does_not_mutate_inputs below.
DEQUANT_OPCHECK_TESTS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _inputs(device, M=256, K=384, G=None, seed=0, specials=False):
    # opcheck compares outputs with assert_close, where NaN != NaN: its inputs carry no NaN/Inf (the byte-exact
    # tests cover those).
    x = random_bf16(M, K, seed=seed, specials=specials).to(device)
    offs = None if G is None else make_offs(M, G, seed=seed).to(device)
    return x, offs


# ---- opcheck ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("G", [None, 1, 4], ids=lambda g: "dense" if g is None else f"G={g}")
@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("name", QUANT_OPS)
def test_opcheck_quantize(name, mode, G, device):
    x, offs = _inputs(device, G=G)
    torch.library.opcheck(op(name).default, (x, 32, mode, offs))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_quantize_defaults_and_kwargs(device):
    x, offs = _inputs(device, G=4)
    for name in QUANT_OPS:
        torch.library.opcheck(op(name).default, (x,))
        torch.library.opcheck(op(name).default, (x,), {"scaling_mode": "floor", "offs": offs})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grouped", [False, True])
def test_opcheck_dequantize(grouped, device):
    x, offs = _inputs(device, G=4 if grouped else None)
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, offs=offs)
    row_args = (q_row, s_row, offs, "m_groups") if grouped else (q_row, s_row)
    col_args = (q_col.t(), s_col, offs, "k_groups") if grouped else (q_col.t(), s_col)
    torch.library.opcheck(torch.ops.mxq.dequantize, row_args, test_utils=DEQUANT_OPCHECK_TESTS)
    torch.library.opcheck(torch.ops.mxq.dequantize, col_args, test_utils=DEQUANT_OPCHECK_TESTS)


@pytest.mark.parametrize("device", DEVICES)
def test_dequantize_does_not_mutate_inputs(device):
    x, offs = _inputs(device, G=4)
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, offs=offs)
    before = [t.view(torch.uint8).clone() for t in (q_row, s_row, q_col, s_col)]
    mxq.dequantize(q_row, s_row, offs, layout="m_groups")
    mxq.dequantize(q_col.t(), s_col, offs, layout="k_groups")
    for b, t in zip(before, (q_row, s_row, q_col, s_col)):
        assert torch.equal(b, t.view(torch.uint8))


def test_ops_carry_tags():
    for name in QUANT_OPS + ["dequantize"]:
        tags = op(name).default.tags
        assert torch.Tag.needs_fixed_stride_order in tags, name
        assert torch.Tag.pt2_compliant_tag in tags, name


def test_schema_argument_order():
    for name in QUANT_OPS:
        args = op(name).default._schema.arguments
        assert [a.name for a in args] == ["x", "block_size", "scaling_mode", "offs", "format"], name
        assert [str(a.default_value) for a in args[1:]] == ["32", "rceil", "None", "mxfp8"], name
    # Every op names its block format last, MXFP8 by default: calls written before FP8 blockwise keep their meaning.
    for name in ("dequantize", "quantize_weight", "quantize_routed"):
        last = op(name).default._schema.arguments[-1]
        assert (last.name, str(last.default_value)) == ("format", "mxfp8"), name


# ---- Meta and fake tensors: exact shapes, dtypes and strides ----

SHAPES = [(128, 128), (256, 384), (384, 96), (0, 128), (128, 0), (32, 32)]


def _meta_case(x, offs):
    return x.to("meta"), None if offs is None else offs.to("meta")


@pytest.mark.parametrize("G", [None, 1, 8], ids=lambda g: "dense" if g is None else f"G={g}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", QUANT_OPS)
def test_meta_matches_real(name, shape, G):
    M, K = shape
    x = random_bf16(M, K, seed=1)
    if G is None:
        offs = None
    elif M % 128 == 0 and M > 0:
        offs = make_offs(M, G, seed=2)
    else:
        offs = torch.zeros(G, dtype=torch.int32)  # every group empty, all rows in the tail
    real = op(name)(x, 32, "rceil", offs)
    mx, moffs = _meta_case(x, offs)
    meta = op(name)(mx, 32, "rceil", moffs)
    for r, m, n in zip(real, meta, OUTPUT_NAMES[name]):
        assert m.device.type == "meta"
        assert (m.dtype, m.shape, m.stride()) == (r.dtype, r.shape, r.stride()), n
    if "q_col" in OUTPUT_NAMES[name]:
        q_col = real[OUTPUT_NAMES[name].index("q_col")]
        assert q_col.stride() == (1, M) and q_col.t().is_contiguous()


@pytest.mark.parametrize("device", DEVICES)
def test_fake_tensor_matches_real(device):
    x, offs = _inputs(device, M=512, K=256, G=4)
    with FakeTensorMode() as mode:
        fx, foffs = mode.from_tensor(x), mode.from_tensor(offs)
        fake = {n: op(n)(fx, 32, "rceil", foffs) for n in QUANT_OPS}
        fq = fake["quantize"]
        fdeq = (
            torch.ops.mxq.dequantize(fq[0], fq[1], foffs, "m_groups"),
            torch.ops.mxq.dequantize(fq[2].t(), fq[3], foffs, "k_groups"),
        )
    for n in QUANT_OPS:
        real = op(n)(x, 32, "rceil", offs)
        for r, f in zip(real, fake[n]):
            assert (f.dtype, f.shape, f.stride(), f.device) == (r.dtype, r.shape, r.stride(), r.device), n
    q = torch.ops.mxq.quantize(x, offs=offs)
    rdeq = (
        torch.ops.mxq.dequantize(q[0], q[1], offs, "m_groups"),
        torch.ops.mxq.dequantize(q[2].t(), q[3], offs, "k_groups"),
    )
    for r, f in zip(rdeq, fdeq):
        assert (f.dtype, f.shape, f.stride()) == (r.dtype, r.shape, r.stride())


def test_meta_dequantize_shape():
    q = torch.empty(256, 512, dtype=torch.float8_e4m3fn, device="meta")
    s = torch.empty(256, 16, dtype=torch.float8_e8m0fnu, device="meta")
    out = torch.ops.mxq.dequantize(q, s)
    assert (out.shape, out.dtype, out.stride()) == ((256, 512), torch.bfloat16, (512, 1))


def test_meta_refuses_what_the_op_refuses():
    """The Meta impls apply the core's size rules where the sizes are known: before, they sized outputs for shapes
    every real call refuses (mxq.empty_quantized of a (64, 100) x returned buffers)."""

    def meta(shape, dtype=torch.bfloat16):
        return torch.empty(shape, dtype=dtype, device="meta")

    ops = torch.ops.mxq
    cases = [
        ("mxq.quantize: K must be a multiple of 32, got 100", lambda: mxq.empty_quantized(torch.empty(64, 100))),
        ("mxq.quantize_rowwise: M must be a multiple of 32, got 48", lambda: ops.quantize_rowwise(meta((48, 64)))),
        (
            "mxq.quantize: offs must hold 1 to 1024 group end offsets, got G=0",
            lambda: ops.quantize(meta((64, 64)), 32, "rceil", meta((0,), torch.int32)),
        ),
        (
            "mxq.quantize_colwise: offs must hold 1 to 1024 group end offsets, got G=2000",
            lambda: ops.quantize_colwise(meta((64, 64)), 32, "rceil", meta((2000,), torch.int32)),
        ),
        ("mxq.quantize_weight: N must be a multiple of 32, got 48", lambda: ops.quantize_weight(meta((48, 64)))),
        ("mxq.quantize_weight: G must be at least 1, got 0", lambda: ops.quantize_weight(meta((0, 64, 64)))),
        (
            "mxq.dequantize: cols must be a multiple of 32, got 100",
            lambda: ops.dequantize(meta((64, 100), torch.float8_e4m3fn), meta((128, 4), torch.float8_e8m0fnu)),
        ),
    ]
    for text, call in cases:
        with pytest.raises(ValueError, match="^" + re.escape(text) + "$"):
            call()


# ---- torch.compile(fullgraph=True) ----


def _pipeline(x, offs):
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, 32, "rceil", offs)
    c = torch.ops.mxq.quantize_composed(x, 32, "floor", offs)
    r = mxq.quantize(x, colwise=False)
    k = mxq.quantize(x, rowwise=False, offs=offs)
    deq_row = mxq.dequantize_rowwise(q_row, s_row, offs) * 2  # something for inductor to fuse around the op
    deq_col = mxq.dequantize_colwise(q_col, s_col, offs)
    return (q_row, s_row, q_col, s_col, *c, r.q_row, r.s_row, k.q_col, k.s_col, deq_row, deq_col)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(_pipeline, fullgraph=True, dynamic=dynamic)
    for M, K, seed in ((256, 384, 0), (512, 256, 1)):
        x = random_bf16(M, K, seed=seed, specials=True).to(device)
        offs = make_offs(M, 4, seed=seed).to(device)
        eager = _pipeline(x, offs)
        got = compiled(x, offs)
        names = [f"out{i}" for i in range(len(eager))]
        assert_outputs_equal(got, eager, names, f"{M}x{K}/")
        assert got[2].stride() == (1, M)
