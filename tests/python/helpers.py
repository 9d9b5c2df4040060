"""Shared inputs and checks of the Python tests: random and docs/numerics.md §4 inputs, grouped offsets, byte comparisons."""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Sequence

import pytest
import torch
import torch_reference
from torch_reference import assert_bytes_equal

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Devices for tests that run on both: the CPU dispatch (the C++ reference) always, CUDA where present.
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]

QUANT_OPS = ["quantize_rowwise", "quantize_colwise", "quantize", "quantize_composed"]
OUTPUT_NAMES = {
    "quantize_rowwise": ("q_row", "s_row"),
    "quantize_colwise": ("q_col", "s_col"),
    "quantize": ("q_row", "s_row", "q_col", "s_col"),
    "quantize_composed": ("q_row", "s_row", "q_col", "s_col"),
}


def raises(exc: type[BaseException], text: str):
    """pytest.raises for an exception whose message contains ``text`` verbatim (no regex)."""
    return pytest.raises(exc, match=re.escape(text))


def op(name: str):
    return getattr(torch.ops.mxq, name)


def stable_seed(*parts) -> int:
    """A seed derived from the test's parameters, the same in every process (unlike hash() of a str)."""
    return zlib.crc32(repr(parts).encode()) & 0xFFFF


def bf16_from_bits(bits: Sequence[int]) -> torch.Tensor:
    return torch.tensor([b - 0x10000 if b >= 0x8000 else b for b in bits], dtype=torch.int16).view(torch.bfloat16)


def random_bf16(M: int, K: int, seed: int, specials: bool = False) -> torch.Tensor:
    """A bf16 (M, K) CPU tensor whose 32-element blocks span many magnitudes (each rowwise block gets its own
    exponent, so colwise blocks mix them); with ``specials``, also zeros, -0, subnormals, bf16 max, +-Inf, NaN."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g)
    exps = torch.randint(-60, 60, (M, max(K // 32, 1)), generator=g).float()
    tiny = torch.rand(exps.shape, generator=g) < 0.05  # some blocks deep in the subnormal range
    exps = torch.where(tiny, torch.full_like(exps, -130.0), exps)
    x = x * torch.exp2(exps).repeat_interleave(32, dim=1)[:, :K]
    x = x.bfloat16()
    if specials and x.numel():
        flat = x.view(-1).view(torch.int16)
        n = flat.numel()
        pool = [
            0x0000,
            0x8000,
            0x0001,
            0x8001,
            0x007F,
            0x0080,
            0x7F7F,
            0xFF7F,
            0x7F80,
            0xFF80,
            0x7FC0,
            0x7FFF,
            0x43E0,
            0xC3E0,
            0x43F0,
            0x4460,
        ]
        idx = torch.randint(0, n, (max(n // 200, 1),), generator=g)
        vals = torch.tensor(pool, dtype=torch.int32)[torch.randint(0, len(pool), idx.shape, generator=g)]
        flat[idx] = torch.where(vals >= 0x8000, vals - 0x10000, vals).to(torch.int16)
    return x


def make_offs(M: int, G: int, seed: int, tail: bool = True, align: int = 128) -> torch.Tensor:
    """G cumulative end offsets (int32, CPU), multiples of ``align``, non-decreasing; with G >= 3 at least one
    group is empty; with ``tail`` the last offset stops short of M (the uncovered tail) where M allows."""
    rng = random.Random(seed)
    units = M // align
    covered = max(units - rng.randint(1, max(units // 4, 1)), 0) if tail and units > 1 else units
    cuts = sorted(rng.randint(0, covered) for _ in range(G - 1)) + [covered]
    if G >= 3:
        cuts[1] = cuts[0]  # an empty group
    return torch.tensor([c * align for c in cuts], dtype=torch.int32)


def assert_outputs_equal(
    actual: Sequence[torch.Tensor | None],
    expected: Sequence[torch.Tensor | None],
    names: Sequence[str] | None = None,
    what: str = "",
    *,
    strides: bool = True,
) -> None:
    """The tests' one byte comparison: same dtypes, shapes, strides (unless ``strides=False``) and raw bytes, output
    by output (a mismatch reports its count, first coordinate, values and bit patterns); None matches only None."""
    names = [f"[{i}]" for i in range(len(actual))] if names is None else names
    assert len(actual) == len(expected) == len(names), (len(actual), len(expected), len(names))
    for a, e, n in zip(actual, expected, names):
        label = f"{what}{n}"
        if a is None or e is None:
            assert a is None and e is None, f"{label}: {'None' if a is None else 'a tensor'} vs {e!r:.40}"
            continue
        assert a.dtype == e.dtype, f"{label}: dtype {a.dtype} != {e.dtype}"
        assert a.shape == e.shape, f"{label}: shape {tuple(a.shape)} != {tuple(e.shape)}"
        if strides:
            assert a.stride() == e.stride(), f"{label}: strides {a.stride()} != {e.stride()}"
        assert_bytes_equal(a, e, label)


def assert_moe_outputs_equal(actual, expected, names: Sequence[str], what: str = "") -> None:
    """An MoE layer's outputs and gradients bitwise (:func:`assert_outputs_equal`, strides aside), except "d scores":
    fp32 sums of D products, which mxq.combine_score_grad adds in its own fixed order (docs/numerics.md §14) and
    torch's reduction in another, so there they agree within fp32 rounding (2^-18 of the largest)."""
    i = list(names).index("d scores")
    keep = [j for j in range(len(names)) if j != i]
    assert_outputs_equal(
        [actual[j] for j in keep], [expected[j] for j in keep], [names[j] for j in keep], what, strides=False
    )
    a, e = actual[i], expected[i]
    assert a.dtype == e.dtype == torch.float32 and a.shape == e.shape, (
        f"{what}d scores: {a.dtype} {a.shape} vs {e.dtype} {e.shape}"
    )
    tol = 2.0**-18 * float(e.abs().max()) + 1e-30
    err = float((a - e).abs().max())
    assert err <= tol, f"{what}d scores: differ by up to {err:.3g} (tolerance {tol:.3g})"


def assert_bf16_equal_nan_canonical(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    """Raw bf16 bytes equal, except that any NaN matches any NaN (payloads and signs of NaN are not specified)."""
    a, b = a.cpu(), b.cpu()
    nan = torch.isnan(a.float())
    assert torch.equal(nan, torch.isnan(b.float())), f"{name}: NaN positions differ"
    assert_bytes_equal(torch.where(nan, 0, a), torch.where(nan, 0, b), name)


# Hopper's FP8 tensor cores add each 32-deep k-step's products at a reduced precision (about 14 bits, truncated)
# before the 128-deep block's partial sum is scaled into fp32: at most ~2^-11 of the block's sum of |a_k b_k|
# (4 k-steps). Bound with a 4x margin, and on the bf16 operands (e4m3 rounding moves a magnitude by <= 2^-4).
FP8_MMA_ACCUMULATION = 2**-9


def assert_gemm_close(
    got: torch.Tensor, expected: torch.Tensor, what: str, floor: float, l1: torch.Tensor | None = None
) -> None:
    """``got`` equals the fp32 GEMM ``expected`` within accumulation order and the bf16 rounding of the output:
    |got - expected| <= 2^-7 |expected| + floor * max |expected| (+ FP8_MMA_ACCUMULATION * l1, the sum of
    |a_k b_k| behind each element, for a GEMM on FP8 tensor cores), element by element."""
    got, expected = got.float().cpu(), expected.float().cpu()
    tol = 2**-7 * expected.abs() + floor * expected.abs().max()
    if l1 is not None:
        tol = tol + FP8_MMA_ACCUMULATION * l1.float().cpu()
    err = (got - expected).abs()
    bad = err > tol
    worst = int((err - tol).argmax())
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} of {bad.numel()} outside tolerance; worst at flat index {worst}: got "
        f"{got.flatten()[worst].item():.6g}, expected {expected.flatten()[worst].item():.6g}, tolerance "
        f"{tol.flatten()[worst].item():.3g}" + ("" if l1 is None else f", l1 {l1.flatten()[worst].item():.4g}")
    )


def sqnr(ref: torch.Tensor, out: torch.Tensor) -> float:
    """20·log10(‖ref‖ / ‖ref − out‖) in dB."""
    ref, out = ref.detach().float(), out.detach().float()
    return 20 * math.log10(ref.norm().item() / (ref - out).norm().item())


# ---- the training layers ----

BARS = (27.0, 25.0, 24.0)  # the layers' SQNR bars: output, input grad, weight grad (dB)
WEIGHT_SCALINGS = ["32x32", "1x32"]


def check_backends_and_bars(run, expected, make_config, weight_scaling: str, device) -> tuple[float, ...]:
    """The layers' common check: ``run(config)`` -> (y, dx, dW) is bitwise the same for every activation backend and
    x_colwise mode, and within BARS of ``expected`` (the high-precision layer's). Returns the SQNR figures."""
    results = {}
    for backend in ("fused", "composed"):
        for x_colwise in ("high_precision", "quantized"):
            config = make_config(
                weight_scaling=weight_scaling, activation_quantization_backend=backend, x_colwise=x_colwise
            )
            results[backend, x_colwise] = run(config)
    base = results["fused", "high_precision"]
    for key, got in results.items():
        assert_outputs_equal(got, base, ("y", "dx", "dW"), f"{key} vs ('fused', 'high_precision'): ", strides=False)
    figures = tuple(sqnr(exp, got) for got, exp in zip(base, expected))
    for s, bar, n in zip(figures, BARS, ("output", "input grad", "weight grad")):
        assert s >= bar, f"{n}: SQNR {s:.2f} dB < {bar} dB (weight_scaling={weight_scaling}, {device})"
    return figures


def record_ops(monkeypatch) -> list:
    """Records every call the layers make to the extension's ops: they all go through mxq.ops's wrappers, which call
    the overloads bound in mxq.ops; each is replaced by a recorder. Returns the list of (op name, args, kwargs)."""
    import mxq.ops

    calls = []
    for attr, value in list(vars(mxq.ops).items()):
        if attr.startswith("_") and isinstance(value, torch._ops.OpOverload):
            name = value._schema.name.split("::")[1]

            def call(*args, _op=value, _name=name, **kwargs):
                calls.append((_name, args, kwargs))
                return _op(*args, **kwargs)

            monkeypatch.setattr(mxq.ops, attr, call)
    return calls


def check_scaling_mode_explicit(calls, scaling_mode: str) -> None:
    """Every quantize op got ``scaling_mode`` as an explicit argument, every dequantize its layout, and every op its
    format (the training layers' is MXFP8)."""
    assert calls
    for name, args, kwargs in calls:
        if name == "quantize_weight":  # (w, scaling_mode, weight_scaling, rowwise, colwise, format)
            assert len(args) == 6 and args[1] == scaling_mode and args[5] == "mxfp8", (name, args[1:])
        elif name == "quantize_routed":  # (x, index, counts, scale, scaling_mode, rowwise, colwise, format)
            assert len(args) == 8 and args[4] == scaling_mode and args[7] == "mxfp8", (name, args[4:])
        elif name.startswith("quantize"):  # (x, block_size, scaling_mode, offs, format)
            assert len(args) == 5 and args[1:3] == (32, scaling_mode) and args[4] == "mxfp8", (name, args[1:])
        elif name == "dequantize":  # (q, scales, offs, layout, format)
            assert len(args) == 5 and args[3] in ("blocked", "m_groups", "k_groups"), (name, args[2:])


def reference_outputs(name: str, x: torch.Tensor, mode: str, offs: torch.Tensor | None) -> tuple:
    """The pure-torch reference's outputs of op ``name`` (subset of the four)."""
    q_row, s_row, q_col, s_col = torch_reference.quantize(x.cpu(), mode, None if offs is None else offs.cpu())
    if name == "quantize_rowwise":
        # s_row does not depend on offs for the supported 128-multiple groups (M-groups == dense).
        return q_row, s_row
    if name == "quantize_colwise":
        return q_col, s_col
    return q_row, s_row, q_col, s_col


# ---- docs/numerics.md §4: the special-value blocks, byte-exact (bf16 input) ----

ONE = 0x3F80
BF16_MAX = 0x7F7F
INF = 0x7F80
NAN = 0x7FC0


def _alt(pos: int) -> list[int]:
    """+v at even positions, -v at odd ones."""
    return [pos if i % 2 == 0 else pos | 0x8000 for i in range(32)]


def _alt_bytes(pos: int, neg: int) -> list[int]:
    return [pos if i % 2 == 0 else neg for i in range(32)]


def _first(first: int, rest: int) -> list[int]:
    return [first] + [rest] * 31


# (name, 32 bf16 bit patterns, (RCEIL scale, 32 data bytes), (FLOOR scale, 32 data bytes))
SPEC4_CASES = [
    ("all 0", [0] * 32, (0, [0x00] * 32), (0, [0x00] * 32)),
    ("all 2^-126", [0x0080] * 32, (0, [0x40] * 32), (0, [0x40] * 32)),
    ("1s + Inf", _first(INF, ONE), (255, [0x7F] * 32), (255, [0x7F] * 32)),
    ("1s + -Inf", _first(INF | 0x8000, ONE), (255, [0x7F] * 32), (255, [0x7F] * 32)),
    ("1s + NaN", _first(NAN, ONE), (255, [0x7F] * 32), (255, [0x7F] * 32)),
    ("all NaN", [NAN] * 32, (255, [0x7F] * 32), (255, [0x7F] * 32)),
    ("all +-448", _alt(0x43E0), (127, _alt_bytes(0x7E, 0xFE)), (127, _alt_bytes(0x7E, 0xFE))),
    ("all +-bf16 max", _alt(BF16_MAX), (247, _alt_bytes(0x78, 0xF8)), (246, _alt_bytes(0x7E, 0xFE))),
    ("all +-smallest subnormal", _alt(0x0001), (0, _alt_bytes(0x08, 0x88)), (0, _alt_bytes(0x08, 0x88))),
    ("1s + smallest subnormal", _first(0x0001, ONE), (119, _first(0x00, 0x78)), (119, _first(0x00, 0x78))),
    ("1s + -smallest subnormal", _first(0x8001, ONE), (119, _first(0x80, 0x78)), (119, _first(0x80, 0x78))),
    ("1s + bf16 max", _first(BF16_MAX, ONE), (247, _first(0x78, 0x00)), (246, _first(0x7E, 0x00))),
    ("all +-480", _alt(0x43F0), (128, _alt_bytes(0x77, 0xF7)), (127, _alt_bytes(0x7E, 0xFE))),
    ("all 3.5", [0x4060] * 32, (120, [0x7E] * 32), (120, [0x7E] * 32)),
    ("all 512", [0x4400] * 32, (128, [0x78] * 32), (128, [0x78] * 32)),
    # docs/numerics.md §3: amax = 448 * 2^-127 (bf16 0x0460) gives RCEIL 0, the next bf16 value gives 1.
    ("all 448*2^-127", [0x0460] * 32, (0, None), (None, None)),
    ("all next bf16 after 448*2^-127", [0x0461] * 32, (1, None), (None, None)),
]


def spec4_matrix(M: int = 128, K_multiple: int = 128) -> tuple[torch.Tensor, list[int]]:
    """x (M, K) bf16 whose every row holds the docs/numerics.md §4 blocks one after another along K (repeated to fill K up to
    a multiple of K_multiple); returns x and, per 32-column block, the index of its case."""
    n = len(SPEC4_CASES)
    blocks = -(-n * 32 // K_multiple) * K_multiple // 32
    case_of_block = [b % n for b in range(blocks)]
    bits = [v for c in case_of_block for v in SPEC4_CASES[c][1]]
    row = bf16_from_bits(bits)
    return row.unsqueeze(0).repeat(M, 1).contiguous(), case_of_block


def _parameters(owner) -> list:
    return list(owner.parameters()) if isinstance(owner, torch.nn.Module) else list(owner)


def assert_moe_graph_step_matches_eager(d, weights, T: int, top_k: int) -> None:
    """A training step of an MoE layer through the token dispatcher ``d`` (a router, dispatch, SwiGLU experts on
    ``weights`` (w1, w2, w3), combine, backward, SGD), captured in a CUDA graph and replayed on new tokens, equals the
    same steps run eagerly (:func:`assert_graph_replay_matches_eager`): no host sync anywhere on the path."""
    E, _, D = weights[0].shape
    torch.manual_seed(0)
    router = torch.nn.Linear(D, E, bias=False, device="cuda")

    def loss_of(ws, x, t):
        scores, ids = router(x).float().softmax(-1).topk(top_k, dim=-1)
        y = d.swiglu(d.dispatch(x, scores, ids), *ws)
        return (y.float() - t).square().mean()

    data = [(torch.randn(T, D, device="cuda"), torch.randn(T, D, device="cuda")) for _ in range(4)]
    eager_ws = [w.clone().requires_grad_(True) for w in weights]
    graph_ws = [w.clone().requires_grad_(True) for w in weights]
    assert_graph_replay_matches_eager(loss_of, eager_ws, graph_ws, data, 0.5)


def assert_graph_replay_matches_eager(loss_of, eager, graphed, data, lr: float) -> None:
    """A training step (``loss_of(owner, x, t)``, backward, SGD at lr) captured in a CUDA graph and replayed over
    data equals the same steps run eagerly: losses within 1%, final parameters within rtol 1e-2. eager and graphed:
    modules or parameter lists with equal values (graphed is restored to them after its warm-up and capture)."""

    def step(owner, opt, x, t):
        opt.zero_grad(set_to_none=False)
        loss = loss_of(owner, x, t)
        loss.backward()
        opt.step()
        return loss

    opt_e = torch.optim.SGD(_parameters(eager), lr=lr)
    losses_e = [step(eager, opt_e, x, t).item() for x, t in data]
    opt_g = torch.optim.SGD(_parameters(graphed), lr=lr)
    init = [p.detach().clone() for p in _parameters(graphed)]
    static_x, static_t = data[0][0].clone(), data[0][1].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm-up on a side stream (allocator, lazy init)
            step(graphed, opt_g, static_x, static_t)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(graphed, opt_g, static_x, static_t)
    with torch.no_grad():  # undo the warm-up and capture updates, then replay the same data as the eager run
        for p, p0 in zip(_parameters(graphed), init):
            p.copy_(p0)
    losses_g = []
    for x, t in data:
        static_x.copy_(x)
        static_t.copy_(t)
        graph.replay()
        losses_g.append(static_loss.item())
    assert losses_g == pytest.approx(losses_e, rel=1e-2), (losses_g, losses_e)
    for p, q in zip(_parameters(graphed), _parameters(eager)):
        torch.testing.assert_close(p, q, rtol=1e-2, atol=1e-3)


def composed_moe(x, scores, expert_ids, w1, w2, w3, config):
    """An MoE layer from today's separate pieces, what mxq.TokenDispatcher must equal bitwise: sort by expert, gather
    x[index], mxq.grouped_mm for each expert GEMM (it pads each group to the format's block and unpads), the gate
    score multiply rounded to bf16, a deterministic scatter-add; in x's dtype."""
    import torch.nn.functional as F
    from mxq import grouped_mm

    k = expert_ids.shape[1]
    flat = expert_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    index = order // k
    s = scores.reshape(-1).float()[order]
    offs = torch.bincount(flat, minlength=w1.shape[0]).cumsum(0).to(torch.int32)
    xr = x.to(torch.bfloat16)[index]
    h = F.silu(grouped_mm(xr, w1, offs, config=config)) * grouped_mm(xr, w3, offs, config=config)
    y = grouped_mm(h, w2, offs, config=config)
    y_scaled = (y.float() * s.unsqueeze(1)).to(torch.bfloat16)
    return y_scaled.new_zeros(x.shape[0], y.shape[1]).index_put_((index,), y_scaled, accumulate=True).to(x.dtype)
