"""The FP8 blockwise recipe (``MXFP8Config.recipe("fp8_blockwise")``, docs/training.md) in the training layers: the
config's per-format choices; MXFP8Linear's and mxq.grouped_mm's outputs and gradients against an emulation written
here from docs/numerics.md §13 on the independent from-spec quantizer (blockwise_reference.py): each GEMM operand
dequantized in fp32 (e4m3 · factor), an fp32 matmul, bf16 — the forward with x in 1x128 blocks and W in 128x128 tiles,
dgrad with dy in 1x128 blocks along N and the same tiles, wgrad with dy and x in 128x1 blocks along the tokens (the
grouped ones on the rows padded to 128 per group, empty groups and a tail included); the bars against bf16; the error
cases (128-multiples, the token dispatcher refused, gemm="native" off Hopper); the converter. On an SM90 GPU: the
native GEMMs (F.scaled_mm; mxq's CUTLASS grouped GEMM) against the emulated ones on the same operands, within fp32
accumulation, and a torch.compile'd training step."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import dataclasses
import itertools
import math

import blockwise_reference as bref
import mxq
import torch
from helpers import (
    DEVICES,
    assert_gemm_close,
    assert_moe_graph_step_matches_eager,
    assert_moe_outputs_equal,
    composed_moe,
    sqnr,
)
from mxq import MXFP8Config, MXFP8Linear
from torch import nn

RECIPE = MXFP8Config.recipe("fp8_blockwise")
requires_sm90 = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9),
    reason="needs a CUDA device of compute capability 9.x (F.scaled_mm's FP8 blockwise GEMMs)",
)


# ---- the recipe ----


def test_recipe_fields_and_per_format_choices():
    assert RECIPE == MXFP8Config(format="fp8_blockwise")  # None fields resolve to the format's defaults
    assert (RECIPE.weight_scaling, RECIPE.scaling_mode, RECIPE.activation_quantization_backend) == (
        "128x128",
        "fp32",
        "fused",
    )
    assert MXFP8Config.recipe("fp8_blockwise_pow2").scaling_mode == "rceil"
    assert (MXFP8Config().weight_scaling, MXFP8Config().scaling_mode) == ("32x32", "rceil")
    cases = [
        ({"format": "fp8_blockwise", "weight_scaling": "32x32"}, 'weight_scaling must be "128x128" for format'),
        ({"format": "fp8_blockwise", "scaling_mode": "floor"}, 'scaling_mode must be "fp32" or "rceil" for format'),
        ({"format": "fp8_blockwise", "activation_quantization_backend": "composed"}, 'backend must be "fused" for'),
        ({"weight_scaling": "128x128"}, 'weight_scaling must be "32x32" or "1x32" for format "mxfp8"'),
        ({"scaling_mode": "fp32"}, 'scaling_mode must be "rceil" or "floor" for format "mxfp8", got "fp32"'),
    ]
    for fields, message in cases:
        with pytest.raises(ValueError, match=f"^mxq.MXFP8Config: .*{message}"):
            MXFP8Config(**fields)
    # A resolved field stays resolved: switching an MXFP8 recipe's format names the field that no longer fits.
    with pytest.raises(ValueError, match='weight_scaling must be "128x128" for format "fp8_blockwise", got "32x32"'):
        dataclasses.replace(MXFP8Config(), format="fp8_blockwise")


# ---- the emulation, from the spec ----


def emulated_linear(x, w, dy, mode="fp32"):
    """(y, dx, dW) of y = x Wᵀ with every GEMM operand quantized by the from-spec quantizer."""
    qx, sx, qx_col, sx_col = bref.quantize(x, mode)
    qw, sw, _, _ = bref.quantize_weight(w, mode)
    qdy, sdy, qdy_col, sdy_col = bref.quantize(dy, mode)
    wf = bref.tile_values(qw, sw)  # (N, K): the same tiles and bytes serve forward and dgrad
    y = bref.values(qx, sx) @ wf.t()
    dx = bref.values(qdy, sdy) @ wf
    # wgrad: 128x1 blocks along the tokens; q_col (M, N) views the (N, M) array, factors (N, M/128)
    dw = bref.values(qdy_col.t(), sdy_col) @ bref.values(qx_col.t(), sx_col).t()
    return y.bfloat16(), dx.bfloat16(), dw.bfloat16()


def _setup(device, M, K, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(N, K, generator=g) / math.sqrt(K)).bfloat16()
    x = torch.randn(M, K, generator=g).bfloat16()
    dy = torch.randn(M, N, generator=g).bfloat16()
    return x.to(device), w.to(device), dy.to(device)


def _l1(x, w, dy):
    """The sum of |a_k b_k| behind each element of y = x wᵀ, dx = dy w and dW = dyᵀ x (fp32)."""
    x, w, dy = x.float().abs(), w.float().abs(), dy.float().abs()
    return x @ w.t(), dy @ w, dy.t() @ x


def _run(config, x, w, dy):
    layer = MXFP8Linear(w.shape[1], w.shape[0], bias=False, device=x.device, dtype=torch.bfloat16, config=config)
    with torch.no_grad():
        layer.weight.copy_(w)
    xg = x.clone().requires_grad_(True)
    y = layer(xg)
    y.backward(dy)
    return y.detach(), xg.grad, layer.weight.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["fp32", "rceil"])
@pytest.mark.parametrize("MKN", [(256, 384, 128), (384, 256, 640)], ids=lambda s: "x".join(map(str, s)))
def test_linear_equals_the_emulation_from_the_spec(MKN, mode, device):
    M, K, N = MKN
    x, w, dy = _setup(device, M, K, N, seed=M + K + N)
    config = MXFP8Config(format="fp8_blockwise", scaling_mode=mode, gemm="emulated")
    got = _run(config, x, w, dy)
    for name, g, e in zip(("y", "dx", "dW"), got, emulated_linear(x, w, dy, mode)):
        assert g.dtype == torch.bfloat16 and g.shape == e.shape, name
        assert_gemm_close(g, e, name, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_bars_against_bf16(device):
    """The recipe trains: output and gradients close to a bf16 nn.Linear's (the MXFP8 layers' SQNR bars)."""
    x, w, dy = _setup(device, 256, 512, 384, seed=3)
    got = _run(RECIPE, x, w, dy)
    ref = nn.Linear(512, 384, bias=False, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        ref.weight.copy_(w)
    xg = x.clone().requires_grad_(True)
    y = ref(xg)
    y.backward(dy)
    for name, g, e, bar in zip(("y", "dx", "dW"), got, (y.detach(), xg.grad, ref.weight.grad), (27.0, 25.0, 24.0)):
        assert sqnr(e.float(), g.float()) > bar, name


def test_linear_shapes_are_128_multiples():
    x = torch.randn(128, 256)
    with pytest.raises(ValueError, match="^MXFP8Linear: in_features must be a multiple of 128, got 96$"):
        MXFP8Linear(96, 128, config=RECIPE)
    with pytest.raises(ValueError, match="^MXFP8Linear: out_features must be a multiple of 128, got 160$"):
        MXFP8Linear(128, 160, config=RECIPE)
    layer = MXFP8Linear(256, 128, config=RECIPE)
    with pytest.raises(ValueError, match="the token count .* must be a multiple of 128, got 96 for input shape"):
        layer(x[:96])
    with pytest.raises(ValueError, match=r"^mxq.mxfp8_linear: the token count .* multiple of 128, got 32 for x of"):
        mxq.mxfp8_linear(x[:32], layer.weight, config=RECIPE)
    assert layer(x).shape == (128, 128)


def test_native_gemm_needs_hopper_and_shapes_are_128_multiples():
    x, w, _ = _setup("cpu", 128, 128, 128)
    native = dataclasses.replace(RECIPE, gemm="native")
    for owner, call in [
        ("mxq.mxfp8_linear", lambda: mxq.mxfp8_linear(x, w, config=native)),
        (
            "mxq.grouped_mm",
            lambda: mxq.grouped_mm(x, w.unsqueeze(0), torch.tensor([128], dtype=torch.int32), config=native),
        ),
    ]:
        with pytest.raises(
            RuntimeError, match=f'^{owner}: gemm="native" needs a CUDA device of compute capability 9.x'
        ):
            call()
    with pytest.raises(ValueError, match="^MXFP8GroupedExperts: hidden_dim must be a multiple of 128, got 96$"):
        mxq.MXFP8GroupedExperts(2, 128, 96, config=RECIPE)
    with pytest.raises(ValueError, match="^mxq.grouped_mm: N must be a multiple of 128, got 64$"):
        mxq.grouped_mm(x, w[:64].unsqueeze(0), torch.tensor([128], dtype=torch.int32), config=RECIPE)
    d, ids = mxq.TokenDispatcher(2, config=RECIPE), torch.zeros(128, 1, dtype=torch.int64)
    with pytest.raises(
        ValueError, match=r"^mxq.TokenDispatcher.dispatch: D \(x.shape\[1\]\) must be a multiple of 128, got 64$"
    ):
        d.dispatch(x[:, :64], torch.ones(128, 1), ids)


def test_convert_takes_linears_and_experts_in_128_multiples():
    model = nn.Sequential(nn.Linear(256, 128), nn.Linear(128, 96), mxq.moe.GroupedExperts(2, 128, 256))
    summary = mxq.nn.convert(model, config=RECIPE)
    assert [c.name for c in summary.converted] == ["0", "2"]
    assert {s.name: s.reason for s in summary.skipped} == {"1": "out_features=96 not a multiple of 128"}
    assert model[0].mxfp8_config is RECIPE and model[2].mxfp8_config is RECIPE


# ---- grouped: mxq.grouped_mm and MXFP8GroupedExperts ----


def emulated_grouped(x, w, dy, ends, mode="fp32"):
    """(y, dx, dW) of y_g = x_g W_gᵀ over the groups ending at ``ends`` (rows past the last end: y 0, dx 0), each
    group's rows padded to 128 by hand, every operand from the from-spec quantizer of the padded tensors."""
    M, K = x.shape
    G, N, _ = w.shape
    starts, sizes = [0, *ends[:-1]], [e - s for s, e in zip([0, *ends[:-1]], ends)]
    padded_starts = [sum(-(-n // 128) * 128 for n in sizes[:g]) for g in range(G)]
    Mp = -(-(M + 127 * G) // 128) * 128
    xp, dyp = torch.zeros(Mp, K, dtype=x.dtype), torch.zeros(Mp, N, dtype=dy.dtype)
    for s, n, p in zip(starts, sizes, padded_starts):
        xp[p : p + n], dyp[p : p + n] = x[s : s + n].cpu(), dy[s : s + n].cpu()
    qx, sx, qx_col, sx_col = bref.quantize(xp, mode)
    qdy, sdy, qdy_col, sdy_col = bref.quantize(dyp, mode)
    qw, sw, _, _ = bref.quantize_weight(w, mode)
    xf, dyf = bref.values(qx, sx), bref.values(qdy, sdy)  # (Mp, K), (Mp, N): rowwise
    xcf, dycf = bref.values(qx_col.t(), sx_col), bref.values(qdy_col.t(), sdy_col)  # (K, Mp), (N, Mp): colwise
    y, dx, dw = torch.zeros(M, N), torch.zeros(M, K), torch.zeros(G, N, K)
    for g, (s, n, p) in enumerate(zip(starts, sizes, padded_starts)):
        wf = bref.tile_values(qw[g], sw[g])  # (N, K)
        y[s : s + n] = xf[p : p + n] @ wf.t()
        dx[s : s + n] = dyf[p : p + n] @ wf
        dw[g] = dycf[:, p : p + n] @ xcf[:, p : p + n].t()
    return y.bfloat16(), dx.bfloat16(), dw.bfloat16()


def _run_grouped(config, x, w, dy, offs):
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = mxq.grouped_mm(xg, wg, offs, config=config)
    y.backward(dy)
    return y.detach(), xg.grad, wg.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["fp32", "rceil"])
def test_grouped_mm_equals_the_emulation_from_the_spec(mode, device):
    """Groups of 200, 0 (empty), 57 and 300 rows (padded to 128 each on the device), 43 tail rows past the last end."""
    sizes, tail, K, N = [200, 0, 57, 300], 43, 256, 384
    M, ends = sum(sizes) + tail, torch.tensor(sizes).cumsum(0).tolist()
    g = torch.Generator().manual_seed(11)
    w = (torch.randn(len(sizes), N, K, generator=g) / math.sqrt(K)).bfloat16()
    x, dy = torch.randn(M, K, generator=g).bfloat16(), torch.randn(M, N, generator=g).bfloat16()
    offs = torch.tensor(ends, dtype=torch.int32)
    config = MXFP8Config(format="fp8_blockwise", scaling_mode=mode, gemm="emulated")
    got = _run_grouped(config, x.to(device), w.to(device), dy.to(device), offs.to(device))
    for name, gt, e in zip(("y", "dx", "dW"), got, emulated_grouped(x, w, dy, ends, mode)):
        assert gt.dtype == torch.bfloat16 and gt.shape == e.shape, name
        assert_gemm_close(gt, e, name, 1e-4)
    assert not got[0][-tail:].any() and not got[1][-tail:].any() and not got[2][1].any()  # tail, the empty group


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_experts_bars_against_bf16(device):
    """MXFP8GroupedExperts (SwiGLU) with the recipe against GroupedExperts in bf16 on the same weights."""
    torch.manual_seed(0)
    ref = mxq.moe.GroupedExperts(4, 256, 384, device=device, dtype=torch.bfloat16)
    mine = mxq.MXFP8GroupedExperts.from_experts(ref, config=dataclasses.replace(RECIPE, gemm="emulated"))
    offs = torch.tensor([128, 300, 300, 512], dtype=torch.int32, device=device)
    x = torch.randn(512, 256, device=device, dtype=torch.bfloat16)
    dy = torch.randn(512, 256, device=device, dtype=torch.bfloat16)
    outs = []
    for m in (ref, mine):
        xg = x.clone().requires_grad_(True)
        y = m(xg, offs)
        y.backward(dy)
        outs.append((y.detach(), xg.grad, m.w1.grad, m.w2.grad))
    for name, e, g in zip(("y", "dx", "dw1", "dw2"), *outs):  # MXFP8's bar for SwiGLU: three GEMMs in a row
        assert sqnr(e.float(), g.float()) >= 20, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("routed", ["fused", "composed"])
def test_token_dispatcher_equals_the_pieces_bitwise(routed, device):
    """TokenDispatcher.swiglu with the recipe (x quantized once by quantize_routed, padded to 128 per expert; the
    backward's d(routed y) with the gate scores in one routed pass) == composed_moe, outputs and every gradient (d scores
    within fp32 rounding: mxq.combine_score_grad's own order)."""
    T, D, H, E, k = 200, 128, 256, 4, 2
    g = torch.Generator().manual_seed(2)
    x, dout = torch.randn(T, D, generator=g).bfloat16(), torch.randn(T, D, generator=g).bfloat16()
    scores = torch.rand(T, k, generator=g)
    ids = torch.randint(0, E - 1, (T, k), generator=g)  # expert 3 empty
    ws = [(torch.randn(E, *s, generator=g) / math.sqrt(s[1])).bfloat16() for s in ((H, D), (D, H), (H, D))]
    config = dataclasses.replace(RECIPE, gemm="emulated")
    d = mxq.TokenDispatcher(E, config=config, routed_quantization=routed)
    runs = []
    for fn in (
        lambda x, s, *w: d.swiglu(d.dispatch(x, s, ids.to(device)), *w),
        lambda *a: composed_moe(*a[:2], ids.to(device), *a[2:], config),
    ):
        leaves = [t.to(device).requires_grad_(True) for t in (x, scores, *ws)]
        y = fn(*leaves)
        y.backward(dout.to(device))
        runs.append([y.detach(), *(t.grad for t in leaves)])
    assert_moe_outputs_equal(runs[0], runs[1], ("y", "dx", "d scores", "dW1", "dW2", "dW3"))
    assert all(not dw[3].any() for dw in runs[0][3:])  # the empty expert


# ---- Hopper: the native GEMMs ----


@requires_sm90
@pytest.mark.parametrize("MKN", [(512, 2048, 7168), (384, 640, 896)], ids=lambda s: "x".join(map(str, s)))
def test_native_equals_emulated(MKN):
    """F.scaled_mm on mxq's operands (no copy) against the emulated GEMMs on the same operands: forward, dgrad,
    wgrad within fp32 accumulation."""
    x, w, dy = _setup("cuda", *MKN, seed=7)
    native = _run(RECIPE, x, w, dy)
    emulated = _run(dataclasses.replace(RECIPE, gemm="emulated"), x, w, dy)
    for name, n, e, l1 in zip(("y", "dx", "dW"), native, emulated, _l1(x, w, dy)):
        assert_gemm_close(n, e, name, 1e-4, l1)


@requires_sm90
def test_grouped_native_equals_emulated():
    """mxq's CUTLASS grouped GEMM (forward, dgrad, K-grouped wgrad) against the per-group fp32 emulation on CUDA."""
    sizes, K, N = [256, 0, 100, 700, 128], 512, 384
    M = sum(sizes) + 64
    g = torch.Generator().manual_seed(5)
    w = (torch.randn(len(sizes), N, K, generator=g) / math.sqrt(K)).bfloat16().cuda()
    x, dy = torch.randn(M, K, generator=g).bfloat16().cuda(), torch.randn(M, N, generator=g).bfloat16().cuda()
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    native = _run_grouped(RECIPE, x, w, dy, offs)
    emulated = _run_grouped(dataclasses.replace(RECIPE, gemm="emulated"), x, w, dy, offs)
    starts = [0, *offs.tolist()]
    groups = [_l1(x[s:e], w[i], dy[s:e]) for i, (s, e) in enumerate(itertools.pairwise(starts))]
    l1 = (
        torch.cat([gr[0] for gr in groups] + [x.new_zeros(M - starts[-1], N, dtype=torch.float)]),
        torch.cat([gr[1] for gr in groups] + [x.new_zeros(M - starts[-1], K, dtype=torch.float)]),
        torch.stack([gr[2] for gr in groups]),
    )
    for name, n, e, bound in zip(("y", "dx", "dW"), native, emulated, l1):
        assert_gemm_close(n, e, name, 1e-4, bound)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_step_equals_eager(device):
    """torch.compile(fullgraph=True) of the recipe's Linear (F.scaled_mm's aten op on Hopper, the emulation
    elsewhere), forward and backward: bitwise eager with backend="aot_eager" (the same ops, traced), within a bf16
    rounding with inductor."""
    torch.manual_seed(0)
    layer = MXFP8Linear(512, 256, config=RECIPE, device=device, dtype=torch.bfloat16)
    x = torch.randn(256, 512, device=device, dtype=torch.bfloat16)
    dy = torch.randn(256, 256, device=device, dtype=torch.bfloat16)

    def step(forward):
        layer.weight.grad = None
        xg = x.clone().requires_grad_(True)
        y = forward(xg)
        y.backward(dy)
        return y.detach(), xg.grad, layer.weight.grad

    eager = step(layer)
    torch._dynamo.reset()
    traced = step(torch.compile(layer, fullgraph=True, backend="aot_eager"))
    for name, a, b in zip(("y", "dx", "dW"), traced, eager):
        assert torch.equal(a, b), f"aot_eager vs eager: {name}"
    torch._dynamo.reset()
    compiled = step(torch.compile(layer, fullgraph=True))
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-3)


@requires_sm90
def test_moe_training_step_under_cuda_graph_capture():
    """A training step of an MoE layer on the native GEMMs (router, TokenDispatcher dispatch, SwiGLU experts on the
    CUTLASS grouped GEMM, combine, backward, SGD) captured in a CUDA graph and replayed on new tokens equals the
    same steps run eagerly: the per-group problems are built on the device from offs, no host sync anywhere."""
    T, D, H, E, k = 512, 256, 384, 8, 2
    g = torch.Generator().manual_seed(12)
    ws = [(torch.randn(E, *s, generator=g) / math.sqrt(s[1])).bfloat16().cuda() for s in ((H, D), (D, H), (H, D))]
    assert_moe_graph_step_matches_eager(mxq.TokenDispatcher(E, config=RECIPE), ws, T, k)
