"""MXFP8Linear (docs/numerics.md §11): the "fused" and "composed" activation backends give bitwise-identical outputs and gradients,
and the numerics bar against a bf16 nn.Linear with the same weights. Same shape on CUDA and on the CPU dispatch (the C++
reference ops, the same autograd code)."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import math

import torch
from helpers import DEVICES, requires_cuda
from mxq import MXFP8Linear
from mxq.linear import native_mx_gemm
from torch import nn


def sqnr(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref, out = ref.float(), out.float()
    return 20 * math.log10(ref.norm().item() / (ref - out).norm().item())


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


def _identical(a, b, what):
    for t, u, n in zip(a, b, ("y", "dx", "dW")):
        assert t.dtype == u.dtype == torch.bfloat16 and t.shape == u.shape, f"{what}: {n}"
        assert torch.equal(t.view(torch.int16), u.view(torch.int16)), f"{what}: {n} differs bitwise"


def _check(device, M, K, N, bars):
    ref, x, dy = _setup(device, M, K, N)
    expected = _run(ref, x, dy)
    results = {}
    for backend in ("fused", "composed"):
        for x_colwise in ("high_precision", "quantized"):
            m = MXFP8Linear.from_linear(ref, activation_quantization_backend=backend, x_colwise=x_colwise)
            results[backend, x_colwise] = _run(m, x, dy)
    base = results["fused", "high_precision"]
    for key, got in results.items():
        _identical(got, base, f"{key} vs ('cuda', 'high_precision')")
    for got, exp, bar, n in zip(base, expected, bars, ("output", "input grad", "weight grad")):
        s = sqnr(exp, got)
        assert s >= bar, f"{n}: SQNR {s:.2f} dB < {bar} dB"


@requires_cuda
def test_spec_numerics_bar_and_backends_cuda():
    _check("cuda", 1024, 1024, 2048, bars=(27.0, 25.0, 24.0))


def test_backends_and_numerics_cpu():
    # The CPU dispatch (the C++ reference) and a CPU bf16 matmul: the same autograd code and bar.
    _check("cpu", 1024, 1024, 2048, bars=(27.0, 25.0, 24.0))


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


@requires_cuda
def test_emulated_gemm_below_sm100():
    if native_mx_gemm(torch.device("cuda")):
        pytest.skip("SM100+: the default GEMM is torch._scaled_mm")
    ref, x, dy = _setup("cuda", 256, 256, 256)
    auto = _run(MXFP8Linear.from_linear(ref), x, dy)
    emulated = _run(MXFP8Linear.from_linear(ref, gemm="emulated"), x, dy)
    _identical(auto, emulated, "auto vs emulated")


@requires_cuda
def test_compiled_linear_matches_eager():
    ref, x, dy = _setup("cuda", 256, 512, 256)
    m = MXFP8Linear.from_linear(ref, activation_quantization_backend="fused")
    eager = _run(m, x, dy)
    m.weight.grad = None
    compiled = torch.compile(m, fullgraph=True)
    got = _run(compiled, x, dy)
    for a, b in zip(got, eager):
        torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-3)


def test_constructor_arguments():
    with pytest.raises(ValueError, match='activation_quantization_backend must be "fused" or "composed"'):
        MXFP8Linear(128, 128, activation_quantization_backend="triton")
    with pytest.raises(ValueError, match="x_colwise must be"):
        MXFP8Linear(128, 128, x_colwise="fp8")
