"""A small pure-torch MXFP8 reference written from docs/numerics.md (§2-§6), independently of the C++ reference.

Tests compare the kernels with both this module and the ops' CPU dispatch (the C++ reference), so a misreading of
the contract in one of them shows up against the other. Everything runs on the CPU in plain fp32/int32 torch ops:

    widen bf16 -> fp32 exactly; amax = NaN-propagating max |v| from +0
    RCEIL: d = fl32(amax * fp32(0x3B124925)), rounded *up* to a power of two on the int32 bits of d
    FLOOR: d = fl32(amax * 2^-8), exponent of d
    r = E8M0 value of byte (254 - s) mod 256 (0 -> 2^-127 as the fp32 subnormal, 255 -> NaN)
    q = e4m3(fl32(v * r)): torch's RNE cast after an explicit clamp to +-448 (torch's own cast turns overflow
        into NaN), NaN written as 0x7F

Layouts: blocked (docs/numerics.md §5) through reshape/permute of 128x4 atoms; K-groups and M-groups (docs/numerics.md §6) by placing
each group's blocked sub-matrix. Scale and data tensors are returned as uint8 (raw bytes), or with the op's
dtypes from :func:`quantize`. Expert weights (docs/numerics.md §11): :func:`quantize_weight`, its 1x32 policy
through :func:`quantize_blocks`, its 32x32 policy through :func:`quantize_tiles`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

BLOCK = 32
ATOM_ROWS = 128
ATOM_COLS = 4
RCEIL_INV448_BITS = 0x3B124925  # fp32 rounding of 1/448 (docs/numerics.md §3)
E4M3_MAX = 448.0
E4M3_NAN = 0x7F
E8M0_NAN = 255
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def _f32(bits: int) -> Tensor:
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32)[0]


# ---- one axis of blocks: the last dimension holds the 32 values of a block ----


def scale_from_d(d: Tensor, scaling_mode: str) -> Tensor:
    """E8M0 byte (int32 tensor) from the fp32 ``d`` of docs/numerics.md §3: RCEIL rounds d up to a power of two without
    saturation (zero/subnormal d: 1 iff d > 2^-127), FLOOR takes its exponent; NaN/Inf give 255."""
    bits = d.contiguous().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    if scaling_mode == "floor":
        return exponent  # 255 for NaN/Inf, 0 for zero and subnormal d
    if scaling_mode != "rceil":
        raise ValueError(f'scaling_mode must be "rceil" or "floor", got {scaling_mode!r}')
    up = exponent + (mantissa != 0).to(torch.int32)  # exponent 254 with a mantissa reaches 255 = NaN
    sub = (mantissa > 0x400000).to(torch.int32)
    return torch.where(exponent == 255, 255, torch.where(exponent == 0, sub, up))


def scale_bytes(amax: Tensor, scaling_mode: str) -> Tensor:
    """E8M0 scale byte (int32 tensor, 0..255) from fp32 ``amax`` >= +0 or NaN/Inf (docs/numerics.md §3): d is a multiply,
    never a divide."""
    if scaling_mode == "rceil":
        d = amax * _f32(RCEIL_INV448_BITS)
    elif scaling_mode == "floor":
        d = amax * _f32(0x3B800000)  # 2^-8
    else:
        raise ValueError(f'scaling_mode must be "rceil" or "floor", got {scaling_mode!r}')
    return scale_from_d(d, scaling_mode)


def e8m0_value(s: Tensor) -> Tensor:
    """fp32 value 2^(s-127) of E8M0 bytes ``s`` (0 is the subnormal 2^-127, 255 is NaN)."""
    s = s.to(torch.int32)
    bits = torch.where(s == 0, 0x00400000, s << 23)
    bits = torch.where(s == 255, 0x7FC00000, bits)
    return bits.to(torch.int32).view(torch.float32)


def e4m3_bytes(p: Tensor) -> Tensor:
    """e4m3 bytes of fp32 ``p``: RNE, saturating to +-448 (Inf included), NaN -> 0x7F, sign kept."""
    nan = torch.isnan(p)
    q = p.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(nan, torch.tensor(E4M3_NAN, dtype=torch.uint8), q)


def quantize_blocks(v: Tensor, scaling_mode: str = "rceil") -> tuple[Tensor, Tensor]:
    """Quantizes blocks along the last dim (size 32) of bf16, fp16 or fp32 ``v``: (data bytes like v, scale bytes
    v.shape[:-1])."""
    assert v.dtype in INPUT_DTYPES and v.shape[-1] == BLOCK, (v.dtype, v.shape)
    f = v.float()  # exact widening; torch does not flush subnormals by default
    a = f.abs()
    amax = torch.where(torch.isnan(a).any(-1), torch.tensor(float("nan")), a.amax(-1))  # NaN must surface
    s = scale_bytes(amax, scaling_mode)
    r = e8m0_value((254 - s) & 0xFF)
    q = e4m3_bytes(f * r.unsqueeze(-1))
    return q, s.to(torch.uint8)


def quantize_rowwise_plain(x: Tensor, scaling_mode: str = "rceil") -> tuple[Tensor, Tensor]:
    """(q_row (M, K) uint8, S_row (M, K/32) uint8): 1x32 blocks along K."""
    M, K = x.shape
    q, s = quantize_blocks(x.detach().cpu().reshape(M, K // BLOCK, BLOCK), scaling_mode)
    return q.reshape(M, K), s


def quantize_colwise_plain(x: Tensor, scaling_mode: str = "rceil") -> tuple[Tensor, Tensor]:
    """(q_col physical (K, M) uint8, S_col (K, M/32) uint8): 32x1 blocks along M; row k is column k of x."""
    M, K = x.shape
    xt = x.detach().cpu().t().contiguous()  # (K, M)
    q, s = quantize_blocks(xt.reshape(K, M // BLOCK, BLOCK), scaling_mode)
    return q.reshape(K, M), s


# ---- layouts (docs/numerics.md §5-§6) ----


def to_blocked(S: Tensor) -> Tensor:
    """Blocked layout of the scale matrix S (R, C) as a (roundup(R,128), roundup(C,4)) byte tensor: 128x4 atoms
    stored atom-row-major, S[r, c] at ((r/128)*(C_p/4) + c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4."""
    R, C = S.shape
    Rp, Cp = round_up(R, ATOM_ROWS), round_up(C, ATOM_COLS)
    padded = torch.zeros(Rp, Cp, dtype=S.dtype)
    padded[:R, :C] = S
    # r = rb*128 + i*32 + j, c = cb*4 + k  ->  order (rb, cb, j, i, k)
    atoms = padded.view(Rp // ATOM_ROWS, 4, 32, Cp // ATOM_COLS, ATOM_COLS).permute(0, 3, 2, 1, 4)
    return atoms.reshape(Rp, Cp)


def from_blocked(B: Tensor, R: int, C: int) -> Tensor:
    """Inverse of :func:`to_blocked`: the plain (R, C) matrix held in the blocked bytes ``B``."""
    Rp, Cp = round_up(R, ATOM_ROWS), round_up(C, ATOM_COLS)
    atoms = B.reshape(Rp // ATOM_ROWS, Cp // ATOM_COLS, 32, 4, ATOM_COLS).permute(0, 3, 2, 1, 4)
    return atoms.reshape(Rp, Cp)[:R, :C]


def check_offs(offs: Sequence[int], M: int, align: int = BLOCK) -> list[int]:
    offs = [int(v) for v in offs]
    if not offs:
        raise ValueError("offs must hold at least one group end offset")
    prev = 0
    for g, end in enumerate(offs):
        if end < prev or end > M or end % align:
            raise ValueError(f"malformed offs[{g}]={end} (previous {prev}, M={M}, alignment {align})")
        prev = end
    return offs


def _offs_list(offs) -> list[int]:
    return offs.tolist() if isinstance(offs, Tensor) else list(offs)


def to_kgroups(S_col: Tensor, offs, M: int) -> Tensor:
    """K-groups layout (docs/numerics.md §6) of S_col (K, M/32): group g's scale columns [offs[g-1]/32, offs[g]/32) blocked
    on their own, padded to Q_g = roundup(c_g, 4) columns, regions contiguous from byte 0; the uncovered tail and
    the slack stay 0. Shape (roundup(K,128), M/32 + 4G)."""
    offs = check_offs(_offs_list(offs), M)
    K = S_col.shape[0]
    Kp = round_up(K, ATOM_ROWS)
    cols = M // BLOCK + ATOM_COLS * len(offs)
    out = torch.zeros(Kp * cols, dtype=S_col.dtype)
    base, begin = 0, 0
    for end in offs:
        b, e = begin // BLOCK, end // BLOCK
        region = to_blocked(S_col[:, b:e]).reshape(-1)
        out[base : base + region.numel()] = region
        base += round_up(e - b, ATOM_COLS) * Kp
        begin = end
    return out.view(Kp, cols)


def from_kgroups(B: Tensor, offs, M: int, K: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`to_kgroups`: (S_col (K, M/32), covered (M/32,) bool); uncovered columns read 0."""
    offs = check_offs(_offs_list(offs), M)
    Kp = round_up(K, ATOM_ROWS)
    flat = B.reshape(-1)
    S = torch.zeros(K, M // BLOCK, dtype=B.dtype)
    covered = torch.zeros(M // BLOCK, dtype=torch.bool)
    base, begin = 0, 0
    for end in offs:
        b, e = begin // BLOCK, end // BLOCK
        Q = round_up(e - b, ATOM_COLS)
        S[:, b:e] = from_blocked(flat[base : base + Q * Kp], K, e - b)
        covered[b:e] = True
        base += Q * Kp
        begin = end
    return S, covered


def to_mgroups(S_row: Tensor, offs, M: int) -> Tensor:
    """M-groups layout (docs/numerics.md §6) of S_row (M, K/32): the G groups and then the uncovered tail are
    segments, each blocked on its own and placed one after another from blocked row 0 (segment h starts at the sum
    of roundup(n_j, 128) over the segments before it); everything after the last segment stays 0. Shape
    (roundup(M,128) + 128G, roundup(K/32,4))."""
    offs = check_offs(_offs_list(offs), M)
    C = S_row.shape[1]
    out = torch.zeros(round_up(M, ATOM_ROWS) + ATOM_ROWS * len(offs), round_up(C, ATOM_COLS), dtype=S_row.dtype)
    row = 0
    for b, e in itertools.pairwise([0] + offs + [M]):
        if e > b:
            region = to_blocked(S_row[b:e])
            out[row : row + region.shape[0]] = region
            row += region.shape[0]
    return out


# ---- the ops ----


def quantize(
    x: Tensor, scaling_mode: str = "rceil", offs: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q_row, s_row, q_col, s_col) on the CPU with the dtypes, shapes and strides of
    torch.ops.mxq.quantize (q_col is the (1, M)-strided view of the (K, M) array)."""
    if x.dtype not in INPUT_DTYPES or x.dim() != 2:
        raise ValueError(f"x must be a 2-D bf16, fp16 or fp32 tensor, got {x.dtype} {tuple(x.shape)}")
    M, K = x.shape
    if M % BLOCK or K % BLOCK:
        raise ValueError(f"M and K must be multiples of {BLOCK}, got {M}x{K}")
    q_row, S_row = quantize_rowwise_plain(x, scaling_mode)
    q_col, S_col = quantize_colwise_plain(x, scaling_mode)
    if offs is None:
        s_row, s_col = to_blocked(S_row), to_blocked(S_col)
    else:
        s_row, s_col = to_mgroups(S_row, offs, M), to_kgroups(S_col, offs, M)
    e4m3, e8m0 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    # q_col: the (K, M) array seen as (M, K) with strides (1, M), M = 0 included (where .t() would give (1, 1)).
    q_col = q_col.view(e4m3).as_strided((M, K), (1, M))
    return q_row.view(e4m3), s_row.view(e8m0), q_col, s_col.view(e8m0)


def from_mgroups(B: Tensor, offs, M: int, C: int) -> Tensor:
    """Inverse of :func:`to_mgroups`: the plain S_row (M, C) held in the M-groups bytes ``B``."""
    offs = check_offs(_offs_list(offs), M)
    blocked = B.reshape(-1, round_up(C, ATOM_COLS))
    S = torch.zeros(M, C, dtype=B.dtype)
    row = 0
    for b, e in itertools.pairwise([0] + offs + [M]):
        if e > b:
            n = round_up(e - b, ATOM_ROWS)
            S[b:e] = from_blocked(blocked[row : row + n], e - b, C)
            row += n
    return S


def dequantize(q: Tensor, scales: Tensor, offs: Tensor | None = None, layout: str = "blocked") -> Tensor:
    """bf16 (rows, cols) = bf16(fp32(e4m3 q) * 2^(s-127)) with s the scale of q's (rows, cols/32) block, its scales
    in the ``"blocked"``, ``"m_groups"`` (rows are tokens) or ``"k_groups"`` (cols are tokens; tokens in the
    uncovered tail give +0) layout."""
    rows, cols = q.shape
    qf = q.detach().cpu().contiguous().view(torch.float8_e4m3fn).float()  # 0x7F/0xFF -> NaN
    sb = scales.detach().cpu().contiguous().view(torch.uint8)
    covered = torch.ones(cols // BLOCK, dtype=torch.bool)
    if layout == "blocked":
        S = from_blocked(sb, rows, cols // BLOCK)
    elif layout == "m_groups":
        S = from_mgroups(sb, offs, rows, cols // BLOCK)
    elif layout == "k_groups":
        S, covered = from_kgroups(sb, offs, cols, rows)
    else:
        raise ValueError(f"layout must be blocked, m_groups or k_groups, got {layout!r}")
    scale = e8m0_value(S).repeat_interleave(BLOCK, dim=1)
    out = (qf * scale).to(torch.bfloat16)
    return torch.where(covered.repeat_interleave(BLOCK).unsqueeze(0), out, torch.zeros((), dtype=torch.bfloat16))


# ---- expert weights (docs/numerics.md §11) ----

WEIGHT_SCALINGS = ("1x32", "32x32")


def quantize_tiles(v: Tensor, scaling_mode: str = "rceil") -> tuple[Tensor, Tensor]:
    """Quantizes 32x32 tiles, the last two dims of bf16, fp16 or fp32 ``v`` (size 32 each): one scale per tile from
    the NaN-propagating amax of its 1024 values (§2 steps 2-3), every value quantized with it (§2 steps 4-6).
    Returns (data bytes like v, scale bytes v.shape[:-2])."""
    assert v.dtype in INPUT_DTYPES and v.shape[-2:] == (BLOCK, BLOCK), (v.dtype, v.shape)
    f = v.float()
    a = f.abs().flatten(-2)
    amax = torch.where(torch.isnan(a).any(-1), torch.tensor(float("nan")), a.amax(-1))
    s = scale_bytes(amax, scaling_mode)
    r = e8m0_value((254 - s) & 0xFF)
    return e4m3_bytes(f * r[..., None, None]), s.to(torch.uint8)


def _expert_blocked(S: Tensor) -> Tensor:
    """(G, R, C) scale matrices -> (G, roundup(R,128)*roundup(C,4)): each expert's blocked layout, flattened."""
    return torch.stack([to_blocked(S[g]).reshape(-1) for g in range(S.shape[0])]) if S.shape[0] else S.new_zeros(0, 0)


def quantize_weight(
    w: Tensor, scaling_mode: str = "rceil", weight_scaling: str = "32x32"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q_row, s_row, q_col, s_col) of expert weights ``w`` (G, N, K) or a dense weight (N, K) on the CPU, with the
    dtypes, shapes and strides of torch.ops.mxq.quantize_weight (both axes).

    1x32: S_row[n, j] covers W[g, n, 32j:32j+32], S_col[k, i] covers W[g, 32i:32i+32, k] (the 2-D contract per
    expert). 32x32: tile (b, c) = W[g, 32b:32b+32, 32c:32c+32] has one scale s; S_row[n, c] = s for its 32 rows,
    S_col[k, b] = s for its 32 columns, and q_col[g, k, n] = q_row[g, n, k]. Each expert's S_row (N, K/32) and
    S_col (K, N/32) are blocked on their own and the experts' regions follow one another."""
    if w.dtype not in INPUT_DTYPES or w.dim() not in (2, 3):
        raise ValueError(f"w must be a 2-D or 3-D bf16, fp16 or fp32 tensor, got {w.dtype} {tuple(w.shape)}")
    if weight_scaling not in WEIGHT_SCALINGS:
        raise ValueError(f'weight_scaling must be "1x32" or "32x32", got {weight_scaling!r}')
    experts = w.dim() == 3
    W = (w if experts else w.unsqueeze(0)).detach().cpu()
    G, N, K = W.shape
    if N % BLOCK or K % BLOCK:
        raise ValueError(f"N and K must be multiples of {BLOCK}, got {N}x{K}")
    if weight_scaling == "1x32":
        q_row, S_row = quantize_blocks(W.reshape(G, N, K // BLOCK, BLOCK), scaling_mode)
        q_col, S_col = quantize_blocks(W.transpose(1, 2).reshape(G, K, N // BLOCK, BLOCK), scaling_mode)
        # q_col: each expert's (K, N) array, row-major (elementwise ops keep the transposed input's strides).
        q_row, q_col = q_row.reshape(G, N, K).contiguous(), q_col.reshape(G, K, N).contiguous()
    else:
        tiles = W.reshape(G, N // BLOCK, BLOCK, K // BLOCK, BLOCK).transpose(2, 3)  # (G, N/32, K/32, 32, 32)
        q, s = quantize_tiles(tiles, scaling_mode)
        q_row = q.transpose(2, 3).reshape(G, N, K)
        q_col = q_row.transpose(1, 2).contiguous()
        S_row = s.repeat_interleave(BLOCK, dim=1)  # (G, N, K/32)
        S_col = s.transpose(1, 2).repeat_interleave(BLOCK, dim=1)  # (G, K, N/32)
    e4m3, e8m0 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    if experts:
        s_row, s_col = _expert_blocked(S_row), _expert_blocked(S_col)
        # q_col: the (G, K, N) array seen as (G, N, K) with strides (N*K, 1, N).
        q_col = q_col.view(e4m3).as_strided((G, N, K), (N * K, 1, N))
        return q_row.view(e4m3), s_row.view(e8m0), q_col, s_col.view(e8m0)
    s_row, s_col = to_blocked(S_row[0]), to_blocked(S_col[0])
    q_col = q_col[0].view(e4m3).as_strided((N, K), (1, N))
    return q_row[0].view(e4m3), s_row.view(e8m0), q_col, s_col.view(e8m0)


# ---- byte-exact comparison ----


def assert_bytes_equal(actual: Tensor, expected: Tensor, name: str = "tensor") -> None:
    """Raises AssertionError unless the raw bytes agree (NaN payloads included), reporting the mismatch count, the
    first mismatching coordinate, both values and both bit patterns. Compares logical elements, so strides may
    differ; shapes and element sizes must match."""
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.element_size() == expected.element_size(), f"{name}: element sizes differ"
    int_type = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[actual.element_size()]
    a = actual.detach().cpu().contiguous().view(int_type)
    e = expected.detach().cpu().contiguous().view(int_type)
    diff = a != e
    n = int(diff.sum())
    if n == 0:
        return
    idx = tuple(int(i) for i in diff.nonzero()[0])
    mask = (1 << (8 * actual.element_size())) - 1
    av, ev = int(a[idx]) & mask, int(e[idx]) & mask
    width = 2 * actual.element_size()

    def show(t: Tensor) -> str:
        try:
            return repr(float(t.detach().cpu()[idx].float()))
        except (RuntimeError, TypeError):
            return "?"

    raise AssertionError(
        f"{name}: {n} of {a.numel()} elements differ; first at {idx}: actual {show(actual)} (0x{av:0{width}X}) "
        f"vs expected {show(expected)} (0x{ev:0{width}X})"
    )
