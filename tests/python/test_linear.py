"""MXFP8Linear (docs/training.md): the numerics bars against a bf16 nn.Linear with the same weights, bitwise-identical
outputs and gradients between the "fused" and "composed" activation backends, the operands of each GEMM (byte-exact
against explicit op calls), both weight policies (32x32, 1x32), every cast asking for its scaling mode explicitly,
bias / leading dims / non-contiguous dy / fp32 master weights, torch.compile(fullgraph=True), a CUDA-graph-captured
training step and the error cases. Everything runs on the CPU dispatch (the C++ reference ops, the emulated GEMM) and
on CUDA where present."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import copy
import math

import mxq
import mxq.linear
import torch
from helpers import (
    DEVICES,
    WEIGHT_SCALINGS,
    assert_graph_replay_matches_eager,
    assert_outputs_equal,
    check_backends_and_bars,
    check_scaling_mode_explicit,
    record_ops,
    requires_cuda,
    sqnr,
)
from mxq import MXFP8Config, MXFP8Linear
from mxq.linear import native_mx_gemm
from torch import nn


def _run(module, x, dy):
    x = x.clone().requires_grad_(True)
    y = module(x)
    y.backward(dy)
    return y.detach(), x.grad, module.weight.grad


def _setup(device, M, K, N, seed=0, bias=False):
    g = torch.Generator(device="cpu").manual_seed(seed)
    ref = nn.Linear(K, N, bias=bias, dtype=torch.bfloat16)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(N, K, generator=g) / math.sqrt(K))
        if bias:
            ref.bias.copy_(torch.randn(N, generator=g))
    ref = ref.to(device)
    x = torch.randn(M, K, generator=g).to(device, torch.bfloat16)
    dy = torch.randn(M, N, generator=g).to(device, torch.bfloat16)
    return ref, x, dy


def _check(device, M, K, N, weight_scaling):
    ref, x, dy = _setup(device, M, K, N)
    return check_backends_and_bars(
        lambda config: _run(MXFP8Linear.from_linear(ref, config=config), x, dy),
        _run(ref, x, dy),
        MXFP8Config,
        weight_scaling,
        device,
    )


@pytest.mark.parametrize("weight_scaling", WEIGHT_SCALINGS)
@pytest.mark.parametrize("device", DEVICES)
def test_numerics_bars_and_backends(device, weight_scaling):
    # (M, K, N) = (1024, 1024, 2048) on both dispatches: the CPU reference does it in about a second per config.
    figures = _check(device, 1024, 1024, 2048, weight_scaling)
    print(f"MXFP8Linear {device} {weight_scaling}: SQNR y/dx/dW = " + " / ".join(f"{s:.2f}" for s in figures))


@pytest.mark.parametrize("scaling_mode", ["rceil", "floor"])
@pytest.mark.parametrize("weight_scaling", WEIGHT_SCALINGS)
@pytest.mark.parametrize("device", DEVICES)
def test_gemm_operands_bytes(device, weight_scaling, scaling_mode):
    """Each GEMM consumes exactly the operands of the table in mxq/linear.py: the layer's y, dx, dW equal the products
    of explicitly quantized and dequantized operands, bit for bit (emulated GEMM)."""
    ops = torch.ops.mxq
    ref, x, dy = _setup(device, 128, 256, 96, seed=3)
    m = MXFP8Linear.from_linear(
        ref, config=MXFP8Config(weight_scaling=weight_scaling, scaling_mode=scaling_mode, gemm="emulated")
    )
    got = _run(m, x, dy)
    w = ref.weight.detach()
    q_x, s_x = ops.quantize_rowwise(x, 32, scaling_mode, None)
    q_w, s_w, q_w_col, s_w_col = ops.quantize_weight(
        w, scaling_mode=scaling_mode, weight_scaling=weight_scaling, rowwise=True, colwise=True
    )
    q_dy, s_dy, q_dy_col, s_dy_col = ops.quantize(dy, 32, scaling_mode, None)
    q_x_col, s_x_col = ops.quantize_colwise(x, 32, scaling_mode, None)
    deq = ops.dequantize
    w_row = deq(q_w, s_w, None, "blocked")  # (N, K), quantized along K
    w_col = deq(q_w_col.t(), s_w_col, None, "blocked")  # (K, N), quantized along N
    expected = (
        deq(q_x, s_x, None, "blocked") @ w_row.t(),
        deq(q_dy, s_dy, None, "blocked") @ w_col.t(),
        deq(q_dy_col.t(), s_dy_col, None, "blocked") @ deq(q_x_col.t(), s_x_col, None, "blocked").t(),
    )
    assert_outputs_equal(got, expected, ("y", "dx", "dW"), f"{weight_scaling} {scaling_mode}: ", strides=False)
    if weight_scaling == "32x32":
        # One byte set: the forward (along K) and dgrad (along N) weight operands hold the same values.
        assert torch.equal(w_row.view(torch.int16), w_col.t().view(torch.int16))
        assert torch.equal(q_w.view(torch.uint8), q_w_col.view(torch.uint8))


@pytest.mark.parametrize("scaling_mode", ["rceil", "floor"])
def test_scaling_mode_passed_explicitly_to_every_op(monkeypatch, scaling_mode):
    calls = record_ops(monkeypatch)
    ref, x, dy = _setup("cpu", 64, 64, 64)
    _run(MXFP8Linear.from_linear(ref, config=MXFP8Config(scaling_mode=scaling_mode)), x, dy)
    names = [c[0] for c in calls]
    assert names.count("quantize_weight") == 1 and "quantize" in names and "quantize_colwise" in names, names
    check_scaling_mode_explicit(calls, scaling_mode)


@pytest.mark.parametrize("device", DEVICES)
def test_bias_leading_dims_and_fp32_master_weights(device):
    ref, _, _ = _setup(device, 128, 256, 128, bias=True)
    m = MXFP8Linear.from_linear(ref).float()  # fp32 master weights, cast to bf16 inside forward
    x = torch.randn(2, 64, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    assert y.shape == (2, 64, 128) and y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.shape == x.shape and m.weight.grad.dtype == torch.float32 and m.bias.grad.shape == (128,)
    assert sqnr(ref(x.detach()), y.detach()) >= 25
    torch.testing.assert_close(m.bias.grad, torch.full((128,), 128.0, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_dy_and_leading_dims(device):
    ref, _, _ = _setup(device, 128, 128, 64)
    m = MXFP8Linear.from_linear(ref)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 2, 16, 128, generator=g).to(device, torch.bfloat16)
    dy_t = torch.randn(64, 16, 2, 4, generator=g).to(device, torch.bfloat16)
    dy = dy_t.permute(3, 2, 1, 0)  # (4, 2, 16, 64), non-contiguous
    assert not dy.is_contiguous()
    got = _run(m, x, dy)
    m.weight.grad = None
    want = _run(m, x, dy.contiguous())
    assert got[0].shape == (4, 2, 16, 64) and got[1].shape == x.shape
    assert_outputs_equal(got, want, ("y", "dx", "dW"), "non-contiguous dy: ", strides=False)


def test_gemm_auto_is_the_emulation_on_cpu():
    ref, x, dy = _setup("cpu", 64, 128, 64)
    auto = _run(MXFP8Linear.from_linear(ref), x, dy)
    emulated = _run(MXFP8Linear.from_linear(ref, config=MXFP8Config(gemm="emulated")), x, dy)
    assert_outputs_equal(auto, emulated, ("y", "dx", "dW"), "auto vs emulated: ", strides=False)
    assert not native_mx_gemm(torch.device("cpu"))


@requires_cuda
def test_emulated_gemm_below_sm100():
    if native_mx_gemm(torch.device("cuda")):
        pytest.skip("SM100+: the default GEMM is torch._scaled_mm")
    ref, x, dy = _setup("cuda", 256, 256, 256)
    auto = _run(MXFP8Linear.from_linear(ref), x, dy)
    emulated = _run(MXFP8Linear.from_linear(ref, config=MXFP8Config(gemm="emulated")), x, dy)
    assert_outputs_equal(auto, emulated, ("y", "dx", "dW"), "auto vs emulated: ", strides=False)


@requires_cuda
def test_cuda_matches_cpu_reference_dispatch():
    ref, x, dy = _setup("cpu", 128, 256, 128)
    cpu = _run(MXFP8Linear.from_linear(ref, config=MXFP8Config(gemm="emulated")), x, dy)
    refc = copy.deepcopy(ref).cuda()
    cuda = _run(MXFP8Linear.from_linear(refc, config=MXFP8Config(gemm="emulated")), x.cuda(), dy.cuda())
    for a, b in zip(cuda, cpu):
        torch.testing.assert_close(a.cpu(), b, rtol=2**-7, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_fullgraph_forward_backward_matches_eager(device):
    ref, _, _ = _setup(device, 256, 256, 128, bias=True)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 128, 256, generator=g).to(device, torch.bfloat16)
    dy = torch.randn(2, 128, 128, generator=g).to(device, torch.bfloat16)
    m = MXFP8Linear.from_linear(ref)
    eager = _run(m, x, dy) + (m.bias.grad.clone(),)
    m.weight.grad = m.bias.grad = None
    compiled = torch.compile(m, fullgraph=True)
    got = _run(compiled, x, dy) + (m.bias.grad.clone(),)
    # y may differ in the last bit: inductor may fold the bias add into the GEMM (one rounding instead of two).
    torch.testing.assert_close(got[0], eager[0], rtol=2**-7, atol=2**-5)
    if device == "cpu":  # the gradients come from the same dy through the same ops and matmuls
        assert_outputs_equal(got[1:], eager[1:], ("dx", "dW", "db"), "compiled vs eager: ", strides=False)
    else:
        for a, b in zip(got[1:], eager[1:]):
            torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-3)


@requires_cuda
def test_cuda_graph_training_step():
    """A whole training step (forward, backward, SGD update) captured in a CUDA graph and replayed equals the same
    steps run eagerly."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 128)).cuda()
    eager = copy.deepcopy(base)
    graphed = copy.deepcopy(base)
    for model in (eager, graphed):
        mxq.nn.convert(model)
    data = [(torch.randn(64, 256, device="cuda"), torch.randn(64, 128, device="cuda")) for _ in range(4)]

    assert_graph_replay_matches_eager(
        lambda model, x, t: (model(x).float() - t).square().mean(), eager, graphed, data, 0.1
    )


def test_constructor_errors():
    with pytest.raises(ValueError, match="MXFP8Linear: in_features must be a multiple of 32, got 100"):
        MXFP8Linear(100, 128)
    with pytest.raises(ValueError, match="MXFP8Linear: out_features must be a multiple of 32, got 48"):
        MXFP8Linear(128, 48)
    with pytest.raises(TypeError, match="^MXFP8Linear: config must be a mxq.MXFP8Config or None, got str$"):
        MXFP8Linear(128, 128, config="mxfp8_rceil")


def test_call_errors():
    m = MXFP8Linear(64, 32, dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match=r"token count .* must be a multiple of 32, got 48 for input shape \(3, 16, 64\)"
    ):
        m(torch.randn(3, 16, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"input must have shape \(\.\.\., 64\), got \(32, 96\)"):
        m(torch.randn(32, 96, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"weight must be 2-D \(N, K\)"):
        mxq.mxfp8_linear(torch.randn(32, 64), torch.randn(2, 32, 64))


def test_argument_type_bias_device_and_capability_errors():
    """What F.linear refuses, mxfp8_linear refuses too (it used to cast integer inputs to bf16, broadcast any bias
    and mix devices), each with the class of docs/numerics.md §9; a forced native GEMM on a device without one is
    a RuntimeError up front."""
    x, w, b = torch.randn(32, 64), torch.randn(32, 64), torch.randn(32)
    f = mxq.mxfp8_linear
    cases = [
        (TypeError, "x must be a floating-point tensor, got torch.int32", lambda: f(x.int(), w)),
        (TypeError, "weight must be a floating-point tensor, got torch.bool", lambda: f(x, w > 0)),
        (TypeError, "bias must be a floating-point tensor, got torch.int64", lambda: f(x, w, b.long())),
        (TypeError, "x must be a torch.Tensor, got list", lambda: f(x.tolist(), w)),
        (TypeError, "config must be a mxq.MXFP8Config or None, got dict", lambda: f(x, w, config={})),
        (
            ValueError,
            r"bias must have shape \(32,\) for a weight of shape \(32, 64\), got \(1,\)",
            lambda: f(x, w, b[:1]),
        ),
        (ValueError, r"bias must have shape \(32,\) .*, got \(32, 32\)", lambda: f(x, w, torch.randn(32, 32))),
        (ValueError, "x, weight and bias must be on one device, got meta, cpu", lambda: f(x.to("meta"), w)),
        (ValueError, "x, weight and bias must be on one device, got cpu, cpu, meta", lambda: f(x, w, b.to("meta"))),
        (
            RuntimeError,
            'gemm="native" needs a CUDA device of compute capability 10.0',
            lambda: f(x, w, config=MXFP8Config(gemm="native")),
        ),
    ]
    for cls, message, call in cases:
        with pytest.raises(cls, match=f"^mxq.mxfp8_linear: {message}"):
            call()
    with pytest.raises(TypeError, match="^MXFP8Linear: input must be a floating-point tensor, got torch.int32$"):
        MXFP8Linear(64, 32)(x.int())


@pytest.mark.parametrize(
    "option, value",
    [
        ("format", "fp16"),
        ("weight_scaling", "16x16"),
        ("activation_quantization_backend", "triton"),
        ("x_colwise", "fp8"),
        ("scaling_mode", "even"),
        ("gemm", "cublas"),
    ],
)
def test_config_option_errors(option, value):
    """MXFP8Config checks every field once, when it is made: a value outside the choices is a ValueError naming the
    field and the value, a value that is not a str a TypeError; the layers then check nothing per call."""
    with pytest.raises(ValueError, match=f'^mxq.MXFP8Config: {option} must be .*, got "{value}"$'):
        MXFP8Config(**{option: value})
    with pytest.raises(TypeError, match=f"^mxq.MXFP8Config: {option} must be a str, got int$"):
        MXFP8Config(**{option: 1})


def test_config_recipes():
    assert MXFP8Config.recipe("mxfp8_rceil") == MXFP8Config()
    # the format is a field of every recipe
    assert {n: r.format for n, r in mxq.config.RECIPES.items()} == {
        "mxfp8_rceil": "mxfp8",
        "mxfp8_floor": "mxfp8",
        "mxfp8_rceil_1x32": "mxfp8",
        "fp8_blockwise": "fp8_blockwise",
        "fp8_blockwise_pow2": "fp8_blockwise",
    }
    assert MXFP8Config() == MXFP8Config("32x32", "fused", "high_precision", "rceil", "auto")
    assert MXFP8Config.recipe("mxfp8_floor").scaling_mode == "floor"
    assert MXFP8Config.recipe("mxfp8_rceil_1x32", gemm="emulated") == MXFP8Config(
        weight_scaling="1x32", gemm="emulated"
    )
    with pytest.raises(
        ValueError,
        match='^mxq.MXFP8Config.recipe: name must be "mxfp8_rceil", "mxfp8_floor", "mxfp8_rceil_1x32", "fp8_blockwise" or',
    ):
        MXFP8Config.recipe("mxfp8")
    with pytest.raises(ValueError, match="^mxq.MXFP8Config: gemm must be"):
        MXFP8Config.recipe("mxfp8_rceil", gemm="scaled_mm")
    with pytest.raises(Exception, match="cannot assign to field"):
        MXFP8Config().gemm = "native"  # frozen: checked once, never changed after
