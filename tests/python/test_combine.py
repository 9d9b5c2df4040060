"""mxq.combine and mxq.combine_score_grad (docs/numerics.md §14), the MoE layer's routed rows back to their tokens.

combine: bitwise torch's ``zeros(T, D).index_put_((index,), rows, accumulate=True)`` of the (scaled, bf16-rounded)
routed rows, on the CPU (the C++ reference) and CUDA (the kernel), on router-like, duplicate-choice, top_k = 1 and
top_k = 32 routings, with values that overflow, cancel and are signed zeros. combine_score_grad: bitwise an
independent torch model of §14's order (32 lanes, 8-element chunks, products and sums rounded, an xor butterfly),
within fp32 rounding of a float64 sum; CUDA bitwise the CPU. Errors: dtypes, shapes, top_k, ranges. opcheck (Meta,
fake tensors)."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import mxq
import torch
from helpers import DEVICES, assert_bf16_equal_nan_canonical, requires_cuda
from torch_reference import assert_bytes_equal

ROUTINGS = {  # name: (T, E, top_k, duplicates)
    "router": (96, 8, 4, False),
    "duplicate": (64, 5, 3, True),
    "top1": (40, 6, 1, False),
    "top32": (20, 40, 32, False),
}


def _routing(T, E, k, duplicates, seed=0):
    """(index (N,) int64, token_rows (T, k) int32, dest (N,) int32, Mp): a top-k routing sorted by expert (stable),
    each routed row at a distinct padded row of Mp (the rest unused)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
    if duplicates:
        ids[::3, 1] = ids[::3, 0]  # a token picks one expert twice
    order = torch.argsort(ids.flatten(), stable=True)
    N = T * k
    token_rows = torch.empty(N, dtype=torch.int64).scatter_(0, order, torch.arange(N)).view(T, k).int()
    Mp = N + 37
    dest = torch.randperm(Mp, generator=g)[:N].int()
    return order // k, token_rows, dest, Mp


def _values(rows, cols, seed, adversarial=False):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(rows, cols, generator=g) * 4
    if adversarial:
        v[::7] = torch.where(v[::7] < 0, -1.5, 1.5) * 2.0**127  # sums past bf16's range: Inf
        v[1::7, ::2] = -v[1::7, 1::2]  # exact cancellations
        v[2::7] = -0.0
        v[3::7, ::3] = 2.0**-130  # subnormals
    return v.bfloat16()


def _torch_combine(y, dest, index, T, scale):
    rows = y[dest.long()]
    if scale is not None:
        rows = (rows.float() * scale.unsqueeze(1)).to(torch.bfloat16)
    return torch.zeros(T, y.shape[1], dtype=torch.bfloat16, device=y.device).index_put_((index,), rows, accumulate=True)


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("adversarial", [False, True], ids=["random", "adversarial"])
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("device", DEVICES)
def test_combine_is_index_put_accumulate_bitwise(device, routing, adversarial, scaled):
    T, E, k, dup = ROUTINGS[routing]
    index, token_rows, dest, Mp = _routing(T, E, k, dup)
    D = 136  # 17 chunks of 8: lanes past the last chunk idle
    y = _values(Mp, D, 1, adversarial)
    scale = torch.rand(T * k, generator=torch.Generator().manual_seed(2)) * 3 if scaled else None
    if scaled and adversarial:
        scale[::5] = 0.0
    dev = lambda t: None if t is None else t.to(device)
    got = mxq.combine(dev(y), dev(dest), dev(token_rows), scale=dev(scale))
    want = _torch_combine(dev(y), dev(dest), dev(index), T, dev(scale))
    assert got.shape == (T, D) and got.dtype == torch.bfloat16
    if device == "cpu":
        assert_bytes_equal(got, want, "combine")
    else:  # torch's CUDA rounding keeps a NaN's payload, mxq writes the canonical one
        assert_bf16_equal_nan_canonical(got, want, "combine")
    if adversarial and k > 1:  # sums of two 1.5 * 2^127 overflow
        assert torch.isinf(got.float()).any()


def _score_grad_model(dout, y, dest, token_rows):
    """docs/numerics.md §14's combine_score_grad, written with torch's fp32 elementwise ops (each one IEEE-rounded):
    lane l sums the products of its chunks c = l, l+32, ... element by element, then an xor butterfly."""
    T, k = token_rows.shape
    D = dout.shape[1]
    b = y[dest.long()[token_rows.flatten().long()]].float()  # (T·k, D)
    a = dout.float().repeat_interleave(k, 0)
    prod = a * b  # rounded products
    chunks = D // 8
    lanes = torch.zeros(T * k, 32)
    for c in range(chunks):
        for e in range(8):
            lanes[:, c % 32] = lanes[:, c % 32] + prod[:, c * 8 + e]
    for off in (16, 8, 4, 2, 1):
        lanes = lanes + lanes[:, torch.arange(32) ^ off]
    return lanes[:, 0].view(T, k)


@pytest.mark.parametrize("D", [64, 136, 2048])
@pytest.mark.parametrize("routing", ["router", "duplicate", "top32"])
def test_combine_score_grad_order(routing, D):
    T, E, k, dup = ROUTINGS[routing]
    _, token_rows, dest, Mp = _routing(T, E, k, dup, seed=3)
    y, dout = _values(Mp, D, 4), _values(T, D, 5)
    got = mxq.combine_score_grad(dout, y, dest, token_rows)
    assert got.shape == (T, k) and got.dtype == torch.float32
    assert_bytes_equal(got, _score_grad_model(dout, y, dest, token_rows), "combine_score_grad")
    # And the value: within fp32 rounding of the float64 dot products.
    b = y[dest.long()[token_rows.flatten().long()]].double().view(T, k, D)
    exact = (dout.double().unsqueeze(1) * b).sum(-1)
    bound = D * 2.0**-23 * (dout.double().abs().unsqueeze(1) * b.abs()).sum(-1)
    assert ((got.double() - exact).abs() <= bound).all()


@requires_cuda
@pytest.mark.parametrize("routing", ROUTINGS)
def test_cuda_equals_cpu(routing):
    T, E, k, dup = ROUTINGS[routing]
    _, token_rows, dest, Mp = _routing(T, E, k, dup, seed=6)
    D = 7168
    y, dout = _values(Mp, D, 7, adversarial=True), _values(T, D, 8)
    scale = torch.rand(T * k)
    cuda = lambda *ts: [t.cuda() for t in ts]
    assert_bytes_equal(
        mxq.combine(*cuda(y, dest, token_rows), scale=scale.cuda()), mxq.combine(y, dest, token_rows, scale=scale), "c"
    )
    assert_bytes_equal(
        mxq.combine_score_grad(*cuda(dout, y, dest, token_rows)),
        mxq.combine_score_grad(dout, y, dest, token_rows),
        "combine_score_grad",
    )


@requires_cuda
def test_cuda_out_of_range_rows_contribute_nothing():
    """On CUDA a routed row or dest out of range is not read (no sync to report it): it adds nothing."""
    index, token_rows, dest, Mp = _routing(16, 4, 2, False)
    y = _values(Mp, 64, 9)
    bad_rows, bad_dest = token_rows.clone(), dest.clone()
    bad_rows[0, 0] = 10_000
    bad_dest[int(token_rows[1, 1])] = Mp
    got = mxq.combine(y.cuda(), bad_dest.cuda(), bad_rows.cuda()).cpu()
    keep = torch.ones(32, dtype=torch.bool)
    keep[token_rows[0, 0].long()] = False
    keep[token_rows[1, 1].long()] = False
    rows = torch.where(keep.unsqueeze(1), y[dest.long()], torch.zeros((), dtype=torch.bfloat16))
    want = torch.zeros(16, 64, dtype=torch.bfloat16).index_put_((index,), rows, accumulate=True)
    assert_bytes_equal(got, want, "combine with bad rows")
    ds = mxq.combine_score_grad(_values(16, 64, 10).cuda(), y.cuda(), bad_dest.cuda(), bad_rows.cuda()).cpu()
    assert ds[0, 0] == 0 and ds[1, 1] == 0 and (ds.flatten()[2:] != 0).any()


@pytest.mark.parametrize("device", DEVICES)
def test_empty_tokens(device):
    y = torch.zeros(8, 16, dtype=torch.bfloat16, device=device)
    rows = torch.zeros(0, 4, dtype=torch.int32, device=device)
    dest = torch.zeros(0, dtype=torch.int32, device=device)
    assert mxq.combine(y, dest, rows).shape == (0, 16)
    assert mxq.combine_score_grad(y[:0], y, dest, rows).shape == (0, 4)


def test_errors():
    _, token_rows, dest, Mp = _routing(8, 4, 2, False)
    y = _values(Mp, 64, 0)
    dout = _values(8, 64, 1)
    with pytest.raises(TypeError, match=r"mxq.combine: y must be torch.bfloat16, got torch.float32"):
        mxq.combine(y.float(), dest, token_rows)
    with pytest.raises(TypeError, match=r"dest must be torch.int32"):
        mxq.combine(y, dest.long(), token_rows)
    with pytest.raises(TypeError, match=r"token_rows must be torch.int32"):
        mxq.combine(y, dest, token_rows.long())
    with pytest.raises(TypeError, match=r"scale must be torch.float32"):
        mxq.combine(y, dest, token_rows, scale=torch.ones(16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"dest must have one entry per routed row \(T\*top_k = 16\)"):
        mxq.combine(y, dest[:-1], token_rows)
    with pytest.raises(ValueError, match=r"scale must have one entry per routed row"):
        mxq.combine(y, dest, token_rows, scale=torch.ones(15))
    with pytest.raises(ValueError, match=r"D must be a multiple of 8, got 60"):
        mxq.combine(y[:, :60].contiguous(), dest, token_rows)
    with pytest.raises(ValueError, match=r"top_k \(token_rows.shape\[1\]\) must be in \[1, 32\], got 33"):
        mxq.combine(y, torch.zeros(33, dtype=torch.int32), torch.zeros(1, 33, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"y must be a contiguous 2-D tensor"):
        mxq.combine(y.t(), dest, token_rows)
    bad = token_rows.clone()
    bad[3, 1] = 16
    with pytest.raises(ValueError, match=r"mxq.combine: token_rows\[3, 1\] = 16 is outside \[0, N=16\)"):
        mxq.combine(y, dest, bad)
    bad_dest = dest.clone()
    bad_dest[5] = -1
    with pytest.raises(ValueError, match=r"mxq.combine_score_grad: dest\[5\] = -1 is outside \[0, Mp="):
        mxq.combine_score_grad(dout, y, bad_dest, token_rows)
    with pytest.raises(ValueError, match=r"dout must be contiguous of shape \[T, D\] = \[8, 64\]"):
        mxq.combine_score_grad(dout[:4], y, dest, token_rows)
    with pytest.raises(TypeError, match=r"mxq.combine: token_rows must be a torch.Tensor, got list"):
        mxq.combine(y, dest, [0, 1])


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    _, token_rows, dest, Mp = _routing(24, 6, 3, False)
    y, dout = _values(Mp, 64, 0).to(device), _values(24, 64, 1).to(device)
    token_rows, dest = token_rows.to(device), dest.to(device)
    scale = torch.rand(72, device=device)
    torch.library.opcheck(torch.ops.mxq.combine.default, (y, dest, token_rows, scale))
    torch.library.opcheck(torch.ops.mxq.combine.default, (y, dest, token_rows))
    torch.library.opcheck(torch.ops.mxq.combine_score_grad.default, (dout, y, dest, token_rows))
