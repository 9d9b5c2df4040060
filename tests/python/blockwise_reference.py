"""A small pure-torch FP8 blockwise reference written from docs/numerics.md §13, independently of the C++
reference, as torch_reference.py is for MXFP8. Everything runs on the CPU in plain torch ops:

    widen to fp32 exactly; a block (128 values along one axis, or a 128x128 weight tile) holding NaN or Inf gets
        d = NaN (0x7FC00000) and every data byte 0x7F
    "fp32":  amax = max |v| clamped below at fl32(1e-12); m = fl32(448 / amax), the quotient computed in fp64 and
             rounded once to fp32
    "rceil": m = 2^(127 - s) with s the RCEIL E8M0 byte of amax (torch_reference.scale_bytes)
    q = e4m3(clamp(fl32(v * m), +-448)) by torch's RNE cast; d = fl32(1 / m), again through fp64

Outputs carry the ops' dtypes, shapes and strides: q_row (M, K), s_row fp32 (M, K/128) strides (1, M), q_col the
(K, M) array seen as (M, K) with strides (1, M), s_col fp32 (K, M/128) strides (1, K); weights: s_row (G, N/128,
roundup(K/128,4)) and s_col (G, K/128, roundup(N/128,4)) contiguous, padding 0.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_reference import E4M3_MAX, INPUT_DTYPES, e8m0_value, round_up, scale_bytes

BLOCK = 128
AMAX_FLOOR_BITS = 0x2B8CBCCC  # fl32(1e-12)
FACTOR_NAN_BITS = 0x7FC00000
E4M3_NAN = 0x7F
SCALING_MODES = ("fp32", "rceil")


def _f32(bits: int) -> Tensor:
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32)[0]


def multiplier(amax: Tensor, scaling_mode: str) -> Tensor:
    """m (fp32) of finite fp32 ``amax`` >= +0."""
    if scaling_mode == "fp32":
        amax = torch.maximum(amax, _f32(AMAX_FLOOR_BITS))
        return (448.0 / amax.double()).float()
    if scaling_mode == "rceil":
        return e8m0_value((254 - scale_bytes(amax, "rceil")) & 0xFF)
    raise ValueError(f'scaling_mode must be "fp32" or "rceil", got {scaling_mode!r}')


def quantize_values(f: Tensor, nonfinite: Tensor, m: Tensor) -> Tensor:
    """e4m3 bytes of fp32 ``f`` times the broadcast multiplier ``m``; 0x7F where ``nonfinite`` (broadcast)."""
    p = (f * m).clamp(-E4M3_MAX, E4M3_MAX)
    q = p.to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(nonfinite, torch.tensor(E4M3_NAN, dtype=torch.uint8), q)


def factor(m: Tensor, nonfinite: Tensor) -> Tensor:
    """d = fl32(1 / m) (fp32), NaN where ``nonfinite``."""
    d = (1.0 / m.double()).float()
    return torch.where(nonfinite, _f32(FACTOR_NAN_BITS), d)


def quantize_blocks(v: Tensor, scaling_mode: str = "fp32") -> tuple[Tensor, Tensor]:
    """Blocks along the last dim (size 128) of bf16, fp16 or fp32 ``v``: (data bytes like v, fp32 factors
    v.shape[:-1])."""
    assert v.dtype in INPUT_DTYPES and v.shape[-1] == BLOCK, (v.dtype, v.shape)
    f = v.float()
    nonfinite = ~torch.isfinite(f).all(-1)
    amax = torch.where(nonfinite.unsqueeze(-1), 0.0, f.abs()).amax(-1)
    m = multiplier(amax, scaling_mode)
    return quantize_values(f, nonfinite.unsqueeze(-1), m.unsqueeze(-1)), factor(m, nonfinite)


def _outer_major(d: Tensor) -> Tensor:
    """The (rows, cols) factors ``d`` stored rows fastest: strides (1, rows)."""
    rows, cols = d.shape
    out = torch.empty_strided((rows, cols), (1, rows), dtype=torch.float32)
    out.copy_(d)
    return out


def quantize(x: Tensor, scaling_mode: str = "fp32") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q_row, s_row, q_col, s_col) of x (M, K) with the dtypes, shapes and strides of
    torch.ops.mxq.quantize(..., format="fp8_blockwise"). Grouped outputs are these (each group's a slice)."""
    if x.dtype not in INPUT_DTYPES or x.dim() != 2:
        raise ValueError(f"x must be a 2-D bf16, fp16 or fp32 tensor, got {x.dtype} {tuple(x.shape)}")
    M, K = x.shape
    if M % BLOCK or K % BLOCK:
        raise ValueError(f"M and K must be multiples of {BLOCK}, got {M}x{K}")
    x = x.detach().cpu()
    q_row, d_row = quantize_blocks(x.reshape(M, K // BLOCK, BLOCK), scaling_mode)
    q_col, d_col = quantize_blocks(x.t().contiguous().reshape(K, M // BLOCK, BLOCK), scaling_mode)
    e4m3 = torch.float8_e4m3fn
    q_col = q_col.reshape(K, M).view(e4m3).as_strided((M, K), (1, M))
    return q_row.reshape(M, K).view(e4m3), _outer_major(d_row), q_col, _outer_major(d_col)


def values(q: Tensor, d: Tensor) -> Tensor:
    """fp32 (rows, cols) = fl32(e4m3(q) * d) with d the (rows, cols/128) factors of 1x128 blocks (on q's device)."""
    return q.float() * d.float().repeat_interleave(BLOCK, dim=1)


def tile_values(q: Tensor, d: Tensor) -> Tensor:
    """fp32 (rows, cols) = fl32(e4m3(q) * d) with d the factors of 128x128 tiles, (rows/128, >= cols/128) (a weight's
    per-expert matrix, its padding columns ignored)."""
    tiles = d[:, : q.shape[1] // BLOCK].float()
    return q.float() * tiles.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)


def dequantize(q: Tensor, d: Tensor) -> Tensor:
    """bf16 (rows, cols) = bf16(fl32(e4m3(q) * d)) with d the (rows, cols/128) factors."""
    return values(q.detach().cpu().contiguous().view(torch.float8_e4m3fn), d.detach().cpu()).bfloat16()


def quantize_weight(w: Tensor, scaling_mode: str = "fp32") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q_row, s_row, q_col, s_col) of w (G, N, K) or (N, K) in 128x128 tiles, as
    torch.ops.mxq.quantize_weight(..., "128x128", format="fp8_blockwise") returns them."""
    experts = w.dim() == 3
    w3 = (w if experts else w.unsqueeze(0)).detach().cpu()
    G, N, K = w3.shape
    if N % BLOCK or K % BLOCK:
        raise ValueError(f"N and K must be multiples of {BLOCK}, got {N}x{K}")
    tn, tk = N // BLOCK, K // BLOCK
    # (G, tn, tk, 128 * 128): tile (tn, tk)'s values, row-major inside the tile
    tiles = w3.reshape(G, tn, BLOCK, tk, BLOCK).permute(0, 1, 3, 2, 4).reshape(G, tn, tk, BLOCK * BLOCK)
    f = tiles.float()
    nonfinite = ~torch.isfinite(f).all(-1)
    amax = torch.where(nonfinite.unsqueeze(-1), 0.0, f.abs()).amax(-1)
    m = multiplier(amax, scaling_mode)
    q = quantize_values(f, nonfinite.unsqueeze(-1), m.unsqueeze(-1))
    q = q.reshape(G, tn, tk, BLOCK, BLOCK).permute(0, 1, 3, 2, 4).reshape(G, N, K)
    d = factor(m, nonfinite)  # (G, tn, tk)
    s_row = torch.zeros(G, tn, round_up(tk, 4))
    s_row[:, :, :tk] = d
    s_col = torch.zeros(G, tk, round_up(tn, 4))
    s_col[:, :, :tn] = d.transpose(1, 2)
    e4m3 = torch.float8_e4m3fn
    q_row = q.view(e4m3)
    q_col = q.transpose(1, 2).contiguous().view(e4m3).transpose(1, 2)  # strides (N*K, 1, N)
    if not experts:
        return q_row[0], s_row[0], q_col[0], s_col[0]
    return q_row, s_row, q_col, s_col


def padded_routed(
    x: Tensor, index: Tensor, counts: Tensor, scale: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """The padded row space of quantize_routed for FP8 blockwise, by hand: (padded x (Mp, K), offs_p, dest), every
    expert's rows padded to a multiple of 128, Mp = roundup(N + 127 E, 128), padding and tail rows 0."""
    x, index, counts = x.detach().cpu(), index.cpu().long(), counts.cpu().long()
    N, E, K = index.numel(), counts.numel(), x.shape[1]
    Mp = round_up(N + (BLOCK - 1) * E, BLOCK)
    rows = x[index]
    if scale is not None:
        rows = (rows.float() * scale.cpu()[:, None]).to(x.dtype)
    padded = torch.zeros(Mp, K, dtype=x.dtype)
    offs_p, dest = [], torch.empty(N, dtype=torch.int32)
    start, src = 0, 0
    for c in counts.tolist():
        padded[start : start + c] = rows[src : src + c]
        dest[src : src + c] = torch.arange(start, start + c, dtype=torch.int32)
        start += round_up(c, BLOCK)
        src += c
        offs_p.append(start)
    return padded, torch.tensor(offs_p, dtype=torch.int32), dest
