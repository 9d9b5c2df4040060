"""FP8 blockwise (docs/numerics.md §13) through the torch ops and the Python API: every output byte for byte
against the pure-torch reference written from the spec (blockwise_reference.py), on the CPU dispatch (the C++
reference) and on CUDA; layouts and strides; grouped == dense; routed == quantize of the padded tensor; weights;
dequantize; the error messages; opcheck, Meta, torch.compile(fullgraph=True), CUDA graphs. On CUDA with torchao 0.18:
byte equality with its blockwise Triton quantizers on finite input and the stated divergence on non-finite input;
and torch.nn.functional.scaled_mm taking mxq's outputs as they are (forward, dgrad, wgrad)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import blockwise_reference as bref
import mxq
import torch
from helpers import (
    DEVICES,
    assert_bf16_equal_nan_canonical,
    assert_gemm_close,
    assert_outputs_equal,
    make_offs,
    raises,
    random_bf16,
    requires_cuda,
    stable_seed,
)
from torch_reference import assert_bytes_equal

FMT = "fp8_blockwise"
NAMES = ("q_row", "s_row", "q_col", "s_col")
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
MODES = ["fp32", "rceil"]
SHAPES = [(128, 128), (256, 384), (384, 1024), (128, 640)]
DEQUANT_OPCHECK_TESTS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def dtype_id(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


# ---- inputs ----


def random_input(M: int, K: int, dtype: torch.dtype, seed: int, specials: bool = False) -> torch.Tensor:
    """x (M, K) of ``dtype`` on the CPU whose blocks span many magnitudes (each 32-column piece of a row its own
    exponent, so the 128-element blocks of both axes mix them); with ``specials`` also zeros, subnormals, the dtype's
    extremes, +-Inf and NaN."""
    if dtype == torch.bfloat16:
        return random_bf16(M, K, seed, specials=specials)
    g = torch.Generator().manual_seed(seed)
    lo, hi = (-20, 12) if dtype == torch.float16 else (-60, 60)
    exps = torch.randint(lo, hi, (M, max(K // 32, 1)), generator=g).float()
    x = (torch.randn(M, K, generator=g) * torch.exp2(exps).repeat_interleave(32, dim=1)[:, :K]).to(dtype)
    if specials and x.numel():
        info = torch.finfo(dtype)
        pool = torch.tensor(
            [0.0, -0.0, info.smallest_normal / 4, -info.smallest_normal, info.max, -info.max, 448.0, 480.0]
            + [float("inf"), float("-inf"), float("nan"), 1e-13 if dtype == torch.float32 else 0.0],
            dtype=dtype,
        )
        idx = torch.randint(0, x.numel(), (max(x.numel() // 200, 1),), generator=g)
        x.view(-1)[idx] = pool[torch.randint(0, len(pool), idx.shape, generator=g)]
    return x


def adversarial(dtype: torch.dtype, M: int = 256, K: int = 1024) -> torch.Tensor:
    """x (M, K) whose 1x128 blocks are chosen edge cases (row r, block j holds case (r + j) % n, so every colwise
    block mixes all of them): zero and -0 blocks, a lone value, subnormals of the dtype, the dtype's max, a max among
    values that underflow, amax below the 1e-12 floor, NaN / +Inf / -Inf in an otherwise finite block, exact 448,
    e4m3 rounding ties, a plain normal block."""
    info = torch.finfo(dtype)
    tiny = info.smallest_normal * info.eps  # the smallest subnormal
    alt = torch.tensor([1.0, -1.0]).repeat(64)
    ramp = torch.arange(1, 129, dtype=torch.float64)
    cases = [
        torch.zeros(128),
        -torch.zeros(128),
        torch.cat([torch.tensor([1.0]), torch.zeros(127)]),
        alt * tiny,
        alt * info.max,
        torch.cat([torch.tensor([info.max]), torch.full((127,), info.smallest_normal)]),
        alt * 5e-13 if dtype != torch.float16 else alt * tiny * 3,
        torch.cat([torch.tensor([float("nan")]), torch.ones(127)]),
        torch.cat([torch.ones(127), torch.tensor([float("inf")])]),
        torch.cat([torch.tensor([float("-inf")]), alt[:127] * 3]),
        alt * 448.0,
        (ramp * 0.5 + 0.25).float(),  # many products on e4m3 rounding ties under m = 1
        torch.randn(128, generator=torch.Generator().manual_seed(7)) * 3,
    ]
    n = len(cases)
    x = torch.empty(M, K, dtype=dtype)
    for r in range(M):
        for j in range(K // 128):
            x[r, j * 128 : (j + 1) * 128] = cases[(r + j) % n].to(dtype)
    return x


def quantize(x: torch.Tensor, mode: str = "fp32", **kwargs) -> mxq.MXTensors:
    return mxq.quantize(x, format=FMT, scaling_mode=mode, **kwargs)


def check_layouts(t: mxq.MXTensors, M: int, K: int) -> None:
    """The contract's layouts (docs/numerics.md §13.3): q_row (M, K) row-major; s_row fp32 (M, K/128) strides (1, M); q_col the
    (K, M) array seen as (M, K), strides (1, M); s_col fp32 (K, M/128) strides (1, K)."""
    if t.q_row is not None:
        assert (t.q_row.dtype, t.q_row.shape, t.q_row.stride()) == (torch.float8_e4m3fn, (M, K), (K, 1))
        assert (t.s_row.dtype, t.s_row.shape, t.s_row.stride()) == (torch.float32, (M, K // 128), (1, M))
    if t.q_col is not None:
        assert (t.q_col.dtype, t.q_col.shape, t.q_col.stride()) == (torch.float8_e4m3fn, (M, K), (1, M))
        assert (t.s_col.dtype, t.s_col.shape, t.s_col.stride()) == (torch.float32, (K, M // 128), (1, K))


# ---- quantize: dense ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_quantize_matches_reference(dtype, mode, shape, device):
    M, K = shape
    for specials in (False, True):
        x = random_input(M, K, dtype, stable_seed(M, K, dtype_id(dtype), mode, specials), specials=specials)
        got = quantize(x.to(device), mode)
        check_layouts(got, M, K)
        assert_outputs_equal(got, bref.quantize(x, mode), NAMES, f"{dtype_id(dtype)}/{mode}/specials={specials}/")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_adversarial_blocks_match_reference(dtype, mode, device):
    x = adversarial(dtype)
    assert_outputs_equal(quantize(x.to(device), mode), bref.quantize(x, mode), NAMES, f"{dtype_id(dtype)}/{mode}/")


@pytest.mark.parametrize("device", DEVICES)
def test_default_scaling_mode_is_fp32(device):
    x = random_input(256, 256, torch.bfloat16, seed=3, specials=True)
    assert_outputs_equal(mxq.quantize(x.to(device), format=FMT), bref.quantize(x, "fp32"), NAMES)
    # The raw op's default stays MXFP8's "rceil" (schema backward compatible); the wrapper always passes its rule.
    op_rceil = torch.ops.mxq.quantize(x.to(device), 128, format=FMT)
    assert_outputs_equal(op_rceil, bref.quantize(x, "rceil"), NAMES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_nonfinite_blocks_are_nan(mode, device):
    """A block holding NaN or +-Inf: d = NaN (0x7FC00000) and every data byte 0x7F, on both axes; its neighbours are
    untouched."""
    x = random_input(256, 256, torch.bfloat16, seed=4)
    x[5, 130] = float("nan")  # rowwise block (5, 1), colwise block (130, 0)
    x[200, 7] = float("-inf")  # rowwise block (200, 0), colwise block (7, 1)
    t = quantize(x.to(device), mode)
    s_row, s_col = t.s_row.cpu().view(torch.int32), t.s_col.cpu().view(torch.int32)
    q_row, q_col = t.q_row.cpu().view(torch.uint8), t.q_col.cpu().view(torch.uint8)
    nan_bits = bref.FACTOR_NAN_BITS
    assert int(s_row[5, 1]) == nan_bits and int(s_row[200, 0]) == nan_bits
    assert int(s_col[130, 0]) == nan_bits and int(s_col[7, 1]) == nan_bits
    assert bool((q_row[5, 128:256] == 0x7F).all()) and bool((q_row[200, :128] == 0x7F).all())
    assert bool((q_col[:128, 130] == 0x7F).all()) and bool((q_col[128:, 7] == 0x7F).all())
    assert int(torch.isnan(t.s_row.cpu()).sum()) == 2 and int(torch.isnan(t.s_col.cpu()).sum()) == 2


@pytest.mark.parametrize("device", DEVICES)
def test_one_axis_equals_fused(device):
    x = random_input(384, 512, torch.bfloat16, seed=5, specials=True).to(device)
    both = quantize(x)
    assert_outputs_equal(quantize(x, colwise=False), (both.q_row, both.s_row, None, None), NAMES, "rowwise/")
    assert_outputs_equal(quantize(x, rowwise=False), (None, None, both.q_col, both.s_col), NAMES, "colwise/")


@pytest.mark.parametrize("device", DEVICES)
def test_zero_rows(device):
    x = torch.zeros(0, 256, dtype=torch.bfloat16, device=device)
    t = quantize(x)
    check_layouts(t, 0, 256)
    assert t.s_col.shape == (256, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_and_out(device):
    x = random_input(256, 384, torch.float32, seed=6, specials=True).to(device)
    first = quantize(x)
    out = mxq.empty_quantized(x, format=FMT)
    for t in out:  # every byte must be written
        torch.empty(0, dtype=torch.uint8, device=device).set_(t.untyped_storage()).fill_(0xA5)
    got = quantize(x, out=out)
    assert got is out or tuple(got) == tuple(out)
    assert_outputs_equal(out, first, NAMES, "out/")
    assert_outputs_equal(quantize(x), first, NAMES, "again/")


# ---- grouped: offs validated, outputs the dense ones ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("G", [1, 4, 8])
def test_grouped_equals_dense(G, device):
    M, K = 1024, 384
    x = random_input(M, K, torch.bfloat16, seed=stable_seed("grouped", G), specials=True)
    offs = make_offs(M, G, seed=G)  # multiples of 128, an empty group, an uncovered tail
    dense = bref.quantize(x, "fp32")
    xd, od = x.to(device), offs.to(device)
    assert_outputs_equal(quantize(xd, offs=od), dense, NAMES, f"G={G}/")
    assert_outputs_equal(quantize(xd, offs=od, colwise=False), (*dense[:2], None, None), NAMES, f"G={G}/row/")
    assert_outputs_equal(quantize(xd, offs=od, rowwise=False), (None, None, *dense[2:]), NAMES, f"G={G}/col/")


def test_grouped_misaligned_offs_raise_on_cpu():
    x = torch.zeros(256, 128, dtype=torch.bfloat16)
    with raises(ValueError, "mxq.quantize: offs[0]=64 is not a multiple of 128"):
        quantize(x, offs=torch.tensor([64, 256], dtype=torch.int32))
    # 32-aligned offsets are fine for MXFP8, not for FP8 blockwise
    mxq.quantize(x, offs=torch.tensor([64, 256], dtype=torch.int32))


# ---- dequantize ----


def _deq_bound(x: torch.Tensor, d: torch.Tensor, axis: int) -> torch.Tensor:
    """|x - deq| bound per element for finite x: half an e4m3 ulp relative (2^-4), an e4m3 subnormal step at the
    block's factor (2^-9 d), and the bf16 rounding of the output (2^-8 relative)."""
    dd = d.float().repeat_interleave(128, dim=axis)
    return x.abs() * (2**-4 + 2**-7) + dd * 2**-9


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_dequantize(dtype, mode, device):
    M, K = 256, 640
    x = random_input(M, K, dtype, seed=stable_seed("deq", dtype_id(dtype), mode), specials=True)
    t = quantize(x.to(device), mode)
    row = mxq.dequantize_rowwise(t.q_row, t.s_row, format=FMT)
    col = mxq.dequantize_colwise(t.q_col, t.s_col, format=FMT)
    assert (row.dtype, row.shape, row.stride()) == (torch.bfloat16, (M, K), (K, 1))
    assert (col.dtype, col.shape, col.stride()) == (torch.bfloat16, (M, K), (1, M))
    assert_bf16_equal_nan_canonical(row, bref.dequantize(t.q_row, t.s_row), "row")
    assert_bf16_equal_nan_canonical(col, bref.dequantize(t.q_col.t(), t.s_col).t(), "col")
    # grouped factors are the dense ones: offs is not read
    offs = make_offs(M, 2, seed=1).to(device)
    assert_bytes_equal(mxq.dequantize_rowwise(t.q_row, t.s_row, offs, format=FMT), row, "row offs")
    assert_bytes_equal(mxq.dequantize_colwise(t.q_col, t.s_col, offs, format=FMT), col, "col offs")
    # the round trip on finite input, within the format's error
    xf = random_input(M, K, dtype, seed=stable_seed("deq-finite", dtype_id(dtype), mode)).float()
    t = quantize(xf.to(dtype).to(device), mode)
    row = mxq.dequantize_rowwise(t.q_row, t.s_row, format=FMT).cpu().float()
    col = mxq.dequantize_colwise(t.q_col, t.s_col, format=FMT).cpu().float()
    assert bool(((row - xf).abs() <= _deq_bound(xf, t.s_row.cpu(), 1)).all())
    assert bool(((col - xf).abs() <= _deq_bound(xf.t(), t.s_col.cpu(), 1).t()).all())


# ---- weights: 128x128 tiles ----

WEIGHT_SHAPES = [(128, 128), (256, 640), (640, 256), (2, 256, 384), (3, 384, 128)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", WEIGHT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_quantize_weight_matches_reference(dtype, mode, shape, device):
    N, K = shape[-2:]
    w = random_input(N * (shape[0] if len(shape) == 3 else 1), K, dtype, seed=stable_seed(shape, mode), specials=True)
    w = w.reshape(shape)
    got = mxq.quantize_weight(w.to(device), format=FMT, scaling_mode=mode)
    expected = bref.quantize_weight(w, mode)
    assert_outputs_equal(got, expected, NAMES, f"{shape}/{mode}/")
    lead = shape[:-2]
    tn, tk = N // 128, K // 128
    assert got.q_row.stride() == (*((N * K,) if lead else ()), K, 1)
    assert got.q_col.stride() == (*((N * K,) if lead else ()), 1, N)
    assert got.s_row.shape == (*lead, tn, bref.round_up(tk, 4)) and got.s_row.is_contiguous()
    assert got.s_col.shape == (*lead, tk, bref.round_up(tn, 4)) and got.s_col.is_contiguous()
    # one factor per tile serves both axes: q_col's bytes are q_row's, s_col is s_row's tile matrix transposed, the
    # padding factors 0
    assert_bytes_equal(got.q_col, got.q_row, "q_col == q_row")
    assert_bytes_equal(got.s_col[..., :tn].transpose(-2, -1), got.s_row[..., :tk], "s_col == s_row^T")
    assert not bool(got.s_row[..., tk:].cpu().view(torch.int32).any())
    assert not bool(got.s_col[..., tn:].cpu().view(torch.int32).any())


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_weight_defaults_and_axes(device):
    w = random_input(256, 384, torch.bfloat16, seed=8).reshape(1, 256, 384).to(device)
    both = mxq.quantize_weight(w, format=FMT)  # weight_scaling "128x128", scaling_mode "fp32"
    assert_outputs_equal(both, bref.quantize_weight(w.cpu(), "fp32"), NAMES)
    row = mxq.quantize_weight(w, format=FMT, colwise=False)
    col = mxq.quantize_weight(w, format=FMT, rowwise=False, weight_scaling="128x128")
    assert_outputs_equal(row, (both.q_row, both.s_row, None, None), NAMES, "rowwise/")
    assert_outputs_equal(col, (None, None, both.q_col, both.s_col), NAMES, "colwise/")


# ---- routed: quantize of the padded tensor ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_scale", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("mode", MODES)
def test_quantize_routed_equals_padded_quantize(mode, with_scale, device):
    T, K, N, E = 200, 256, 300, 5
    g = torch.Generator().manual_seed(stable_seed("routed", mode, with_scale))
    x = random_input(T, K, torch.bfloat16, seed=9, specials=True)
    counts = torch.bincount(torch.randint(0, E - 1, (N,), generator=g), minlength=E)  # the last expert empty
    index = torch.randint(0, T, (N,), generator=g)
    scale = torch.rand(N, generator=g) * 2 if with_scale else None
    padded, offs_p, dest = bref.padded_routed(x, index, counts, scale)
    got = mxq.quantize_routed(
        x.to(device),
        index.to(device),
        counts.to(device),
        scale=None if scale is None else scale.to(device),
        scaling_mode=mode,
        format=FMT,
    )
    Mp = bref.round_up(N + 127 * E, 128)
    assert padded.shape == (Mp, K)
    check_layouts(mxq.MXTensors(*got[:4]), Mp, K)
    assert_outputs_equal(got[:4], bref.quantize(padded, mode), NAMES, "routed/")
    assert_bytes_equal(got.offs_p, offs_p, "offs_p")
    assert_bytes_equal(got.dest, dest, "dest")
    # and the op's own grouped quantize of that padded tensor
    assert_outputs_equal(got[:4], quantize(padded.to(device), mode, offs=offs_p.to(device)), NAMES, "vs quantize/")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_scale", [False, True], ids=["plain", "scaled"])
def test_quantize_routed_composed_equals_the_one_pass_op(with_scale, device):
    """mxq.dispatch.quantize_routed_composed (gather, scale, pad to 128 on mxq.moe.padded_row_space, grouped quantize)
    gives the one-pass op's bytes, offs_p and dest: the baseline the benchmark's routed_unfused rows time."""
    T, K, N, E = 160, 384, 260, 4
    g = torch.Generator().manual_seed(stable_seed("routed composed", with_scale))
    x = random_input(T, K, torch.bfloat16, seed=10, specials=True).to(device)
    counts = torch.bincount(torch.randint(1, E, (N,), generator=g), minlength=E).to(device)  # expert 0 empty
    index = torch.randint(0, T, (N,), generator=g).to(device)
    scale = (torch.rand(N, generator=g) * 2).to(device) if with_scale else None
    fused = mxq.quantize_routed(x, index, counts, scale=scale, format=FMT)
    composed = mxq.dispatch.quantize_routed_composed(x, index, counts, scale=scale, format=FMT)
    assert_outputs_equal(composed[:4], fused[:4], NAMES, "composed/")
    assert_bytes_equal(composed.offs_p, fused.offs_p, "offs_p")
    assert_bytes_equal(composed.dest, fused.dest, "dest")


# ---- errors: each names the op, the argument, the rule and the value ----


def _x(M=256, K=256):
    return torch.zeros(M, K, dtype=torch.bfloat16)


def _out_with_contiguous_s_row():
    out = mxq.empty_quantized(_x(), format=FMT)
    return quantize(_x(), out=out._replace(s_row=out.s_row.contiguous()))


ERRORS = [
    (
        _out_with_contiguous_s_row,
        "mxq.quantize: s_row must have strides (1, M) (s_row.t() contiguous, as quantize returns it), got [2, 1]",
    ),
    (
        lambda: mxq.quantize(_x(), format="nvfp4"),
        'mxq.quantize: format must be "mxfp8" or "fp8_blockwise", got "nvfp4"',
    ),
    (
        lambda: mxq.quantize(_x(), scaling_mode="fp32"),
        'mxq.quantize: scaling_mode must be "rceil" or "floor", got "fp32" ("fp32" is FP8 blockwise\'s rule',
    ),
    (
        lambda: quantize(_x(), "floor"),
        'mxq.quantize: scaling_mode must be "fp32" or "rceil" for format "fp8_blockwise", got "floor"',
    ),
    (
        lambda: quantize(_x(), backend="composed"),
        'mxq.quantize: backend="composed" is MXFP8\'s three-kernel baseline; format "fp8_blockwise" has only',
    ),
    (
        lambda: torch.ops.mxq.quantize_composed(_x(), 128, "fp32", None, FMT),
        'mxq.quantize_composed: format "fp8_blockwise" has no composed path',
    ),
    (lambda: quantize(_x(256, 96)), "mxq.quantize: K must be a multiple of 128, got 96"),
    (lambda: quantize(_x(96, 256)), "mxq.quantize: M must be a multiple of 128, got 96"),
    (lambda: quantize(_x(256, 96), colwise=False), "mxq.quantize_rowwise: K must be a multiple of 128, got 96"),
    (lambda: quantize(_x(96, 256), rowwise=False), "mxq.quantize_colwise: M must be a multiple of 128, got 96"),
    (
        lambda: torch.ops.mxq.quantize(_x(), 32, "fp32", None, FMT),
        'mxq.quantize: block_size must be 128 for format "fp8_blockwise", got 32',
    ),
    (
        lambda: torch.ops.mxq.quantize(_x(), 128, "rceil", None, "fp8"),
        'mxq.quantize: format must be "mxfp8" or "fp8_blockwise", got "fp8"',
    ),
    (
        lambda: mxq.quantize_weight(_x(), format=FMT, weight_scaling="32x32"),
        'mxq.quantize_weight: weight_scaling must be "128x128" for format "fp8_blockwise", got "32x32"',
    ),
    (
        lambda: mxq.quantize_weight(_x(), weight_scaling="128x128"),
        'mxq.quantize_weight: weight_scaling must be "1x32" or "32x32", got "128x128" ("128x128" is FP8 blockwise\'s',
    ),
    (
        lambda: mxq.quantize_weight(_x(), format=FMT, scaling_mode="floor"),
        'mxq.quantize_weight: scaling_mode must be "fp32" or "rceil" for format "fp8_blockwise", got "floor"',
    ),
    (lambda: mxq.quantize_weight(_x(256, 96), format=FMT), "mxq.quantize_weight: K must be a multiple of 128, got 96"),
    (lambda: mxq.quantize_weight(_x(96, 256), format=FMT), "mxq.quantize_weight: N must be a multiple of 128, got 96"),
    (
        lambda: mxq.quantize_weight(_x(), format="mx"),
        'mxq.quantize_weight: format must be "mxfp8" or "fp8_blockwise", got "mx"',
    ),
    (
        lambda: mxq.quantize_routed(_x(), torch.zeros(4, dtype=torch.int32), torch.tensor([4]), format="fp16"),
        'mxq.quantize_routed: format must be "mxfp8" or "fp8_blockwise", got "fp16"',
    ),
    (
        lambda: mxq.quantize_routed(
            _x(128, 96), torch.zeros(4, dtype=torch.int32), torch.tensor([4]), format=FMT, scaling_mode="fp32"
        ),
        "mxq.quantize_routed: K must be a multiple of 128, got 96",
    ),
    (
        lambda: mxq.quantize_routed(
            _x(), torch.zeros(4, dtype=torch.int32), torch.tensor([4]), format=FMT, scaling_mode="floor"
        ),
        'mxq.quantize_routed: scaling_mode must be "fp32" or "rceil" for format "fp8_blockwise", got "floor"',
    ),
    (
        lambda: mxq.dequantize(*quantize(_x())[:2], format="e4m3"),
        'mxq.dequantize: format must be "mxfp8" or "fp8_blockwise", got "e4m3"',
    ),
    (
        lambda: mxq.dequantize(
            *quantize(_x())[:2], torch.tensor([256], dtype=torch.int32), layout="m_groups", format=FMT
        ),
        'mxq.dequantize: format "fp8_blockwise" takes layout "blocked" without offs',
    ),
    (
        lambda: mxq.dequantize_rowwise(quantize(_x()).q_row, quantize(_x()).s_row.contiguous(), format=FMT),
        "mxq.dequantize: scales must be a 2-D tensor with strides (1, rows) (the factors quantize returns), got shape",
    ),
    (
        lambda: mxq.dequantize_rowwise(quantize(_x()).q_row, torch.zeros(2, 128).t(), format=FMT),
        "mxq.dequantize: scales must have shape [256, 2] for q of shape [256, 256] (blocked layout), got [128, 2]",
    ),
    (
        lambda: mxq.dequantize(torch.zeros(128, 96).to(torch.float8_e4m3fn), torch.zeros(0, 128).t(), format=FMT),
        "mxq.dequantize: cols must be a multiple of 128, got 96",
    ),
]
TYPE_ERRORS = [
    (
        lambda: mxq.dequantize_rowwise(*mxq.quantize(_x())[:2], format=FMT),
        'mxq.dequantize: scales must be torch.float32 for format "fp8_blockwise", got torch.float8_e8m0fnu',
    ),
    (
        lambda: mxq.dequantize_rowwise(*quantize(_x())[:2]),
        "mxq.dequantize: scales must be torch.float8_e8m0fnu, got torch.float32",
    ),
    (lambda: mxq.quantize_weight(_x(), format=None), "mxq.quantize_weight: format must be a str, got NoneType"),
    (lambda: mxq.quantize(_x(), format=8), "mxq.quantize: format must be a str, got int"),
    (
        lambda: quantize(_x(), out=mxq.empty_quantized(_x())),  # MXFP8's buffers
        "mxq.quantize: s_row must be torch.float32, got torch.float8_e8m0fnu",
    ),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_value_errors(case):
    call, text = ERRORS[case]
    with raises(ValueError, text):
        call()


@pytest.mark.parametrize("case", range(len(TYPE_ERRORS)))
def test_type_errors(case):
    call, text = TYPE_ERRORS[case]
    with raises(TypeError, text):
        call()


def test_meta_refuses_what_the_op_refuses():
    x = torch.empty(96, 256, dtype=torch.bfloat16, device="meta")
    with raises(ValueError, "mxq.quantize: M must be a multiple of 128, got 96"):
        quantize(x)
    with raises(ValueError, 'scaling_mode must be "fp32" or "rceil" for format "fp8_blockwise", got "floor"'):
        quantize(x.new_empty(128, 128), "floor")
    with raises(ValueError, "mxq.quantize_weight: N must be a multiple of 128, got 96"):
        mxq.quantize_weight(x, format=FMT)


# ---- torch integration: opcheck, Meta, fake tensors, torch.compile ----


def _op_inputs(device, M=256, K=384, G=None, seed=0):
    # opcheck compares outputs with assert_close (NaN != NaN): finite inputs here; the byte tests cover the rest.
    x = random_input(M, K, torch.bfloat16, seed=seed).to(device)
    offs = None if G is None else make_offs(M, G, seed=seed).to(device)
    return x, offs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("G", [None, 4], ids=lambda g: "dense" if g is None else f"G={g}")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["quantize", "quantize_rowwise", "quantize_colwise"])
def test_opcheck_quantize(name, mode, G, device):
    x, offs = _op_inputs(device, G=G)
    torch.library.opcheck(getattr(torch.ops.mxq, name).default, (x, 128, mode, offs, FMT))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_quantize_out(device):
    x, offs = _op_inputs(device, G=4)
    out = mxq.empty_quantized(x, offs=offs, format=FMT)
    kwargs = dict(zip(NAMES, out))
    # test_schema compares inputs with torch.allclose, which has no float8 kernels (as for dequantize).
    torch.library.opcheck(
        torch.ops.mxq.quantize.out, (x, 128, "fp32", offs, FMT), kwargs, test_utils=DEQUANT_OPCHECK_TESTS
    )


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_dequantize(device):
    x, _ = _op_inputs(device)
    t = quantize(x)
    for args in ((t.q_row, t.s_row), (t.q_col.t(), t.s_col)):
        torch.library.opcheck(
            torch.ops.mxq.dequantize.default, (*args, None, "blocked", FMT), test_utils=DEQUANT_OPCHECK_TESTS
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(256, 384), (2, 256, 384)], ids=["2d", "3d"])
def test_opcheck_quantize_weight(shape, device):
    w = random_input(256 * (shape[0] if len(shape) == 3 else 1), 384, torch.bfloat16, seed=1).reshape(shape)
    for rowwise, colwise in ((True, True), (True, False), (False, True)):
        args = (w.to(device), "fp32", "128x128", rowwise, colwise, FMT)
        torch.library.opcheck(torch.ops.mxq.quantize_weight.default, args)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_quantize_routed(device):
    x, _ = _op_inputs(device, M=128, K=256)
    index = torch.tensor([3, 0, 77, 5, 5, 100], dtype=torch.int32, device=device)
    counts = torch.tensor([2, 0, 4], dtype=torch.int64, device=device)
    scale = torch.rand(6, device=device)
    for mode in MODES:
        torch.library.opcheck(torch.ops.mxq.quantize_routed.default, (x, index, counts, scale, mode, True, True, FMT))


def _meta_pairs():
    x = random_input(384, 640, torch.bfloat16, seed=2)
    offs = make_offs(384, 3, seed=2)
    w2, w3 = x[:256].contiguous(), x.reshape(3, 128, 640)
    index, counts = torch.tensor([1, 2, 3], dtype=torch.int32), torch.tensor([1, 0, 2], dtype=torch.int32)
    ops = torch.ops.mxq
    return [
        ("quantize", lambda d: ops.quantize(x.to(d), 128, "fp32", None, FMT)),
        ("quantize grouped", lambda d: ops.quantize(x.to(d), 128, "rceil", offs.to(d), FMT)),
        ("quantize_rowwise", lambda d: ops.quantize_rowwise(x.to(d), 128, "fp32", None, FMT)),
        ("quantize_colwise", lambda d: ops.quantize_colwise(x.to(d), 128, "fp32", offs.to(d), FMT)),
        ("dequantize", lambda d: ops.dequantize(*(t.to(d) for t in quantize(x)[:2]), None, "blocked", FMT)),
        ("quantize_weight 2-D", lambda d: ops.quantize_weight(w2.to(d), "fp32", "128x128", True, True, FMT)),
        ("quantize_weight 3-D", lambda d: ops.quantize_weight(w3.to(d), "fp32", "128x128", True, True, FMT)),
        ("quantize_weight row", lambda d: ops.quantize_weight(w3.to(d), "fp32", "128x128", True, False, FMT)),
        (
            "quantize_routed",
            lambda d: ops.quantize_routed(x.to(d), index.to(d), counts.to(d), None, "fp32", True, True, FMT),
        ),
        (
            "quantize_routed col",
            lambda d: ops.quantize_routed(x.to(d), index.to(d), counts.to(d), None, "rceil", False, True, FMT),
        ),
    ]


@pytest.mark.parametrize("case", range(10))
def test_meta_matches_real(case):
    name, call = _meta_pairs()[case]
    real, meta = call("cpu"), call("meta")
    real = real if isinstance(real, tuple) else (real,)
    meta = meta if isinstance(meta, tuple) else (meta,)
    for i, (r, m) in enumerate(zip(real, meta, strict=True)):
        assert m.device.type == "meta"
        assert (m.dtype, m.shape, m.stride()) == (r.dtype, r.shape, r.stride()), f"{name}[{i}]"


def _pipeline(x, offs, w):
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, 128, "fp32", offs, FMT)
    r = mxq.quantize(x, colwise=False, format=FMT, scaling_mode="rceil")
    k = mxq.quantize(x, rowwise=False, offs=offs, format=FMT)
    qw = mxq.quantize_weight(w, format=FMT)
    deq_row = mxq.dequantize_rowwise(q_row, s_row, format=FMT) * 2  # something for inductor to fuse around the op
    deq_col = mxq.dequantize_colwise(q_col, s_col, format=FMT)
    return (q_row, s_row, q_col, s_col, r.q_row, r.s_row, k.q_col, k.s_col, *qw, deq_row, deq_col)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(_pipeline, fullgraph=True, dynamic=dynamic)
    for M, K, seed in ((256, 384, 0), (512, 256, 1)):
        x = random_input(M, K, torch.bfloat16, seed=seed, specials=True).to(device)
        offs = make_offs(M, 4, seed=seed).to(device)
        w = random_input(256, K, torch.bfloat16, seed=seed).reshape(2, 128, K).to(device)
        eager = _pipeline(x, offs, w)
        got = compiled(x, offs, w)
        assert_outputs_equal(got, eager, [f"out{i}" for i in range(len(eager))], f"{M}x{K}/")
        assert got[1].stride() == (1, M) and got[3].stride() == (1, K)


# ---- CUDA only: every byte written, CUDA graphs ----


@requires_cuda
def test_every_output_byte_written_cuda():
    M, K = 1024, 640
    x = random_input(M, K, torch.bfloat16, seed=11, specials=True)
    expected = bref.quantize(x, "fp32")
    xg = x.cuda()
    torch.cuda.synchronize()
    sizes = [t.numel() * t.element_size() for t in expected]
    poison = [torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda") for n in sizes]
    ptrs = {p.data_ptr() for p in poison}
    del poison
    got = quantize(xg)
    assert ptrs & {t.data_ptr() for t in got}, "no output reused a poisoned block; the check would be vacuous"
    assert_outputs_equal(got, expected, NAMES, "poisoned/")


@requires_cuda
def test_cuda_graph_capture_and_replay():
    M, K = 1024, 512
    offs_cpu = make_offs(M, 4, seed=2)
    offs = offs_cpu.cuda()
    x = random_input(M, K, torch.bfloat16, seed=0).cuda()
    w = random_input(512, K, torch.bfloat16, seed=0).reshape(4, 128, K).cuda()

    def run():
        return (*quantize(x, offs=offs), *quantize(x, "rceil", colwise=False)[:2], *mxq.quantize_weight(w, format=FMT))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = run()
    for seed in (1, 2):
        new = random_input(M, K, torch.bfloat16, seed=seed, specials=True)
        x.copy_(new.cuda())
        graph.replay()
        torch.cuda.synchronize()
        expected = (*bref.quantize(new, "fp32"), *bref.quantize(new, "rceil")[:2], *bref.quantize_weight(w.cpu()))
        assert_outputs_equal(results, expected, [f"out{i}" for i in range(len(expected))], f"replay {seed}/")


# ---- CUDA + torchao 0.18: byte equality with its blockwise Triton quantizers ----


def _torchao_kernels():
    pytest.importorskip("torchao", reason="torchao is not installed")
    return pytest.importorskip("torchao.prototype.blockwise_fp8_training.kernels")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
def test_torchao_torch_references_byte_equal_on_cpu(dtype):
    """The CPU op (the reference) against torchao 0.18's pure-torch FP8 blockwise quantizers, on finite input with
    zero blocks: torch_blockwise_scale_act_quant_lhs (q_row, d_row), _rhs (128x1 blocks: q_col's values, d_col) and
    torch_blockwise_scale_weight_quant (q_row, the tile factors). Runs without a GPU."""
    ao = _torchao_kernels()
    M, K = 384, 256
    x = random_input(M, K, dtype, seed=stable_seed("torchao-cpu", dtype_id(dtype)))
    x[:128, :128] = 0
    t = quantize(x)
    y, s = ao.torch_blockwise_scale_act_quant_lhs(x, 128)
    assert_bytes_equal(t.q_row, y, "q_row vs torchao lhs")
    assert_bytes_equal(t.s_row, s, "s_row vs torchao lhs")
    y, s = ao.torch_blockwise_scale_act_quant_rhs(x, 128)  # (M, K) values, factors (M/128, K)
    assert_bytes_equal(t.q_col, y, "q_col vs torchao rhs")
    # torchao's rhs reference clamps amax at 1e-12 in x's dtype before widening it: for bf16 x a zero block's
    # factor is then 1 / fl32(448 / bf16(1e-12)), not the contract's fl32(1e-12) floor (the lhs reference and the
    # Triton kernels widen first). The zero block's 128 colwise factors are left out of the comparison for bf16.
    zero = torch.zeros(K, M // 128, dtype=torch.bool)
    zero[:128, 0] = dtype == torch.bfloat16
    assert_bytes_equal(t.s_col[~zero], s.t()[~zero], "s_col vs torchao rhs")
    w = random_input(512, K, dtype, seed=stable_seed("torchao-cpu-w", dtype_id(dtype)))
    w[-128:, :128] = 0
    tw = mxq.quantize_weight(w, format=FMT)
    y, s = ao.torch_blockwise_scale_weight_quant(w, 128)
    assert_bytes_equal(tw.q_row, y, "weight q_row vs torchao")
    assert_bytes_equal(tw.s_row[:, : K // 128], s, "weight s_row vs torchao")


@requires_cuda
@pytest.mark.parametrize("shape", [(256, 512), (1024, 384), (4096, 2048)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=dtype_id)
def test_torchao_activation_quantizers_byte_equal(dtype, shape):
    """mxq's rule "fp32" == torchao's triton_fp8_blockwise_act_quant_lhs (q_row, d_row) and
    triton_fp8_blockwise_act_quant_transposed_lhs (q_col as the (K, M) array, d_col) on finite input, zero blocks and
    subnormals included."""
    ao = _torchao_kernels()
    M, K = shape
    x = random_input(M, K, dtype, seed=stable_seed("torchao", M, K, dtype_id(dtype))).cuda()
    x[:128, :128] = 0  # a zero block on both axes
    t = quantize(x)
    y, s = ao.triton_fp8_blockwise_act_quant_lhs(x, 128)
    assert s.shape == t.s_row.shape and s.stride() == t.s_row.stride()
    assert_bytes_equal(t.q_row, y, "q_row vs torchao lhs")
    assert_bytes_equal(t.s_row, s, "s_row vs torchao lhs")
    y, s = ao.triton_fp8_blockwise_act_quant_transposed_lhs(x, 128)
    assert y.shape == (K, M) and s.shape == t.s_col.shape and s.stride() == t.s_col.stride()
    assert_bytes_equal(t.q_col.t(), y, "q_col vs torchao transposed lhs")
    assert_bytes_equal(t.s_col, s, "s_col vs torchao transposed lhs")


@requires_cuda
@pytest.mark.parametrize("shape", [(256, 512), (7168, 2048), (2048, 7168)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_torchao_weight_quantizer_byte_equal(shape):
    """mxq.quantize_weight(format="fp8_blockwise") == torchao's triton_fp8_blockwise_weight_quant_rhs on finite input:
    its (N, K) values (column-major storage) are q_row's, its (N/128, K/128) factors s_row's tiles."""
    ao = _torchao_kernels()
    N, K = shape
    w = random_input(N, K, torch.bfloat16, seed=stable_seed("torchao-w", N, K)).cuda()
    w[-128:, -128:] = 0
    t = mxq.quantize_weight(w, format=FMT)
    y, s = ao.triton_fp8_blockwise_weight_quant_rhs(w, 128)
    assert y.shape == (N, K) and s.shape == (N // 128, K // 128)
    assert_bytes_equal(t.q_row, y, "q_row vs torchao weight")
    assert_bytes_equal(t.s_row[:, : K // 128], s, "s_row vs torchao weight")


@requires_cuda
def test_torchao_divergence_on_nonfinite_input():
    """The stated divergence (docs/numerics.md §13): torchao's amax drops NaN (the block keeps the finite d of its other values,
    the NaN element becomes 0x7E) and an Inf block gets d = inf (its other bytes signed zeros 0x00/0x80, the Inf element 0x7E); mxq gives
    both blocks d = NaN and data 0x7F. Every other block stays byte-equal."""
    ao = _torchao_kernels()
    M, K = 256, 512
    x = random_input(M, K, torch.bfloat16, seed=12).cuda()
    x[3, 5] = float("nan")  # rowwise block (3, 0)
    x[9, 300] = float("inf")  # rowwise block (9, 2)
    t = quantize(x)
    y, s = ao.triton_fp8_blockwise_act_quant_lhs(x, 128)
    q_mxq, q_ao = t.q_row.cpu().view(torch.uint8), y.cpu().view(torch.uint8)
    s_mxq, s_ao = t.s_row.cpu(), s.cpu()
    # mxq
    assert torch.isnan(s_mxq[3, 0]) and torch.isnan(s_mxq[9, 2])
    assert bool((q_mxq[3, :128] == 0x7F).all()) and bool((q_mxq[9, 256:384] == 0x7F).all())
    # torchao
    assert torch.isfinite(s_ao[3, 0]) and int(q_ao[3, 5]) == 0x7E
    assert torch.isinf(s_ao[9, 2]) and int(q_ao[9, 300]) == 0x7E
    others = torch.arange(128) != 300 - 256  # the Inf block's finite values: x * (448 / inf) = +0 or -0
    expected = torch.where(x[9, 256:384].cpu()[others] < 0, 0x80, 0x00).to(torch.uint8)
    assert_bytes_equal(q_ao[9, 256:384][others], expected, "torchao's Inf block")
    # everything else equal
    keep = torch.ones(M, K // 128, dtype=torch.bool)
    keep[3, 0] = keep[9, 2] = False
    assert_bytes_equal(s_mxq[keep], s_ao[keep], "other factors")
    keep_q = keep.repeat_interleave(128, dim=1)
    assert_bytes_equal(q_mxq[keep_q], q_ao[keep_q], "other bytes")


# ---- CUDA SM90: torch.nn.functional.scaled_mm takes mxq's outputs as they are ----

requires_sm90 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="torch's blockwise (1x128, 128x128) scaled_mm runs on SM90 only",
)


def _scaled_mm(a, b, scale_a, scale_b, recipe_b):
    F = torch.nn.functional
    return F.scaled_mm(a, b, scale_a, F.ScalingType.BlockWise1x128, scale_b, recipe_b, output_dtype=torch.bfloat16)


@requires_sm90
@pytest.mark.parametrize(
    "MNK", [(256, 384, 512), (512, 2048, 7168), (384, 640, 896)], ids=lambda s: "x".join(map(str, s))
)
def test_scaled_mm_forward_dgrad_wgrad(MNK):
    """y = x wᵀ (1x128 x 128x128), dx = dy w (1x128 x 128x128) and dW = dyᵀ x (1x128 x 1x128), each from mxq's
    outputs with no copy: the layouts are what cuBLASLt (through F.scaled_mm) takes."""
    F = torch.nn.functional
    M, N, K = MNK
    g = torch.Generator().manual_seed(stable_seed("gemm", M, N, K))
    x = torch.randn(M, K, generator=g).bfloat16().cuda()
    w = (torch.randn(N, K, generator=g) * 0.05).bfloat16().cuda()
    dy = torch.randn(M, N, generator=g).bfloat16().cuda()
    qx, qw, qdy = quantize(x), mxq.quantize_weight(w, format=FMT), quantize(dy)
    tile = F.ScalingType.BlockWise128x128
    # forward: a = q_row (M, K) with s_row (M, K/128) strides (1, M); b = w's q_row.t() (K, N) with s_row.t()
    y = _scaled_mm(qx.q_row, qw.q_row.t(), qx.s_row, qw.s_row.t(), tile)
    wf = bref.tile_values(qw.q_row, qw.s_row)
    assert_gemm_close(y, bref.values(qx.q_row, qx.s_row) @ wf.t(), "forward", 1e-3)
    # dgrad: a = dy's q_row (M, N); b = w's q_col (N, K) column-major with s_col.t()
    dx = _scaled_mm(qdy.q_row, qw.q_col, qdy.s_row, qw.s_col.t(), tile)
    assert_gemm_close(dx, bref.values(qdy.q_row, qdy.s_row) @ wf, "dgrad", 1e-3)
    # wgrad: a = dy's q_col.t() (N, M) with s_col (N, M/128) strides (1, N); b = x's q_col (M, K) column-major with
    # s_col (K, M/128) strides (1, K)
    dW = _scaled_mm(qdy.q_col.t(), qx.q_col, qdy.s_col, qx.s_col, F.ScalingType.BlockWise1x128)
    a = bref.values(qdy.q_col.t(), qdy.s_col)  # (N, M)
    b = bref.values(qx.q_col.t(), qx.s_col)  # (K, M)
    assert_gemm_close(dW, a @ b.t(), "wgrad", 1e-3)
