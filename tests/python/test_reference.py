"""The two references against each other and against docs/numerics.md's worked examples; CPU only, no CUDA needed.

op(x.cpu()) runs the C++ reference; tests/python/torch_reference.py is the pure-torch reference written from docs/numerics.md. Both must agree
byte for byte with each other and with the tables of docs/numerics.md §3-§6.
"""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import mxq
import torch
import torch_reference as T
from helpers import (
    OUTPUT_NAMES,
    QUANT_OPS,
    SPEC4_CASES,
    assert_bf16_equal_nan_canonical,
    assert_outputs_equal,
    make_offs,
    op,
    random_bf16,
    reference_outputs,
    spec4_matrix,
    stable_seed,
)

MODES = ["rceil", "floor"]


def _f32_bits(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


# ---- docs/numerics.md §3 ----

RCEIL_TABLE = [
    (0, 0),
    (0x00000001, 0),
    (0x00400000, 0),
    (0x00400001, 1),
    (0x007FFFFF, 1),
    (0x00800000, 1),
    (0x1F800000, 63),
    (0x1F800001, 64),
    (0x3F7FFFFF, 127),
    (0x3F800000, 127),
    (0x3F800001, 128),
    (0x5F800000, 191),
    (0x5F800001, 192),
    (0x7F000000, 254),
    (0x7F000001, 255),
]


def test_rceil_boundary_table():
    d = _f32_bits([b for b, _ in RCEIL_TABLE])
    assert T.scale_from_d(d, "rceil").tolist() == [s for _, s in RCEIL_TABLE]


def test_rceil_fp32_amax_boundaries():
    # docs/numerics.md §3: fp32 amax 0x04600001 still gives 0, 0x04600002 gives 1.
    amax = _f32_bits([0x04600000, 0x04600001, 0x04600002])
    assert T.scale_bytes(amax, "rceil").tolist() == [0, 0, 1]


def test_floor_nan_inf_and_subnormal():
    d = _f32_bits([0x7F800000, 0x7FC00000, 0x00000001, 0x3F800000, 0x3FFFFFFF])
    assert T.scale_from_d(d, "floor").tolist() == [255, 255, 0, 127, 127]


def test_reciprocal_edges():
    # docs/numerics.md §2 step 4: s = 0 -> 2^127, s = 254 -> 2^-127 (fp32 0x00400000), s = 255 -> NaN.
    r = T.e8m0_value((254 - torch.tensor([0, 127, 254, 255])) & 0xFF)
    assert r.view(torch.int32).tolist()[:3] == [0x7F000000, 0x3F800000, 0x00400000]
    assert torch.isnan(r[3])


# ---- docs/numerics.md §4: every special block, both axes, both references ----


def _check_spec4(outputs, case_of_block, mode, M):
    """outputs = (q_row, s_row, q_col, s_col) of x = spec4_matrix(M): check every block of both axes."""
    q_row, s_row, q_col, s_col = (t.cpu() for t in outputs)
    K = q_row.shape[1]
    S_row = T.from_blocked(s_row.view(torch.uint8), M, K // 32)
    qr = q_row.view(torch.uint8)
    # Colwise: x.t() of the test holds the cases along M; callers pass the outputs for xt, viewed back here.
    S_col = T.from_blocked(s_col.view(torch.uint8), q_col.shape[1], q_col.shape[0] // 32)
    qc = q_col.t().contiguous().view(torch.uint8)  # physical (K', M') = (M, K) of the case matrix
    for j, c in enumerate(case_of_block):
        name, _, rceil, floor = SPEC4_CASES[c]
        scale, data = rceil if mode == "rceil" else floor
        if scale is None:
            continue
        assert (S_row[:, j] == scale).all(), f"{name} ({mode}) rowwise scale: {S_row[0, j].item()} != {scale}"
        assert (S_col[:, j] == scale).all(), f"{name} ({mode}) colwise scale: {S_col[0, j].item()} != {scale}"
        if data is not None:
            want = torch.tensor(data, dtype=torch.uint8)
            got_r = qr[:, 32 * j : 32 * j + 32]
            got_c = qc[:, 32 * j : 32 * j + 32]
            assert (got_r == want).all(), f"{name} ({mode}) rowwise data {got_r[0].tolist()} != {data}"
            assert (got_c == want).all(), f"{name} ({mode}) colwise data {got_c[0].tolist()} != {data}"


def _spec4_outputs(quantize, M=128):
    """Rowwise outputs of x and colwise outputs of x.t() (whose columns hold the cases)."""
    x, case_of_block = spec4_matrix(M)
    q_row, s_row, _, _ = quantize(x)
    _, _, q_col, s_col = quantize(x.t().contiguous())
    return (q_row, s_row, q_col, s_col), case_of_block


@pytest.mark.parametrize("mode", MODES)
def test_spec4_pure_torch_reference(mode):
    outs, cases = _spec4_outputs(lambda x: T.quantize(x, mode))
    _check_spec4(outs, cases, mode, 128)


@pytest.mark.parametrize("mode", MODES)
def test_spec4_cpu_op(mode):
    outs, cases = _spec4_outputs(lambda x: torch.ops.mxq.quantize(x, 32, mode))
    _check_spec4(outs, cases, mode, 128)


# ---- docs/numerics.md §5-§6 worked examples ----


def test_blocked_worked_example():
    R, C = 130, 5
    S = torch.arange(1, R * C + 1, dtype=torch.int64).view(R, C)  # 0 is the padding value
    B = T.to_blocked(S).reshape(-1)
    assert T.to_blocked(S).shape == (256, 8)
    where = {int(v): i for i, v in enumerate(B.tolist())}
    for (r, c), off in {
        (0, 0): 0,
        (1, 0): 16,
        (32, 0): 4,
        (33, 1): 21,
        (100, 2): 78,
        (127, 3): 511,
        (0, 4): 512,
        (128, 0): 1024,
        (129, 4): 1552,
    }.items():
        assert where[int(S[r, c])] == off, (r, c)
    padding = torch.ones(256, 8, dtype=torch.bool)
    padding[:R, :C] = False
    blocked_pad = T.to_blocked(padding.to(torch.int64)).reshape(-1)
    assert (B[blocked_pad.bool()] == 0).all()
    assert torch.equal(T.from_blocked(T.to_blocked(S), R, C), S)


def test_kgroups_worked_example():
    M, K = 512, 256
    offs = [128, 320, 384]
    S = torch.arange(1, K * M // 32 + 1, dtype=torch.int64).view(K, M // 32)
    B = T.to_kgroups(S, offs, M)
    assert B.shape == (256, 28)
    flat = B.reshape(-1)
    assert int(flat[2697]) == int(S[200, 9])
    assert int(flat[0]) == int(S[0, 0]) and int(flat[1024]) == int(S[0, 4]) and int(flat[3072]) == int(S[0, 10])
    assert (flat[4096:] == 0).all()  # regions end at (4 + 8 + 4) * 256 bytes; the tail (cols 12..15) is not placed
    back, covered = T.from_kgroups(B, offs, M, K)
    assert covered.tolist() == [True] * 12 + [False] * 4
    assert torch.equal(back[:, :12], S[:, :12])


# ---- random inputs: C++ reference (CPU op) == pure-torch reference ----

SHAPES = [(32, 32), (64, 96), (128, 128), (256, 512), (384, 160)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("specials", [False, True], ids=["random", "specials"])
@pytest.mark.parametrize("name", QUANT_OPS)
def test_cpu_op_matches_pure_torch_dense(name, specials, mode, shape):
    x = random_bf16(*shape, seed=stable_seed(shape, mode, specials), specials=specials)
    out = op(name)(x, 32, mode)
    assert_outputs_equal(out, reference_outputs(name, x, mode, None), OUTPUT_NAMES[name], f"{name}/")


@pytest.mark.parametrize("G", [1, 4, 8])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", QUANT_OPS)
def test_cpu_op_matches_pure_torch_grouped(name, mode, G):
    M, K = 1024, 256
    x = random_bf16(M, K, seed=G, specials=True)
    offs = make_offs(M, G, seed=G)
    assert offs[-1] < M  # an uncovered tail
    out = op(name)(x, 32, mode, offs)
    assert_outputs_equal(out, reference_outputs(name, x, mode, offs), OUTPUT_NAMES[name], f"{name}/G={G}/")


def test_grouped_full_cover_and_all_empty():
    M, K = 512, 128
    x = random_bf16(M, K, seed=7)
    for offs in ([512], [0, 0, 512], [0], [128, 128, 128, 128]):
        o = torch.tensor(offs, dtype=torch.int32)
        out = torch.ops.mxq.quantize(x, offs=o)
        assert_outputs_equal(out, T.quantize(x, "rceil", o), OUTPUT_NAMES["quantize"], f"{offs}/")


@pytest.mark.parametrize("name", QUANT_OPS)
@pytest.mark.parametrize("shape", [(0, 64), (64, 0), (0, 0)], ids=str)
def test_zero_sized(name, shape):
    x = torch.empty(shape, dtype=torch.bfloat16)
    out = op(name)(x)
    assert_outputs_equal(out, reference_outputs(name, x, "rceil", None), OUTPUT_NAMES[name], f"{name}/")


# ---- dequantize ----


@pytest.mark.parametrize("grouped", [False, True])
def test_dequantize_cpu_matches_pure_torch(grouped):
    M, K = 512, 256
    x = random_bf16(M, K, seed=3, specials=True)
    offs = make_offs(M, 4, seed=1) if grouped else None
    q_row, s_row, q_col, s_col = torch.ops.mxq.quantize(x, offs=offs)
    grouped_layouts = ("m_groups", "k_groups") if grouped else ("blocked", "blocked")
    for q, s, layout, n in (
        (q_row, s_row, grouped_layouts[0], "rowwise"),
        (q_col.t(), s_col, grouped_layouts[1], "colwise"),
    ):
        d = mxq.dequantize(q, s, offs, layout=layout)
        assert d.dtype == torch.bfloat16 and d.shape == q.shape
        assert_bf16_equal_nan_canonical(d, T.dequantize(q, s, offs, layout), n)


def test_dequantize_round_trip_is_close():
    x = random_bf16(256, 256, seed=11)
    q = mxq.quantize(x)
    for d in (mxq.dequantize_rowwise(q.q_row, q.s_row), mxq.dequantize_colwise(q.q_col, q.s_col)):
        rel = (d.float() - x.float()).abs() / x.float().abs().clamp_min(1e-30)
        big = x.float().abs() > x.float().abs().amax() * 2**-8  # outside e4m3's subnormal range of its block
        assert rel[big].max() <= 2**-4 + 1e-6


# ---- mxq.quantize (the typed wrapper) ----


@pytest.mark.parametrize("backend", ["fused", "composed"])
def test_quantize_wrapper(backend):
    x = random_bf16(128, 256, seed=5)
    q = mxq.quantize(x, backend=backend, scaling_mode="floor")
    ref = T.quantize(x, "floor")
    assert_outputs_equal(tuple(q), ref, ("q_row", "s_row", "q_col", "s_col"))
    r = mxq.quantize(x, colwise=False, scaling_mode="floor")
    assert r.q_col is None and r.s_col is None
    assert_outputs_equal((r.q_row, r.s_row), ref[:2], ("q_row", "s_row"))
    c = mxq.quantize(x, rowwise=False, scaling_mode="floor")
    assert c.q_row is None and c.s_row is None
    assert_outputs_equal((c.q_col, c.s_col), ref[2:], ("q_col", "s_col"))


def test_validate_offs_accepts_good_offsets():
    mxq.validate_offs(torch.tensor([0, 128, 128, 384], dtype=torch.int32), 512)
    mxq.validate_offs(torch.tensor([512], dtype=torch.int32), 512)
