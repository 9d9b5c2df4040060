"""mxq.TokenDispatcher (docs/training.md, "The token dispatcher"): dispatch -> SwiGLU experts -> combine equals the
composed path (x[index] -> mxq.grouped_mm per expert GEMM -> scale -> scatter-add) bitwise — output, dx, dW1, dW2,
dW3, and d scores within fp32 rounding (mxq.combine_score_grad sums in its own order) — on router-produced and constructed routings (top-k, an expert with no tokens, uneven counts, a token
picking one expert twice, one expert taking everything), every recipe, bf16 and fp32 inputs; the dispatched operands
byte-exact against gather -> pad -> mxq.quantize; x quantized once in forward and d(routed y) once in backward (op
counts); torch.compile(fullgraph=True); a CUDA-graph-captured step; the errors. CPU dispatch (the C++ reference ops)
everywhere, CUDA where present; both routed quantizations (the fused op and the composed baseline)."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import math
from collections import Counter

import mxq
import mxq.dispatch
import torch
import torch._inductor.config as inductor_config
from helpers import (
    DEVICES,
    assert_moe_graph_step_matches_eager,
    assert_moe_outputs_equal,
    assert_outputs_equal,
    composed_moe,
    requires_cuda,
)
from mxq import MXFP8Config, TokenDispatcher, grouped_mm
from mxq.dispatch import quantize_routed_composed
from torch.utils._python_dispatch import TorchDispatchMode

ROUTED = ["composed", "fused"]
CONFIGS = {
    "default": MXFP8Config(),
    "composed_quantized": MXFP8Config(activation_quantization_backend="composed", x_colwise="quantized"),
    "floor_1x32": MXFP8Config(scaling_mode="floor", weight_scaling="1x32"),
}
NAMES = ("y", "dx", "d scores", "dW1", "dW2", "dW3")
T, D, H, E, TOP_K = 72, 64, 96, 6, 2


def _routing(kind, device, seed=0):
    """(scores (T, k) fp32, expert_ids (T, k) int64). "router": softmax top-k of random logits with expert 5 never
    chosen (a large negative bias) and uneven counts; "duplicate": constructed ids where some tokens pick one expert
    twice; "one_expert": every choice on expert 2 (the others empty)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=g) + torch.tensor([1.5, 0.0, 0.5, -0.5, 0.0, -1e4])
    probs = logits.softmax(-1)
    scores, ids = probs.topk(TOP_K, dim=-1)
    scores = scores / scores.sum(-1, keepdim=True)
    if kind == "duplicate":
        ids = torch.randint(0, E - 1, (T, TOP_K), generator=g)
        ids[::5, 1] = ids[::5, 0]  # every fifth token picks its expert twice
        scores = torch.rand(T, TOP_K, generator=g)
    elif kind == "one_expert":
        ids = torch.full((T, TOP_K), 2)
    return scores.to(device), ids.to(device)


def _weights(device, seed=1):
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(E, H, D, generator=g) / math.sqrt(D)
    w2 = torch.randn(E, D, H, generator=g) / math.sqrt(H)
    w3 = torch.randn(E, H, D, generator=g) / math.sqrt(D)
    return [w.to(device) for w in (w1, w2, w3)]


def dispatcher_moe(dispatcher):
    def fn(x, scores, expert_ids, w1, w2, w3):
        return dispatcher.swiglu(dispatcher.dispatch(x, scores, expert_ids), w1, w2, w3)

    return fn


def _run(fn, x, scores, ids, ws, dout):
    x = x.clone().requires_grad_(True)
    scores = scores.clone().requires_grad_(True)
    ws = [w.clone().requires_grad_(True) for w in ws]
    y = fn(x, scores, ids, *ws)
    y.backward(dout)
    return (y.detach(), x.grad, scores.grad, *(w.grad for w in ws))


def _inputs(device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed + 10)
    x = torch.randn(T, D, generator=g).to(device, dtype)
    dout = torch.randn(T, D, generator=g).to(device, dtype)
    return x, dout


@pytest.mark.parametrize("routed", ROUTED)
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("routing", ["router", "duplicate", "one_expert"])
@pytest.mark.parametrize("device", DEVICES)
def test_equals_composed_path_bitwise(device, routing, config, routed):
    x, dout = _inputs(device, torch.bfloat16)
    scores, ids = _routing(routing, device)
    ws = _weights(device)
    counts = torch.bincount(ids.flatten(), minlength=E)
    if routing == "router":
        assert counts[5] == 0 and (counts % 32 != 0).any(), counts  # an empty expert, uneven counts
    d = TokenDispatcher(E, config=config, routed_quantization=routed)
    got = _run(dispatcher_moe(d), x, scores, ids, ws, dout)
    want = _run(lambda *a: composed_moe(*a, config=config), x, scores, ids, ws, dout)
    assert_moe_outputs_equal(got, want, NAMES, f"{routing} {routed} {config}: ")
    assert all(torch.count_nonzero(t) > 0 for t in got)
    for g in (3, 4, 5):  # experts with no routed rows get a zero weight gradient
        if counts[g] == 0:
            assert all(torch.count_nonzero(dw[g]) == 0 for dw in got[3:])


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_inputs_and_weights(device):
    """fp32 x (cast to bf16 for the routed math, the output cast back), fp32 scores and master weights: still bitwise
    the composed path, gradients in the inputs' dtypes."""
    x, dout = _inputs(device, torch.float32, seed=3)
    scores, ids = _routing("router", device, seed=3)
    ws = _weights(device, seed=4)
    d = TokenDispatcher(E, routed_quantization="composed")
    got = _run(dispatcher_moe(d), x, scores, ids, ws, dout)
    want = _run(lambda *a: composed_moe(*a, config=MXFP8Config()), x, scores, ids, ws, dout)
    assert_moe_outputs_equal(got, want, NAMES, "fp32: ")
    assert [t.dtype for t in got] == [torch.float32] * 6


@pytest.mark.parametrize("routed", ROUTED)
@pytest.mark.parametrize("device", DEVICES)
def test_dispatched_operands_bytes(device, routed):
    """The dispatched tensors are docs/numerics.md §12's: offs_p, dest, and the four quantized operands byte-exact
    against gather -> pad by hand -> mxq.quantize(offs=offs_p)."""
    x, _ = _inputs(device, torch.bfloat16, seed=5)
    scores, ids = _routing("duplicate", device, seed=5)
    r = TokenDispatcher(E, routed_quantization=routed).dispatch(x, scores, ids)
    counts = torch.bincount(ids.flatten().cpu(), minlength=E).tolist()
    padded = [-(-n // 32) * 32 for n in counts]
    starts = [sum(padded[:e]) for e in range(E)]
    assert r.offs_p.dtype == torch.int32 and r.offs_p.tolist() == [s + p for s, p in zip(starts, padded)]
    assert r.counts.tolist() == counts
    N = T * TOP_K
    Mp = -(-(N + 31 * E) // 32) * 32
    assert r.q_row.shape == (Mp, D) and r.x.shape == (Mp, D) and r.valid.shape == (Mp, 1)
    want_dest = [starts[e] + i for e in range(E) for i in range(counts[e])]
    assert r.dest.tolist() == want_dest
    assert r.valid.flatten().nonzero().flatten().tolist() == want_dest
    order = torch.argsort(ids.flatten(), stable=True)
    assert torch.equal(r.index, order // TOP_K)
    assert torch.equal(r.scores, scores.flatten()[order])
    x_p = x.new_zeros(Mp, D)
    x_p[r.dest] = x[r.index]
    want = mxq.quantize(x_p, offs=r.offs_p)
    for name, a, b in zip(("q_row", "s_row", "q_col", "s_col"), (r.q_row, r.s_row, r.q_col, r.s_col), want):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride(), name
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{name} differs"


def test_composed_routed_quantization_with_scale():
    """quantize_routed_composed's scale: the product rounded to x's dtype before quantizing (docs/numerics.md §12)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(10, 64, generator=g, dtype=torch.float32).bfloat16()
    index = torch.tensor([3, 3, 0, 9, 1], dtype=torch.int32)
    counts = torch.tensor([2, 0, 3])
    scale = torch.tensor([0.5, 0.0, 1.7, -3.0, 1e-3])
    q = quantize_routed_composed(x, index, counts, scale=scale)
    assert q.offs_p.tolist() == [32, 32, 64] and q.dest.tolist() == [0, 1, 32, 33, 34] and q.q_row.shape == (128, 64)
    x_p = x.new_zeros(128, 64)
    x_p[[0, 1, 32, 33, 34]] = (x[index.long()].float() * scale.unsqueeze(1)).bfloat16()
    for a, b in zip(q[:4], mxq.quantize(x_p, offs=q.offs_p)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


class _CountMxqOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "mxq":
            self.calls[func._opname] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("routed", ROUTED)
def test_x_quantized_once_and_dy_in_one_routed_pass(routed):
    """Forward: the routed x is quantized by one routed call (both axes; the w1 and w3 GEMMs share it, no other
    quantization of x), h once rowwise. Backward: d(routed y) by one routed call with the scores; the w1/w3 gradients
    once each on both axes; h colwise (the default x_colwise="high_precision")."""
    x, dout = _inputs("cpu", torch.bfloat16)
    scores, ids = _routing("router", "cpu")
    w1, w2, w3 = (w.requires_grad_(True) for w in _weights("cpu"))
    d = TokenDispatcher(E, routed_quantization=routed)
    x.requires_grad_(True)
    routed_op = "quantize_routed" if routed == "fused" else "quantize"
    with _CountMxqOps() as fwd:
        y = d.swiglu(d.dispatch(x, scores, ids), w1, w2, w3)
    with _CountMxqOps() as bwd:
        y.backward(dout)
    quantizes = {"quantize", "quantize_routed", "quantize_rowwise", "quantize_colwise", "quantize_composed"}
    assert {k: v for k, v in fwd.calls.items() if k in quantizes} == {routed_op: 1, "quantize_rowwise": 1}
    assert fwd.calls["quantize_weight"] == 3
    want_bwd = Counter({"quantize": 2, "quantize_colwise": 1}) + Counter({routed_op: 1})
    assert {k: v for k, v in bwd.calls.items() if k in quantizes} == dict(want_bwd)


@pytest.mark.parametrize("device", DEVICES)
def test_linear_experts_and_combine(device):
    """An mxq_experts="linear" module through TokenDispatcher.experts (grouped_mm on the dispatched operands, then the
    plain combine) equals the composed path bitwise."""
    x, dout = _inputs(device, torch.bfloat16, seed=8)
    scores, ids = _routing("router", device, seed=8)
    experts = mxq.GroupedExperts(E, D, 64, kind="linear", device=device)
    d = TokenDispatcher(E, routed_quantization="composed")

    def run(fn):
        experts.weight.grad = None
        xi, si = x.clone().requires_grad_(True), scores.clone().requires_grad_(True)
        y = fn(xi, si)
        y.backward(dout[:, :64] if y.shape[1] == 64 else dout)
        return y.detach(), xi.grad, si.grad, experts.weight.grad.clone()

    def composed(xi, si):
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        index, s = order // TOP_K, si.reshape(-1).float()[order]
        offs = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
        y = grouped_mm(xi[index], experts.weight, offs)
        y_scaled = (y.float() * s.unsqueeze(1)).to(torch.bfloat16)
        return y_scaled.new_zeros(T, 64).index_put_((index,), y_scaled, accumulate=True)

    got = run(lambda xi, si: d.experts(d.dispatch(xi, si, ids), experts))
    want = run(composed)
    assert_outputs_equal(got, want, ("y", "dx", "d scores", "dW"), "linear experts: ", strides=False)


@pytest.mark.parametrize("routed", ROUTED)
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_fullgraph_matches_eager(device, routed):
    """torch.compile(fullgraph=True) of dispatch -> SwiGLU -> combine, forward and backward: bitwise eager with
    backend="aot_eager"; with inductor (emulate_precision_casts, so it rounds the bf16 intermediates as eager does)
    bitwise on the CPU from torch 2.15 but for d scores, whose fp32 row sums inductor reduces in its own order;
    elsewhere (CUDA, torch 2.11 on the CPU: 1.2-1.4% apart) within 2^-5 normwise, about MXFP8's own error."""
    x, dout = _inputs(device, torch.bfloat16, seed=9)
    scores, ids = _routing("router", device, seed=9)
    ws = _weights(device, seed=9)
    fn = dispatcher_moe(TokenDispatcher(E, routed_quantization=routed))
    eager = _run(fn, x, scores, ids, ws, dout)
    torch._dynamo.reset()
    graphs = _run(torch.compile(fn, fullgraph=True, backend="aot_eager"), x, scores, ids, ws, dout)
    assert_outputs_equal(graphs, eager, NAMES, "aot_eager vs eager: ", strides=False)
    torch._dynamo.reset()
    with inductor_config.patch(emulate_precision_casts=True):
        compiled = _run(torch.compile(fn, fullgraph=True), x, scores, ids, ws, dout)
    if device == "cpu" and torch.__version__ >= "2.15":  # checked bitwise there; torch 2.11's inductor rounds apart
        keep = [0, 1, 3, 4, 5]
        assert_outputs_equal(
            [compiled[i] for i in keep],
            [eager[i] for i in keep],
            [NAMES[i] for i in keep],
            "inductor vs eager: ",
            strides=False,
        )
        torch.testing.assert_close(compiled[2], eager[2], rtol=1e-5, atol=1e-5)
        return
    for name, c, e in zip(NAMES, compiled, eager):  # a bf16 intermediate rounded otherwise moves e4m3 codes a step
        err = ((c.float() - e.float()).norm() / e.float().norm()).item()
        assert err < 2**-5, f"inductor vs eager: {name} differs by {err:.3g} normwise"


@requires_cuda
@pytest.mark.parametrize("routed", ROUTED)
def test_cuda_matches_cpu_dispatch_bytes(routed):
    """The dispatched operands on CUDA equal the CPU dispatch's (the C++ reference) byte for byte."""
    x, _ = _inputs("cpu", torch.bfloat16, seed=11)
    scores, ids = _routing("duplicate", "cpu", seed=11)
    d = TokenDispatcher(E, routed_quantization=routed)
    a = d.dispatch(x, scores, ids)
    b = d.dispatch(x.cuda(), scores.cuda(), ids.cuda())
    for name in ("q_row", "s_row", "q_col", "s_col", "offs_p", "dest", "valid", "index", "counts"):
        u, v = getattr(a, name), getattr(b, name).cpu()
        assert u.shape == v.shape and torch.equal(u.view(torch.uint8), v.view(torch.uint8)), name


@requires_cuda
@pytest.mark.parametrize("routed", ROUTED)
def test_cuda_graph_training_step(routed):
    """A training step (router, dispatch, SwiGLU experts, combine, backward, SGD) captured in a CUDA graph and
    replayed on new tokens equals the same steps run eagerly: no host sync anywhere on the dispatcher's path."""
    if mxq.moe.grouped_gemm_path(torch.device("cuda")) == "emulated_per_group":
        pytest.skip("this device has no torch._grouped_mm kernel: the per-group fallback reads offs on the host")
    assert_moe_graph_step_matches_eager(
        TokenDispatcher(E, routed_quantization=routed), _weights("cuda", seed=12), T, TOP_K
    )


def test_errors():
    x = torch.randn(8, 64)
    scores, ids = torch.rand(8, 2), torch.randint(0, 4, (8, 2))
    d = TokenDispatcher(4, routed_quantization="composed")
    with pytest.raises(ValueError, match=r'^mxq.TokenDispatcher: routed_quantization must be "fused" or "composed"'):
        TokenDispatcher(4, routed_quantization="triton")
    with pytest.raises(ValueError, match="^mxq.TokenDispatcher: num_experts must be at least 1, got 0$"):
        TokenDispatcher(0)
    with pytest.raises(TypeError, match="^mxq.TokenDispatcher: config must be a mxq.MXFP8Config or None, got str$"):
        TokenDispatcher(4, config="rceil", routed_quantization="composed")
    with pytest.raises(ValueError, match='^mxq.TokenDispatcher: routed_quantization "unfused" was renamed "composed"'):
        TokenDispatcher(4, routed_quantization="unfused")
    renamed = {
        "quantize_routed_unfused": "renamed mxq.dispatch.quantize_routed_composed",
        "fused_op_available": "removed",
    }
    for old, new in renamed.items():
        with pytest.raises(AttributeError, match=f"^mxq.dispatch.{old} was {new}"):
            getattr(mxq.dispatch, old)
    with pytest.raises(ValueError, match=r"expert_ids must be in \[0, 4\), got values from 0 to 4$"):
        d.dispatch(x, scores, torch.tensor([[0, 4]] * 8))
    with pytest.raises(ValueError, match=r"expert_ids must be in \[0, 4\), got values from -1 to"):
        d.dispatch(x, scores, torch.tensor([[0, -1]] * 8))
    with pytest.raises(ValueError, match=r"scores and expert_ids must both have shape \(T, top_k\) with T = 8"):
        d.dispatch(x, scores[:, :1], ids)
    with pytest.raises(ValueError, match=r"^mxq.TokenDispatcher.dispatch: x must be 2-D \(T, D\)"):
        d.dispatch(x.view(2, 4, 64), scores, ids)
    with pytest.raises(ValueError, match=r"D \(x.shape\[1\]\) must be a multiple of 32, got 48"):
        d.dispatch(torch.randn(8, 48), scores, ids)
    with pytest.raises(TypeError, match="^mxq.TokenDispatcher.dispatch: expert_ids must be an integer tensor"):
        d.dispatch(x, scores, ids.float())
    with pytest.raises(TypeError, match="^mxq.TokenDispatcher.dispatch: x must be a floating-point tensor"):
        d.dispatch(x.int(), scores, ids)
    r = d.dispatch(x, scores, ids)
    with pytest.raises(ValueError, match=r"^mxq.TokenDispatcher.grouped_mm: w must have shape \(E=4, N, K=64\)"):
        d.grouped_mm(r, torch.randn(3, 32, 64))
    with pytest.raises(ValueError, match="^mxq.TokenDispatcher.grouped_mm: w's N must be a multiple of 32, got 40$"):
        d.grouped_mm(r, torch.randn(4, 40, 64))
    with pytest.raises(ValueError, match=r"^mxq.TokenDispatcher.combine_mm: h must be 2-D over the 160 padded rows"):
        d.combine_mm(r, torch.randn(16, 32), torch.randn(4, 64, 32))
    with pytest.raises(ValueError, match=r"^mxq.TokenDispatcher.combine: y must be 2-D over the 160 padded rows"):
        d.combine(r, torch.randn(16, 64))
    with pytest.raises(ValueError, match='must declare mxq_experts = "swiglu" or "linear"'):
        d.experts(r, torch.nn.Linear(64, 64))
    with pytest.raises(ValueError, match="is a local dispatcher"):
        d.wire_meshes(ep_mesh=object())
    d.wire_meshes(ep_mesh=None)
