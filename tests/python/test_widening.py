"""Shapes as training produces them (docs/numerics.md §5-§6, §9): M, K and token groups any multiple of 32, fp16
and fp32 inputs. Every op on both devices against the pure-torch reference (tests/python/torch_reference.py), byte for byte."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import mxq
import torch
import torch_reference as T
from helpers import DEVICES, OUTPUT_NAMES, QUANT_OPS, assert_outputs_equal, make_offs, op, random_bf16, stable_seed

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (M, K): 32-multiples that are not 128-multiples on either axis, a partial last tile, and the widths.
RAGGED = [(32, 32), (96, 160), (160, 2880), (288, 96), (544, 2880)]


def random_input(M: int, K: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values spanning many magnitudes with specials (NaN, +-Inf, +-0, subnormals of the type, its max)."""
    g = torch.Generator().manual_seed(seed)
    info = torch.finfo(dtype)
    x = torch.randn(M, K, generator=g)
    lo, hi = (-14, 14) if dtype == torch.float16 else (-60, 60)
    exps = torch.randint(lo, hi, (M, max(K // 32, 1)), generator=g).float()
    x = (x * torch.exp2(exps).repeat_interleave(32, dim=1)[:, :K]).to(dtype)
    if x.numel():
        flat = x.view(-1)
        pool = torch.tensor(
            [0.0, -0.0, float("nan"), float("inf"), float("-inf"), info.max, -info.max, info.smallest_normal, 448.0],
            dtype=dtype,
        )
        n = flat.numel()
        idx = torch.randint(0, n, (max(n // 150, 1),), generator=g)
        flat[idx] = pool[torch.randint(0, len(pool), idx.shape, generator=g)]
        sub = torch.randint(0, n, (max(n // 300, 1),), generator=g)
        flat[sub] = info.smallest_normal * torch.rand(sub.shape, generator=g).to(dtype)  # subnormals
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_op_every_dtype(shape, dtype, device):
    M, K = shape
    x = random_input(M, K, dtype, stable_seed(shape, str(dtype)))
    for mode in ("rceil", "floor"):
        want = T.quantize(x, mode)
        for name in QUANT_OPS:
            got = op(name)(x.to(device), 32, mode)
            expected = {"quantize_rowwise": want[:2], "quantize_colwise": want[2:]}.get(name, want)
            assert_outputs_equal(got, expected, OUTPUT_NAMES[name], f"{name}/{mode}/{M}x{K}/{dtype}/{device}/")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("G", [1, 3, 8, 64])
@pytest.mark.parametrize("tail", [False, True])
def test_groups_any_multiple_of_32(G, tail, device):
    M, K = 2080, 288  # neither a multiple of 128
    x = random_bf16(M, K, seed=stable_seed(G, tail), specials=True)
    offs = make_offs(M, G, seed=stable_seed("offs", G, tail), tail=tail, align=32)
    want = T.quantize(x, "rceil", offs)
    for name in QUANT_OPS:
        got = op(name)(x.to(device), 32, "rceil", offs.to(device))
        expected = {"quantize_rowwise": want[:2], "quantize_colwise": want[2:]}.get(name, want)
        assert_outputs_equal(got, expected, OUTPUT_NAMES[name], f"{name}/G={G}/{device}/")
    # Dequantize reads both grouped layouts back.
    q_row, s_row, q_col, s_col = op("quantize")(x.to(device), 32, "rceil", offs.to(device))
    o = offs.to(device)
    for q, s, layout in ((q_row, s_row, "m_groups"), (q_col.t(), s_col, "k_groups")):
        got = mxq.dequantize(q, s, o, layout=layout).cpu()
        want_d = T.dequantize(q.cpu(), s.cpu(), offs, layout)
        nan = torch.isnan(want_d.float())
        assert torch.equal(torch.isnan(got.float()), nan), layout
        assert torch.equal(torch.where(nan, 0, got).view(torch.int16), torch.where(nan, 0, want_d).view(torch.int16))


@pytest.mark.parametrize("device", DEVICES)
def test_m_groups_layout_example(device):
    # docs/numerics.md §6: M=512, K=256, offs=[32,160,160]: S_row[40, 3] (row 8 of group 1) lands at byte 1155,
    # the allocation has 896 rows, the tail's segment starts at blocked row 256.
    x = torch.zeros(512, 256, dtype=torch.bfloat16)
    x[40, 96:128] = 1.0  # block (40, 3): amax 1 -> RCEIL scale 119
    offs = torch.tensor([32, 160, 160], dtype=torch.int32)
    _, s_row = op("quantize_rowwise")(x.to(device), 32, "rceil", offs.to(device))
    assert tuple(s_row.shape) == (896, 8)
    flat = s_row.cpu().view(torch.uint8).reshape(-1)
    assert int(flat[1155]) == 119
    assert int(flat.count_nonzero()) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_empty_groups_and_all_tail(device):
    M, K = 256, 96
    x = random_bf16(M, K, seed=5)
    for values in ((0,), (0, 0, 0), (256,), (32, 32, 256)):
        offs = torch.tensor(values, dtype=torch.int32)
        got = op("quantize")(x.to(device), 32, "rceil", offs.to(device))
        assert_outputs_equal(got, T.quantize(x, "rceil", offs), OUTPUT_NAMES["quantize"], f"{values}/{device}/")
