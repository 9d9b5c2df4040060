"""quantize into the caller's outputs (``mxq.quantize(x, out=...)``, the op overload ``mxq::quantize.out``): the same
bytes as the allocating op into poisoned buffers, no allocation, every bad output rejected before anything is written,
opcheck, torch.compile and CUDA graphs. Runs on the CPU dispatch everywhere and on CUDA where a device is present."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")


import mxq
import torch
from helpers import DEVICES, assert_outputs_equal, make_offs, raises, random_bf16, requires_cuda, stable_seed

NAMES = mxq.MXTensors._fields
OPCHECK_TESTS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
AXES = {"both": (True, True), "rowwise": (True, False), "colwise": (False, True)}


def _inputs(device, M=256, K=384, G=None, seed=0, specials=True):
    x = random_bf16(M, K, seed=seed, specials=specials).to(device)
    return x, None if G is None else make_offs(M, G, seed=seed).to(device)


def _poison(bufs, byte):
    for t in bufs:
        if t is not None:
            t.view(torch.uint8).fill_(byte)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("G", [None, 1, 4], ids=lambda g: "dense" if g is None else f"G={g}")
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_out_equals_the_allocating_op(mode, G, axes, device):
    rowwise, colwise = AXES[axes]
    x, offs = _inputs(device, G=G, seed=stable_seed(mode, G, axes))
    want = mxq.quantize(x, rowwise=rowwise, colwise=colwise, scaling_mode=mode, offs=offs)
    bufs = mxq.empty_quantized(x, rowwise=rowwise, colwise=colwise, offs=offs)
    for poison in (0xA5, 0x5A):  # every byte written: two poisons, the same result
        _poison(bufs, poison)
        got = mxq.quantize(x, rowwise=rowwise, colwise=colwise, scaling_mode=mode, offs=offs, out=bufs)
        assert got is bufs
        assert_outputs_equal(got, want, NAMES, f"poison {poison:#x}: ")
    # A plain tuple or list of the four serves as well, and comes back as an MXTensors of the same tensors.
    for container in (tuple, list):
        _poison(bufs, 0xA5)
        got = mxq.quantize(x, rowwise=rowwise, colwise=colwise, scaling_mode=mode, offs=offs, out=container(bufs))
        assert type(got) is mxq.MXTensors and all(a is b for a, b in zip(got, bufs))
        assert_outputs_equal(got, want, NAMES, f"{container.__name__}: ")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axes", AXES)
def test_empty_quantized_has_the_op_layouts(axes, device):
    rowwise, colwise = AXES[axes]
    x, offs = _inputs(device, M=512, K=256, G=4)
    for o in (None, offs):
        want = mxq.quantize(x, rowwise=rowwise, colwise=colwise, offs=o)
        got = mxq.empty_quantized(x, rowwise=rowwise, colwise=colwise, offs=o)
        for name, g, w in zip(NAMES, got, want):
            assert (g is None) == (w is None), name
            if g is not None:
                assert (g.dtype, g.shape, g.stride(), g.device) == (w.dtype, w.shape, w.stride(), w.device), name


@requires_cuda
def test_out_allocates_nothing():
    x, offs = _inputs("cuda", M=1024, K=512, G=4)
    bufs = mxq.empty_quantized(x, offs=offs)
    mxq.quantize(x, offs=offs, out=bufs)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    mxq.quantize(x, offs=offs, out=bufs)
    torch.ops.mxq.quantize.out(x, offs=offs, q_row=bufs.q_row, s_row=bufs.s_row)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    mxq.quantize(x, offs=offs)  # the yardstick: the allocating op is counted
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before + 4


# ---- bad outputs: the error, and nothing written ----


@pytest.mark.parametrize("device", DEVICES)
class TestOutArguments:
    def _check(self, device, exc, text, replace=None, **kwargs):
        """Calls quantize with out = fresh poisoned buffers, `replace` substituted, expects the error and finds every
        buffer of the call still poisoned."""
        x, _ = _inputs(device)
        bufs = mxq.empty_quantized(x)
        _poison(bufs, 0xA5)
        out = bufs._replace(**(replace(x, bufs) if replace else {}))
        with raises(exc, text):
            mxq.quantize(x, out=out, **kwargs)
        for name, t in zip(NAMES, out):
            if t is not None and t.numel():
                assert bool((t.view(torch.uint8) == 0xA5).all()), f"{name} was written"

    def test_dtype(self, device):
        self._check(
            device,
            TypeError,
            "mxq.quantize: s_col must be torch.float8_e8m0fnu, got torch.uint8",
            lambda x, b: {"s_col": b.s_col.view(torch.uint8)},
        )
        self._check(
            device,
            TypeError,
            "mxq.quantize: q_row must be torch.float8_e4m3fn, got torch.float8_e5m2",
            lambda x, b: {"q_row": b.q_row.view(torch.float8_e5m2)},
        )

    def test_shape(self, device):
        self._check(
            device,
            ValueError,
            "mxq.quantize: s_col must have shape [384, 8], got [383, 8]",
            lambda x, b: {"s_col": b.s_col[:383]},
        )
        self._check(
            device,
            ValueError,
            "mxq.quantize: q_row must have shape [256, 384], got [256, 384, 1]",
            lambda x, b: {"q_row": b.q_row.unsqueeze(-1)},
        )

    def test_strides(self, device):
        self._check(
            device,
            ValueError,
            "mxq.quantize: q_col must have strides (1, M) (q_col.t() contiguous, as quantize returns it), got [384, 1]",
            lambda x, b: {"q_col": b.q_col.contiguous()},
        )
        self._check(
            device,
            ValueError,
            "mxq.quantize: s_row must be contiguous, got strides [1, 256]",
            lambda x, b: {"s_row": b.s_row.t().contiguous().t()},
        )

    def test_overlap(self, device):
        def shared(x, b):  # s_row inside q_row's storage
            return {"s_row": b.q_row.view(-1)[: b.s_row.numel()].view(torch.float8_e8m0fnu).view(b.s_row.shape)}

        self._check(device, ValueError, "mxq.quantize: s_row must not overlap q_row", shared)

        def over_x(x, b):  # q_row over x's own bytes
            return {"q_row": x.view(-1).view(torch.float8_e4m3fn)[: x.numel()].view(x.shape)}

        x, _ = _inputs(device)
        bufs = mxq.empty_quantized(x)
        before = x.clone()
        with raises(ValueError, "mxq.quantize: q_row must not overlap x"):
            mxq.quantize(x, out=bufs._replace(**over_x(x, bufs)))
        assert torch.equal(x.view(torch.int16), before.view(torch.int16))

    def test_pairs_and_axes(self, device):
        self._check(
            device,
            ValueError,
            "mxq.quantize: out must hold the requested axes' outputs (rowwise=True, colwise=True) and None elsewhere, "
            "got q_row, s_row",
            lambda x, b: {"q_col": None, "s_col": None},
        )
        self._check(
            device,
            ValueError,
            "mxq.quantize: out must hold the requested axes' outputs (rowwise=True, colwise=False) and None elsewhere",
            colwise=False,
        )
        self._check(device, ValueError, 'mxq.quantize: out needs backend="fused", got "composed"', backend="composed")
        x, _ = _inputs(device)
        bufs = mxq.empty_quantized(x)
        with raises(ValueError, "mxq.quantize: out must give q_row and s_row together"):
            torch.ops.mxq.quantize.out(x, q_row=bufs.q_row, q_col=bufs.q_col, s_col=bufs.s_col)
        with raises(ValueError, "mxq.quantize: out must give at least one pair of outputs, got none"):
            torch.ops.mxq.quantize.out(x)

    def test_input_errors_are_the_allocating_ops(self, device):
        x, _ = _inputs(device)
        bufs = mxq.empty_quantized(x)
        with raises(ValueError, "mxq.quantize: scaling_mode must be"):
            mxq.quantize(x, scaling_mode="even", out=bufs)
        with raises(ValueError, "mxq.quantize: x must be contiguous (row-major)"):
            mxq.quantize(x.t(), out=bufs)


@requires_cuda
def test_out_on_another_device():
    x, _ = _inputs("cuda")
    bufs = mxq.empty_quantized(x.cpu())
    with raises(ValueError, "mxq.quantize: q_row must be on x's device (cuda:0), got cpu"):
        mxq.quantize(x, out=bufs)


# ---- torch integration ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("G", [None, 4], ids=["dense", "G=4"])
def test_opcheck(G, device):
    # opcheck compares outputs with assert_close, where NaN != NaN: no specials. Its schema check compares the
    # mutated float8 outputs with torch.allclose, which has no float8 kernels: test_out_equals_the_allocating_op
    # checks what is written, and x and offs are checked unchanged here.
    x, offs = _inputs(device, G=G, specials=False)
    x0, offs0 = x.clone(), None if offs is None else offs.clone()
    for rowwise, colwise in AXES.values():
        bufs = mxq.empty_quantized(x, rowwise=rowwise, colwise=colwise, offs=offs)
        out = {name: t for name, t in zip(NAMES, bufs) if t is not None}
        torch.library.opcheck(torch.ops.mxq.quantize.out, (x, 32, "floor", offs), out, test_utils=OPCHECK_TESTS)
    assert torch.equal(x.view(torch.int16), x0.view(torch.int16))
    assert offs is None or torch.equal(offs, offs0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()

    def step(x, offs, bufs):
        mxq.quantize(x, offs=offs, out=bufs)
        return x * 2  # something for inductor around the call

    # CPU: aot_eager (dynamo and functionalization, no codegen): inductor's CPU backend of torch 2.11 has no
    # float8_e8m0fnu in its code generator (KeyError when it copies into the scales); CUDA: inductor.
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(step, fullgraph=True, dynamic=dynamic, backend=backend)
    for M, K, seed in ((256, 384, 0), (512, 256, 1)):
        x, offs = _inputs(device, M=M, K=K, G=4, seed=seed, specials=False)
        bufs = mxq.empty_quantized(x, offs=offs)
        _poison(bufs, 0xA5)
        compiled(x, offs, bufs)
        assert_outputs_equal(bufs, mxq.quantize(x, offs=offs), NAMES, f"{M}x{K}: ")


def test_compiled_out_checks_dtype_and_device():
    """The traced call (allocating op + copies) checks each output as the eager op does: a wrong dtype is a
    TypeError, an output on another device a ValueError (copy_ would move the bytes there silently)."""
    torch._dynamo.reset()
    x, _ = _inputs("cpu", specials=False)
    compiled = torch.compile(lambda x, bufs: mxq.quantize(x, out=bufs), fullgraph=True, backend="aot_eager")
    bufs = mxq.empty_quantized(x)
    wrong = [
        (
            bufs._replace(q_row=bufs.q_row.view(torch.uint8)),
            TypeError,
            "q_row must be torch.float8_e4m3fn, got torch.uint8",
        ),
        (bufs._replace(s_col=bufs.s_col.to("meta")), ValueError, "s_col must be on x's device (cpu), got meta"),
    ]
    for out, cls, text in wrong:
        with pytest.raises(Exception) as info:
            compiled(x, out)
        # Under fullgraph dynamo reports the traced function's exception inside its own (Unsupported), by repr.
        message = str(info.value)
        assert f"{cls.__name__}(" in message and f"mxq.quantize: {text}" in message, message


@requires_cuda
def test_cuda_graph_capture_and_replay():
    M, K = 1024, 512
    x, offs = _inputs("cuda", M=M, K=K, G=4)
    bufs = mxq.empty_quantized(x, offs=offs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        mxq.quantize(x, offs=offs, out=bufs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mxq.quantize(x, offs=offs, out=bufs)
    for seed in (1, 2):
        x.copy_(random_bf16(M, K, seed=seed, specials=True).cuda())
        _poison(bufs, 0xA5)
        graph.replay()
        torch.cuda.synchronize()
        assert_outputs_equal(bufs, mxq.quantize(x, offs=offs), NAMES, f"replay {seed}: ")
