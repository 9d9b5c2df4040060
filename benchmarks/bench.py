#!/usr/bin/env python3
"""mxq's benchmark: the torch ops timed under CUDA-graph replay against a copy roof measured in the same run.

    python3 benchmarks/bench.py                   # every set; JSON under benchmarks/results/
    python3 benchmarks/bench.py --quick --plot quick.png
    python3 benchmarks/bench.py --list            # the cases the options select (no GPU needed)
    python3 benchmarks/bench.py --sets blockwise  # FP8 blockwise: fused vs the copy roof and torchao's quantizers
    python3 benchmarks/bench.py --eager           # what a call costs from Python without CUDA graphs
    python3 benchmarks/bench.py --moe-step        # an MoE layer step (dispatch, experts, combine, backward) by stage

Method, columns and JSON schema: benchmarks/README.md. Exit status: 0 ok; 1 an error, differing bytes or a failed
write (JSON, plot, stdout); 2 a bad option, no CUDA device or no mxq extension with CUDA kernels.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import ctypes
import dataclasses
import datetime
import functools
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SCHEMA, MIB, POISON = "mxq-bench/3", 1 << 20, 0xA5
MAIN_SHAPES = ((8192, 2048), (8192, 7168), (32768, 2048), (32768, 7168), (131072, 2048), (131072, 7168), (512, 4096))
QUICK_SHAPES = ((8192, 2048), (32768, 7168))
RAGGED_PAIRS = (((8160, 2880), (8192, 3072)), ((32736, 5120), (32768, 5120)))  # (ragged, its aligned neighbour)
SPLIT_SHAPE = (32768, 7168)  # the grouped and dtypes sets
SPLITS = (("dense", 0), ("random", 8), ("random", 64), ("random", 256), ("even", 8), ("skewed", 8))
WEIGHT_SHAPES = ((8, 4096, 7168), (64, 1536, 5120), (128, 768, 2048), (1, 7168, 2048))  # (G, N, K)
EAGER_SHAPES = ((128, 4096), (512, 4096), (2048, 4096), (8192, 4096))
ROUTED_SHAPES = ((16384, 7168, 256, 8), (16384, 2048, 128, 8), (16384, 4096, 8, 2), (4096, 7168, 64, 8))  # T K E k
ROUTINGS, ZIPF_S = ("uniform", "skewed"), 1.0  # skewed: expert weights 1/rank^ZIPF_S (expert_choices)
ROUTED_TARGETS = {"speedup": 1.8, "min_elements": 1 << 26, "pct_roof": 85.0, "skew": 1.03}  # issue 42
MOE_STEP_SHAPES = ((16384, 2048, 128, 8, 768), (4096, 7168, 64, 8, 2048))  # (T, D, E, top_k, expert hidden H)
# FP8 blockwise (docs/numerics.md §13): M*K >= 2^26, issue 50's 16384x7168 and 65536x2048 first; weights (G, N, K),
# G = 1 quantized as a dense Linear's 2-D (N, K) weight
BLOCKWISE, BLOCKWISE_MODE = "fp8_blockwise", "fp32"
BLOCKWISE_SHAPES = ((16384, 7168), (65536, 2048), (32768, 7168), (8192, 8192))
BLOCKWISE_WEIGHTS = ((1, 7168, 2048), (8, 4096, 7168))
BLOCKWISE_GROUPS = 8
SETS = ("main", "ragged", "grouped", "dtypes", "weights", "routed", "blockwise")
ROUTED_OPS = ("routed", "routed_scaled", "routed_unfused", "routed_torchao")
OPS = ("rowwise", "colwise", "fused", "composed", "dequantize", "weight", "copy", *ROUTED_OPS, "torchao_blockwise")
AXES = {"rowwise": ("q_row", "s_row"), "colwise": ("q_col", "s_col"), "fused": ("q_row", "s_row", "q_col", "s_col")}
NAMES = AXES["fused"]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROOF_COPY_BYTES, ROOF_COPIES = (256 * MIB, 1024 * MIB, 4096 * MIB), 30
TARGET_REPLAY_US, MIN_CALL_US, ESTIMATE_TBPS, WARMUP_ROUNDS = 1000.0, 2.0, 3.0, 2  # graph sizing, never reported
FULL_CHECK_ELEMENTS, BAND_ROWS = 1 << 25, 1024  # larger blocks: the CPU checks two row bands (verify_block)
EAGER_CALLS, EAGER_WARMUP, EAGER_GRAPH_CALLS, EAGER_TARGET = 200, 20, 20, 1.5
Sizes = collections.namedtuple("Sizes", "x q s_row s_col plain groups")  # bytes of one call's tensors


class Unavailable(Exception):
    """No CUDA device or no usable mxq: exit 2."""


# ---- cases ----


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: `op` on x (M, K) of `dtype`, its rows split `kind` into `groups`; weights: W (experts, M, K)."""

    set: str
    op: str
    M: int
    K: int
    dtype: str = "bf16"
    kind: str = "dense"  # dense, random, even, skewed; routed: uniform, skewed (the routing)
    groups: int = 0
    experts: int = 0
    scaling: str = ""  # weights: 1x32 or 32x32
    neighbour: tuple | None = None  # ragged: the aligned shape it is compared with
    top_k: int = 0  # routed: M = T tokens, groups = E experts, N = T * top_k routed rows
    format: str = "mxfp8"  # the block format: mxfp8, or fp8_blockwise (the blockwise set)

    elements = property(lambda c: max(c.experts, 1) * c.M * c.K * max(c.top_k, 1))  # routed: N * K
    block = property(lambda c: (c.set, c.M, c.K, c.dtype, c.kind, c.groups, c.experts, c.scaling, c.format))
    key = property(lambda c: (c.experts, c.M, c.K, c.dtype, c.format))  # cases sharing one set of buffers
    blockwise = property(lambda c: c.format == BLOCKWISE)
    routed = property(lambda c: c.op in ROUTED_OPS)  # the routed set's ops, and FP8 blockwise's in its set
    # the quantize ops' block size and rule; the format argument only for FP8 blockwise, so that an MXFP8 case calls
    # the ops as a build from before the format argument takes them (an A/B against an older commit)
    quant_args = property(lambda c: (128, BLOCKWISE_MODE, BLOCKWISE) if c.blockwise else (32, "rceil"))
    weight_shape = property(
        lambda c: (c.M, c.K) if c.blockwise and c.experts == 1 else (c.experts, c.M, c.K)  # W's shape, weight op
    )

    def shape_text(self) -> str:
        return f"{self.experts}x{self.M}x{self.K}" if self.op == "weight" else f"{self.M}x{self.K}"

    def grouping_text(self) -> str:
        if self.routed:
            return f"E={self.groups} k={self.top_k} {self.kind}"
        if self.op == "weight" or self.kind == "dense":
            return self.scaling or "dense"
        return f"G={self.groups}" + {"random": "", "even": " even", "skewed": " skew90"}[self.kind]

    def text(self) -> str:
        return f"{self.set:<10}{self.op:<18}{self.shape_text():<14}{self.dtype:<5}{self.grouping_text():<19}"

    def fields(self) -> dict:  # the case in the JSON's verify and errors entries
        named = {"set": self.set, "op": self.op, "shape": self.shape_text(), "dtype": self.dtype, "groups": self.groups}
        return named | {"groups_kind": self.kind, "scaling": self.scaling or None, "format": self.format}


def plan(a) -> list[Case]:
    """Every case the options select, set after set, the cases of one block together."""
    cases = []

    def add(set_, shape, dtype, splits, ops, neighbour=None):
        cases.extend(Case(set_, op, *shape, dtype, k, g, neighbour=neighbour) for k, g in splits for op in ops)

    for s in a.sets:
        if s == "main":
            for shape in a.shapes:  # dense bf16 adds the copy (the shape's own ceiling) after fused
                add(s, shape, a.dtype, [("dense", 0)], OPS[:3] + ("copy",) * (a.dtype == "bf16") + OPS[3:5])
                add(s, shape, a.dtype, [("random", g) for g in a.groups], OPS[:5])
        elif s == "ragged":
            for ragged, aligned in RAGGED_PAIRS[: 1 if a.quick else 2]:
                add(s, ragged, a.dtype, [("dense", 0)], OPS[:5], neighbour=aligned)
                add(s, aligned, a.dtype, [("dense", 0)], OPS[:5])
        elif s == "grouped":
            add(s, SPLIT_SHAPE, a.dtype, SPLITS, OPS[:5])
        elif s == "dtypes":
            for dtype in DTYPES:
                add(s, SPLIT_SHAPE, dtype, [("dense", 0)], ("fused", "rowwise", "colwise"))
        elif s == "blockwise":
            for M, K in BLOCKWISE_SHAPES:
                ops = ("fused", "copy", "torchao_blockwise", "rowwise", "colwise")
                cases += [Case(s, op, M, K, a.dtype, format=BLOCKWISE) for op in ops]
                cases.append(Case(s, "fused", M, K, a.dtype, "random", BLOCKWISE_GROUPS, format=BLOCKWISE))
            cases += [
                Case(s, "weight", N, K, a.dtype, experts=G, scaling="128x128", format=BLOCKWISE)
                for G, N, K in BLOCKWISE_WEIGHTS
            ]
            cases += [  # the routed input stage: uniform routing (torchao has no FP8 blockwise routed pipeline)
                Case(s, op, T, K, "bf16", "uniform", E, top_k=k, format=BLOCKWISE)
                for T, K, E, k in ROUTED_SHAPES
                for op in ROUTED_OPS[:3]
            ]
        elif s == "routed":
            cases += [
                Case(s, op, T, K, "bf16", kind, E, top_k=k)
                for T, K, E, k in ROUTED_SHAPES
                for kind in ROUTINGS
                for op in ROUTED_OPS
            ]
        else:
            cases += [
                Case(s, "weight", N, K, experts=G, scaling=x) for G, N, K in WEIGHT_SHAPES for x in ("1x32", "32x32")
            ]
    return [c for c in cases if c.op in a.ops]


def roundup(n: int, m: int) -> int:
    return -(-n // m) * m


def splitmix(seed: int):
    """uniform(lo, hi) on a SplitMix64 stream: the generator `mxq bench` drew its group sizes with (same offsets)."""
    state, mask = seed, 2**64 - 1

    def uniform(lo: int, hi: int) -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return lo + (z ^ (z >> 31)) % (hi - lo + 1)

    return uniform


def group_offsets(kind: str, M: int, G: int, seed: int, align: int = 32) -> list[int]:
    """G cumulative end offsets, groups multiples of `align` (the format's block: 32, or 128 for FP8 blockwise).
    random: at least one empty group (G >= 2) and an uncovered tail; even: near-equal groups covering M; skewed: one
    random group holds 90% of M, the others random sizes."""
    units = M // align
    if kind == "even":
        return [(g + 1) * M // G // align * align if g + 1 < G else M for g in range(G)]
    if kind == "random":
        uniform = splitmix((seed + G) ^ 0xA11CE)
        covered = units - (uniform(1, max(1, units // 8)) if units >= 2 else 0)
        ends = sorted(uniform(0, covered) for _ in range(G - 1)) + [covered]
        if G >= 2 and ends[0] != 0 and all(ends[g] != ends[g - 1] for g in range(1, G)):
            g = uniform(1, G - 1)  # make group g empty
            ends[g - 1] = ends[g]
        return [align * e for e in ends]
    uniform = splitmix((seed + G) ^ 0x5CE3)
    big = units if G == 1 else min(math.floor(0.9 * units + 0.5), units)
    big_group = uniform(0, G - 1)
    cuts = sorted(uniform(0, units - big) for _ in range(G - 2)) + [units - big]
    sizes = [b - a for a, b in zip([0, *cuts], cuts)]
    sizes.insert(big_group, big)
    return [align * e for e in itertools.accumulate(sizes)]


# ---- bytes ----


def traffic(op: str, z: Sizes) -> tuple[int, int]:
    """(read, written) bytes of one call. Every op writes every byte of its allocations, padding and slack included
    (docs/numerics.md §7). composed: the rowwise kernel, the colwise kernel writing plain S_col (K, M/32) to its
    workspace, the swizzle reading it back and writing s_col. dequantize: q_row and s_row (dense) or q_col and
    K-groups s_col (grouped) in, bf16 out. weight: W in, both axes and both per-expert scale tensors out (either
    scaling). copy: x's bytes in and out. The scale tensors are the format's: MXFP8's E8M0 bytes, or FP8
    blockwise's fp32 factors (4 B per 128 elements on each axis: bf16 x moves 2 + 2 + 8/128 B an element fused).
    torchao_blockwise: torchao's lhs and transposed-lhs quantizers give the fused op's four outputs, counted as the
    fused op's bytes (its two kernels read x twice), so its TB/s compares times with fused."""
    return {
        "rowwise": (z.x, z.q + z.s_row),
        "colwise": (z.x, z.q + z.s_col),
        "fused": (z.x, 2 * z.q + z.s_row + z.s_col),
        "torchao_blockwise": (z.x, 2 * z.q + z.s_row + z.s_col),
        "weight": (z.x, 2 * z.q + z.s_row + z.s_col),
        "composed": (2 * z.x + z.plain, 2 * z.q + z.s_row + z.plain + z.s_col),
        "dequantize": (z.q + (z.s_col if z.groups else z.s_row), 2 * z.q),
        "copy": (z.x, z.x),
    }[op]


def meta_outputs(c: Case) -> dict:
    """The op's four outputs as meta tensors: the allocations' dtypes, shapes and strides, from the op's Meta impl."""
    block, mode, *fmt = c.quant_args
    if c.op == "weight":
        w = torch.empty(c.weight_shape, dtype=DTYPES[c.dtype], device="meta")
        return dict(zip(NAMES, torch.ops.mxq.quantize_weight.default(w, mode, c.scaling, True, True, *fmt)))
    x = torch.empty(c.M, c.K, dtype=DTYPES[c.dtype], device="meta")
    offs = torch.empty(c.groups, dtype=torch.int32, device="meta") if c.groups else None
    return dict(zip(NAMES, torch.ops.mxq.quantize.default(x, block, mode, offs, *fmt)))


def routed_meta(c: Case) -> tuple[dict, list]:
    """The routed inputs (x, index int64, counts int32, scale or None) and quantize_routed's six outputs, as meta."""
    meta = lambda *shape, dtype=torch.int64: torch.empty(*shape, dtype=dtype, device="meta")
    N = c.M * c.top_k
    args = [meta(c.M, c.K, dtype=DTYPES[c.dtype]), meta(N), meta(c.groups, dtype=torch.int32)]
    args.append(meta(N, dtype=torch.float32) if c.op == "routed_scaled" else None)
    _, mode, *fmt = c.quant_args
    outs = torch.ops.mxq.quantize_routed.default(*args, mode, True, True, *fmt)
    return dict(zip(("x", "index", "counts", "scale"), args)), list(outs)


def routed_traffic(c: Case) -> tuple[int, int]:
    """(read, written) that the fused routed op must move, for every routed op (unfused and torchao produce the
    same result, so TB/s and % roof compare times): each routed row once (N * K * x's size, not T * K), index,
    counts (and scale); q_row, q_col, both grouped scale tensors (allocation sizes), offs_p and dest. Not counted:
    the op's 8-byte-a-padded-row plan (its own workspace, ~0.1%)."""
    args, outs = routed_meta(c)
    x = args["x"]
    read = c.M * c.top_k * c.K * x.element_size() + sum(args[k].nbytes for k in ("index", "counts"))
    return read + (args["scale"].nbytes if args["scale"] is not None else 0), sum(t.nbytes for t in outs)


def case_bytes(c: Case) -> tuple[int, int, int]:
    """(read, written, effective) bytes of one call; effective: the fused count for fused and composed (the work)."""
    if c.routed:
        read, written = routed_traffic(c)
        return read, written, read + written
    m, n = meta_outputs(c), c.elements
    z = Sizes(n * DTYPES[c.dtype].itemsize, n, m["s_row"].nbytes, m["s_col"].nbytes, n // 32, c.groups)
    read, written = traffic(c.op, z)
    return read, written, sum(traffic("fused", z)) if c.op in ("fused", "composed") else read + written


def pick_roof(roof: list[dict], nbytes: int) -> dict:
    """The roof point whose traffic (read + written: twice the copy) is nearest `nbytes` on a log scale."""
    return min(roof, key=lambda p: abs(math.log(2 * p["copy_bytes"] / nbytes)))


def calls_per_graph(nbytes: int, buffers: int) -> int:
    """A multiple of the buffer count, enough calls for a replay of about TARGET_REPLAY_US."""
    wanted = min(max(math.ceil(TARGET_REPLAY_US / max(MIN_CALL_US, nbytes / (ESTIMATE_TBPS * 1e6))), 1), 256)
    return roundup(wanted, buffers)


# ---- buffers and calls ----


def random_input(rows: int, cols: int, dtype: str, seed: int) -> torch.Tensor:
    """Uniform in (-1, 1) times 2^e, e drawn per 32x32 tile from [-12, 12]: the same values for every dtype (rounded
    to nearest even), never NaN or Inf."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.rand(rows, cols, device="cuda", generator=g).mul_(2).sub_(1)
    e = torch.randint(-12, 13, (rows // 32, 1, cols // 32, 1), device="cuda", generator=g)
    x.view(rows // 32, 32, cols // 32, 32).mul_(torch.exp2(e.float()))
    return x.to(DTYPES[dtype])


class Workspace:
    """The rotating buffer sets of one (experts, M, K, dtype): inputs totalling >= 2x L2 at 1 byte an element (so x
    of any dtype and the e4m3 q that dequantize reads both rotate through twice the L2), outputs sized for the
    largest group count of its cases. quantize_weight has no out= form: its outputs come from the graph's pool."""

    def __init__(self, c: Case, max_groups: int, l2: int, seed: int):
        n, shape = c.elements, c.weight_shape if c.op == "weight" else (c.M, c.K)
        self.sets = max(2, -(-2 * l2 // n))
        self.x = [random_input(n // c.K, c.K, c.dtype, seed + i).view(shape) for i in range(self.sets)]
        self.out, self.copies = [], []  # copies: the copy row's destinations, made when a case asks (copy_dst)
        if c.op != "weight":
            most = [meta_outputs(dataclasses.replace(c, groups=g)) for g in (0, max_groups)]
            cap = {k: max(m[k].nbytes for m in most) for k in NAMES}
            self.out = [{k: torch.empty(cap[k], dtype=torch.uint8, device="cuda") for k in NAMES} for _ in self.x]

    def copy_dst(self, i: int) -> torch.Tensor:
        """Set i's destination of the copy row, its own: the outputs keep the MXFP8 that dequantize reads."""
        if not self.copies:
            self.copies = [torch.empty(x.nbytes, dtype=torch.uint8, device="cuda") for x in self.x]
        return self.copies[i]

    def views(self, i: int, c: Case) -> dict:
        """Set i's outputs with the dtype, shape and strides of c's grouping."""
        meta = meta_outputs(c).items()
        return {k: self.out[i][k][: m.nbytes].view(m.dtype).as_strided(m.shape, m.stride()) for k, m in meta}


def expert_choices(routing: str, T: int, E: int, top_k: int, seed: int) -> torch.Tensor:
    """(T, top_k) int64 experts, distinct per token, drawn on the CPU from the seed as a router's top-k would give
    them. uniform: the top_k of T x E uniform keys (every expert equally likely); skewed: Zipf-like, the expert of
    rank r (a seeded permutation) weighted 1 / r^ZIPF_S, top_k drawn per token without replacement in proportion to
    the weights (Gumbel top-k: the top_k of log weight + Gumbel noise)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + E * 31 + top_k)
    keys = torch.rand(T, E, generator=g, dtype=torch.float64)
    if routing == "skewed":
        rank = torch.randperm(E, generator=g).double() + 1
        keys = -torch.log(-torch.log(keys.clamp_min(1e-300))) - ZIPF_S * torch.log(rank)
    return keys.topk(top_k, dim=1).indices


def route(expert_ids: torch.Tensor, E: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index (N,) int64, counts (E,) int32): the source token of each routed row in expert-sorted order and the
    rows per expert, as the dispatcher computes them."""
    flat = expert_ids.reshape(-1)
    return torch.argsort(flat, stable=True) // expert_ids.shape[1], torch.bincount(flat, minlength=E).to(torch.int32)


class RoutedWorkspace:
    """One routed block's buffers: x (T, K) in rotating sets (>= 2x L2 at 1 byte an element, as Workspace), one
    routing (index, counts) and gate scores (N,) fp32 in (0, 1). quantize_routed has no out= form: its outputs come
    from the graph's pool and rotate with the calls (capture)."""

    def __init__(self, c: Case, l2: int, seed: int):
        self.sets = max(2, -(-2 * l2 // (c.M * c.K)))
        self.x = [random_input(c.M, c.K, c.dtype, seed + i) for i in range(self.sets)]
        ids = expert_choices(c.kind, c.M, c.groups, c.top_k, seed)
        index, counts = route(ids, c.groups)
        scale = torch.rand(index.numel(), generator=torch.Generator().manual_seed(seed))
        self.index, self.counts, self.scale = (t.cuda() for t in (index, counts, scale))
        self.routing = {
            "max": int(counts.max()),
            "mean": counts.float().mean().item(),
            "empty": int((counts == 0).sum()),
        }


@functools.cache
def torchao_pipeline():
    """(fn, None, note), fn(x, index, counts, E) torchao's routed input stage, or (None, why it cannot run, None).
    torchao's pieces (its prototype API, 0.18): TorchTitan's gather x[index], moe_training.ep.permute.permute_and_pad
    (the Triton generate_permute_indices kernel, a zero row appended, the padding gather; an empty expert gets 32
    rows), mx_formats.kernels.triton_to_mxfp8_dim0 / _dim1 (rceil) and the M-groups / K-groups scale rearranges.
    torchao enables those casts on SM100 only, for one PTX instruction (cvt.rp.satfinite.ue8m0x2.f32) in the scale;
    below SM100 they run here with torchao's own portable scale formula in its place (the note says so)."""
    try:
        import torchao
        import torchao.utils as ao_utils

        sm100 = ao_utils.is_sm_at_least_100
        native = sm100()
        ao_utils.is_sm_at_least_100 = lambda: True  # mx_formats.kernels reads it once, at import
        try:
            from torchao.prototype.moe_training.ep.permute import permute_and_pad
            from torchao.prototype.moe_training.kernels import mxfp8 as ao_moe
            from torchao.prototype.mx_formats import kernels as ao_mx
        finally:
            ao_utils.is_sm_at_least_100 = sm100
    except Exception as e:  # noqa: BLE001 (absent, or an incompatible build)
        return None, f"torchao is not importable ({type(e).__name__}: {e})", None
    if not getattr(ao_mx, "_triton_kernels_available", False):
        why = f"torchao {torchao.__version__}: its MXFP8 Triton cast kernels are not available (no Triton, CUDA < 12.8)"
        return None, why, None
    note = f"torchao {torchao.__version__}"
    if not native:  # the kernels' USE_PTX is `not IS_ROCM`: off selects the portable formula
        import triton.language as tl

        ao_mx.IS_ROCM = tl.constexpr(True)
        note += ", casts with the portable scale formula (torchao's cvt.rp.ue8m0 PTX is SM100-only)"

    def pipeline(x, index, counts, E):
        _, padded, _, _, offs = permute_and_pad(x.index_select(0, index), counts, 1, E, 32)
        q_row, s_row = ao_mx.triton_to_mxfp8_dim0(padded, 32, "rceil")
        q_col, s_col = ao_mx.triton_to_mxfp8_dim1(padded, 32, "rceil")
        s_row = ao_moe.triton_mx_block_rearrange_2d_M_groups(s_row, offs)
        return q_row, s_row, q_col, ao_moe.triton_mx_block_rearrange_2d_K_groups(s_col, offs // 32), offs

    return pipeline, None, note


@functools.cache
def torchao_blockwise():
    """(kernels, None, note): torchao's FP8 blockwise Triton quantizers (torchao.prototype.blockwise_fp8_training
    .kernels, 0.18: triton_fp8_blockwise_act_quant_lhs and _transposed_lhs, the pair that gives the fused op's four
    outputs), or (None, why they cannot run, None)."""
    try:
        import torchao
        from torchao.prototype.blockwise_fp8_training import kernels
    except Exception as e:  # noqa: BLE001 (absent, or an incompatible build)
        return None, f"torchao is not importable ({type(e).__name__}: {e})", None
    return kernels, None, f"torchao {torchao.__version__}"


def torchao_blockwise_op(x: torch.Tensor) -> tuple:
    """torchao's FP8 blockwise quantization of both axes: (q_row, d_row) by the lhs kernel, (q_col as the (K, M)
    array, d_col) by the transposed-lhs kernel; rule fp32 (amax / 448), as mxq's "fp32"."""
    ao = torchao_blockwise()[0]
    return (*ao.triton_fp8_blockwise_act_quant_lhs(x, 128), *ao.triton_fp8_blockwise_act_quant_transposed_lhs(x, 128))


def skip_unavailable(cases: list[Case]) -> tuple[list[Case], list[dict]]:
    """The cases that can run, and a record (printed, and kept in the JSON's `skipped`) of each that cannot:
    routed_torchao and torchao_blockwise without a usable torchao."""
    why = {}
    for op, probe in (("routed_torchao", torchao_pipeline), ("torchao_blockwise", torchao_blockwise)):
        _, why[op], note = probe() if any(c.op == op for c in cases) else (None, None, None)
        if note:
            print(f"{op}: {note}")
    skipped = [c.fields() | {"reason": why[c.op]} for c in cases if why.get(c.op)]
    for r in skipped:
        print(f"SKIPPED: {r['set']} {r['op']} {r['shape']} {r['groups_kind']} E={r['groups']}: {r['reason']}")
    return [c for c in cases if not why.get(c.op)], skipped


def routed_op(op: str, c: Case, x, ws: RoutedWorkspace, scaled: bool = False):
    """One call of a routed op in c's format: fused (routed; routed_scaled, or `scaled`: with the gate scores), the
    unfused composition or torchao's pipeline."""
    if op == "routed_torchao":
        return torchao_pipeline()[0](x, ws.index, ws.counts, c.groups)
    scale = ws.scale if scaled or op == "routed_scaled" else None
    _, mode, *fmt = c.quant_args
    if op == "routed_unfused":
        from mxq.dispatch import quantize_routed_composed  # gather, pad (index_copy_ at dest), mxq.quantize(offs_p)

        return tuple(quantize_routed_composed(x, ws.index, ws.counts, scale=scale, scaling_mode=mode, format=c.format))
    return torch.ops.mxq.quantize_routed.default(x, ws.index, ws.counts, scale, mode, True, True, *fmt)


def copy_into(x: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """x's bytes into dst (uint8, as many bytes), as int64 by an elementwise kernel: a same-dtype copy_ would be a
    cudaMemcpyAsync, which a graph replays as a memcpy node on the copy engines, slower than the roof."""
    return torch.bitwise_and(x.reshape(-1).view(torch.int64), -1, out=dst.view(torch.int64))


def make_call(c: Case, ws: Workspace, offs):
    """One call of c's op on rotation set i, into the set's buffers where the op has an out= form."""
    ops, x, (block, mode, *fmt) = torch.ops.mxq, ws.x, c.quant_args
    if c.routed:
        return lambda i: routed_op(c.op, c, x[i], ws)
    if c.op == "weight":
        return lambda i: ops.quantize_weight.default(x[i], mode, c.scaling, True, True, *fmt)
    if c.op == "torchao_blockwise":
        return lambda i: torchao_blockwise_op(x[i])
    if c.op == "composed":
        return lambda i: ops.quantize_composed.default(x[i], 32, "rceil", offs)
    if c.op == "copy":
        return lambda i: copy_into(x[i], ws.copy_dst(i))
    outs = [ws.views(i, c) for i in range(ws.sets)]
    if c.op == "dequantize" and offs is None:  # the forward operand
        return lambda i: ops.dequantize.default(outs[i]["q_row"], outs[i]["s_row"], None, "blocked")
    if c.op == "dequantize":  # the wgrad operand
        return lambda i: ops.dequantize.default(outs[i]["q_col"].t(), outs[i]["s_col"], offs, "k_groups")
    kw = [{k: o[k] for k in AXES[c.op]} for o in outs]
    return lambda i: ops.quantize.out(x[i], block, mode, offs, *fmt, **kw[i])


# ---- graphs, rounds, roof ----


def count_kernel_nodes(graph) -> int | None:
    """Kernel nodes of a captured graph, through the driver API on torch's cudaGraph_t; None when unknown."""
    try:
        cu, ptr = ctypes.CDLL("libcuda.so.1"), ctypes.POINTER
        cu.cuGraphGetNodes.argtypes = [ctypes.c_void_p, ptr(ctypes.c_void_p), ptr(ctypes.c_size_t)]
        cu.cuGraphNodeGetType.argtypes = [ctypes.c_void_p, ptr(ctypes.c_int)]
        handle, n, kind = ctypes.c_void_p(graph.raw_cuda_graph()), ctypes.c_size_t(0), ctypes.c_int(-1)
        if cu.cuGraphGetNodes(handle, None, ctypes.byref(n)) != 0:
            return None
        nodes = (ctypes.c_void_p * n.value)()
        if cu.cuGraphGetNodes(handle, nodes, ctypes.byref(n)) != 0:
            return None
        return sum(cu.cuGraphNodeGetType(v, ctypes.byref(kind)) == 0 and kind.value == 0 for v in nodes[: n.value])
    except (OSError, AttributeError, RuntimeError):
        return None


@dataclasses.dataclass
class Timed:
    case: Case
    graph: object
    buffers: int
    calls: int
    kernel_nodes: int | None
    keep: object  # what the graph reads (the workspace, offs): it must outlive the graph
    samples: list = dataclasses.field(default_factory=list)  # us per call, one per round


def capture(c: Case, ws: Workspace, offs, pool) -> Timed:
    """c's graph: `calls` back-to-back calls rotating over the workspace's sets. What a call allocates stays alive
    for `buffers` calls, so it rotates too. All graphs share one memory pool: no graph's outputs are read."""
    call, calls = make_call(c, ws, offs), calls_per_graph(sum(case_bytes(c)[:2]), ws.sets)
    call(0)  # the first call outside the graph (lazy initialisation)
    torch.cuda.synchronize()
    try:
        graph, kept = torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:  # an older torch: the graph cannot be inspected
        graph, kept = torch.cuda.CUDAGraph(), False
    alive = collections.deque(maxlen=ws.sets)
    with torch.cuda.graph(graph, pool=pool):
        for i in range(calls):
            alive.append(call(i % ws.sets))
    alive.clear()
    nodes = count_kernel_nodes(graph) if kept else None
    if kept:
        graph.instantiate()
    if nodes is not None and nodes < calls:
        raise RuntimeError(f"{nodes} kernel nodes for {calls} calls: the op does not launch on the caller's stream")
    return Timed(c, graph, ws.sets, calls, nodes, (ws, offs))


def event_pairs(n: int) -> list:
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]


def median_ms(fn, n: int) -> float:
    """The median of n calls of fn, each timed between CUDA events, after 3 untimed ones."""
    pairs = event_pairs(n + 3)
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs[3:])


def time_rounds(timed: list[Timed], rounds: int, replays: int) -> None:
    """Every round replays every graph in turn (`replays` times: their median), so a slow minute of the machine
    reaches all cases alike; the first WARMUP_ROUNDS are not kept."""
    for r in range(WARMUP_ROUNDS + rounds):
        t0, events = time.perf_counter(), [event_pairs(replays) for _ in timed]
        for t, pairs in zip(timed, events):
            for start, end in pairs:
                start.record()
                t.graph.replay()
                end.record()
        torch.cuda.synchronize()
        for t, pairs in zip(timed, events):
            if r >= WARMUP_ROUNDS:
                t.samples.append(statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3 / t.calls)
        label = "warm-up" if r < WARMUP_ROUNDS else f"round {r - WARMUP_ROUNDS + 1}/{rounds}"
        print(f"   {label}: {len(timed)} graphs in {time.perf_counter() - t0:.2f} s", flush=True)


def measure_roof(when: str) -> list[float]:
    """TB/s (read + written) of a device-to-device copy_ (cudaMemcpyAsync) per ROOF_COPY_BYTES: median of
    ROOF_COPIES copies between events, issued directly (a memcpy node replayed from a graph ran slower)."""
    src = torch.full((ROOF_COPY_BYTES[-1],), 0x3C, dtype=torch.uint8, device="cuda")
    dst, tbps = torch.empty_like(src), []
    for _ in range(150):  # ~0.3 s of copying first: clocks up
        dst.copy_(src)
    for n in ROOF_COPY_BYTES:
        tbps.append(2 * n / median_ms(lambda n=n: dst[:n].copy_(src[:n]), ROOF_COPIES) / 1e9)
    src = dst = None  # freed before empty_cache
    torch.cuda.empty_cache()
    print(f"copy roof ({when}): " + "   ".join(f"{fmt_bytes(n)} {t:.3f} TB/s" for n, t in zip(ROOF_COPY_BYTES, tbps)))
    return tbps


# ---- checks against the CPU reference ----


def mismatches(a: torch.Tensor, b: torch.Tensor, strides: bool = True) -> int:
    """Bytes that differ (on a's device); all of them when dtype, shape or (if asked) strides differ. Equal strides
    compare in storage order, so q_col's (1, M) strides cost no copy."""
    if a.dtype != b.dtype or a.shape != b.shape or (strides and a.stride() != b.stride()):
        return max(a.nbytes, b.nbytes, 1)
    order = sorted(range(a.dim()), key=lambda d: -a.stride(d)) if a.stride() == b.stride() else range(a.dim())
    a, b = (t.permute(*order).contiguous().view(-1).view(torch.uint8) for t in (a, b))
    return int((a != b.to(a.device)).sum())


def run_op(op: str, c: Case, x: torch.Tensor, offs, fused: dict | None = None, grouped: bool | None = None) -> dict:
    """c's op on x, CUDA or CPU (the CPU dispatch is the bit-exact reference); out= forms into poisoned outputs.
    dequantize reads `fused`: q_row, s_row, or when `grouped` (default: offs given) q_col, s_col."""
    ops, (block, mode, *fmt) = torch.ops.mxq, c.quant_args
    if op in AXES:
        meta = ops.quantize.default(x.to("meta"), block, mode, None if offs is None else offs.to("meta"), *fmt)
        out = {k: torch.empty_strided(m.shape, m.stride(), dtype=m.dtype, device=x.device) for k, m in zip(NAMES, meta)}
        out = {k: poisoned(t) for k, t in out.items() if k in AXES[op]}
        ops.quantize.out(x, block, mode, offs, *fmt, **out)
        return out
    if op == "torchao_blockwise":
        return dict(zip(("q_row", "s_row", "q_col_t", "s_col"), torchao_blockwise_op(x)))
    if op in ("composed", "weight"):
        args = (x, block, mode, offs) if op == "composed" else (x, mode, c.scaling, True, True, *fmt)
        return dict(zip(NAMES, getattr(ops, "quantize_" + op).default(*args)))
    if offs is not None if grouped is None else grouped:  # the wgrad operand
        layout = "blocked" if offs is None else "k_groups"
        return {"out": ops.dequantize.default(fused["q_col"].t(), fused["s_col"], offs, layout)}
    return {"out": ops.dequantize.default(fused["q_row"], fused["s_row"], None, "blocked")}


def poisoned(t: torch.Tensor) -> torch.Tensor:
    """t with every byte of its storage POISON (through the storage: FP8 blockwise's factors are (1, M)-strided fp32,
    which no uint8 view of t can cover)."""
    torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).fill_(POISON)
    return t


def unblock(s: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The (rows, cols) matrix of a blocked layout (docs/numerics.md §5.2): 128x4 atoms, rows in four 32-row bands."""
    return s.reshape(rows // 128, cols // 4, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(rows, cols)


def plain_scales(name: str, s: torch.Tensor, M: int, K: int, offs: list | None) -> torch.Tensor:
    """S_row (M, K/32) or S_col (K, covered tokens / 32) from a blocked, M-groups or K-groups allocation (§6). FP8
    blockwise's fp32 factors are plain matrices already, grouped or not: returned as they are."""
    if s.dtype == torch.float32:
        return s.cpu()
    s, rows, pieces, start, prev = s.cpu().view(torch.uint8).reshape(-1), roundup(K, 128), [], 0, 0
    if name == "s_row":
        p = unblock(s, s.numel() // roundup(K // 32, 4), roundup(K // 32, 4))
        for end in [M] if offs is None else [*offs, M]:  # G groups and the tail, each from an atom row
            pieces.append(p[start : start + end - prev, : K // 32])
            start, prev = start + roundup(end - prev, 128), end
        return torch.cat(pieces)
    for end in [M] if offs is None else offs:  # the tail's colwise scales are not placed
        cols = (end - prev) // 32
        pieces.append(unblock(s[start * rows : (start + roundup(cols, 4)) * rows], rows, roundup(cols, 4))[:K, :cols])
        start, prev = start + roundup(cols, 4), end
    return torch.cat(pieces, 1)


def band(name: str, t: torch.Tensor, rows: tuple, M: int, K: int, offs, cover: int, grouped: bool) -> torch.Tensor:
    """Rows [a, b) of an output of x (M, K) on the CPU, scales as plain matrices; s_col and the grouped dequantize
    output (K, M) only up to `cover`, the end of the covered tokens (the tail has no colwise scales)."""
    a, b = rows
    end, block = max(a, min(b, cover)), 128 if t.dtype == torch.float32 else 32  # FP8 blockwise: fp32, 128
    if name in ("s_row", "s_col"):
        p = plain_scales(name, t, M, K, offs)
        return p[a:b] if name == "s_row" else p[:, a // block : end // block]
    return (t[:, a:end] if name == "out" and grouped else t[a:b]).cpu()


def verify_block(block: list[Case], ws: Workspace, offs, offs_list: list | None) -> list[dict]:
    """The block's GPU outputs against the same ops on the CPU: every byte up to FULL_CHECK_ELEMENTS; above, the
    first and last BAND_ROWS rows (weights: experts) against the CPU ops on those rows (scales compared as plain
    matrices), and every byte of rowwise, colwise and composed against fused on the device. copy == x's bytes.
    torchao_blockwise: its four outputs == mxq's fused ones on the device, every byte (finite inputs: the same rule).
    A 2-D weight (FP8 blockwise, G = 1) is checked whole."""
    c0, x, ops, records = block[0], ws.x[0], [c.op for c in block], []
    two_d = c0.op == "weight" and x.dim() == 2
    full, grouped = c0.elements <= FULL_CHECK_ELEMENTS or two_d, offs is not None

    def record(op: str, check: str, pairs: list, strides: bool = True) -> None:
        bad, nbytes = sum(mismatches(r, t, strides) for r, t in pairs), sum(r.nbytes for r, _ in pairs)
        records.append(c0.fields() | {"op": op, "check": check, "bytes": nbytes, "mismatches": bad, "ok": bad == 0})

    if "copy" in ops:
        got = copy_into(x, torch.full((x.nbytes,), POISON, dtype=torch.uint8, device=x.device))
        record("copy", "== x (device)", [(x.reshape(-1).view(torch.uint8), got.view(torch.uint8))])
    needs_fused = c0.op != "weight" and bool({"fused", "dequantize", "torchao_blockwise"} & set(ops) or not full)
    gpu_fused = run_op("fused", c0, x, offs) if needs_fused else None
    if "torchao_blockwise" in ops:
        ao, f = run_op("torchao_blockwise", c0, x, offs), gpu_fused
        pairs = [(f["q_row"], ao["q_row"]), (f["s_row"], ao["s_row"]), (f["q_col"].t(), ao["q_col_t"])]
        record("torchao_blockwise", "== fused (device)", [*pairs, (f["s_col"], ao["s_col"])])
    skip = ("copy", "torchao_blockwise")
    gpu = {op: gpu_fused if op == "fused" else run_op(op, c0, x, offs, gpu_fused) for op in ops if op not in skip}
    for op in set(gpu) & {"rowwise", "colwise", "composed"} if not full else ():
        record(op, "== fused (device)", [(gpu_fused[k], gpu[op][k]) for k in gpu[op]])
    last = c0.experts if c0.op == "weight" and not two_d else c0.M
    n = min(last, 1 if c0.op == "weight" else BAND_ROWS)
    cover = c0.M if c0.blockwise else (offs_list or [c0.M])[-1]  # FP8 blockwise quantizes the tail on both axes
    xs = {(a, b): x[a:b].cpu() for a, b in ([(0, last)] if full else {(0, n), (last - n, last)})}
    for op, g in gpu.items():
        pairs = []
        for (a, b), xb in xs.items():
            ob = offs.cpu() if full and grouped else None  # a band is quantized dense (placement aside, the same)
            ref = run_op(op, c0, xb, ob, run_op("fused", c0, xb, ob) if op == "dequantize" else None, grouped)
            for k, r in ref.items():
                if full or c0.op == "weight":  # the whole tensor byte for byte, or whole experts
                    pairs.append((r, g[k] if full else g[k][a:b]))
                    continue
                mine = band(k, r, (0, b - a), b - a, c0.K, None, min(b, cover) - a, grouped)
                pairs.append((mine, band(k, g[k], (a, b), c0.M, c0.K, offs_list, cover, grouped)))
        unit = "experts" if c0.op == "weight" and not two_d else "rows"
        record(op, "== cpu" if full else f"== cpu (first and last {n} {unit})", pairs, full)
    return records


ROUTED_NAMES = (*NAMES, "offs_p", "dest")


def verify_routed(block: list[Case], ws: RoutedWorkspace) -> list[dict]:
    """routed and routed_scaled against the unfused composition on the device, every byte of the six outputs; each
    of the three against the CPU op (op(x.cpu(), ...)): every byte up to FULL_CHECK_ELEMENTS routed elements, above
    it the first and last experts holding >= BAND_ROWS routed rows each (the CPU op on their index and counts; the
    device's padded rows, scales as plain matrices, offs_p and dest shifted by the band's first padded row).
    torchao's pipeline is not compared (its padded layout differs: an empty expert gets 32 rows)."""
    c0, x, records = block[0], ws.x[0], []
    block_size, mode, *fmt = c0.quant_args
    E, K, N, full = c0.groups, c0.K, c0.M * c0.top_k, c0.elements <= FULL_CHECK_ELEMENTS
    ends = [0, *ws.counts.long().cumsum(0).tolist()]
    cut = lambda n: next(e for e in range(1, E + 1) if ends[e] >= min(n, N))  # experts 0..cut-1 hold >= n rows
    bands = [(0, E)] if full else sorted({(0, cut(BAND_ROWS)), (cut(N - BAND_ROWS + 1) - 1, E)})
    xc, index, scale = x.cpu(), ws.index.cpu(), ws.scale.cpu()

    def record(op: str, check: str, pairs: list, strides: bool = True) -> None:
        bad, nbytes = sum(mismatches(r, t, strides) for r, t in pairs), sum(r.nbytes for r, _ in pairs)
        records.append(c0.fields() | {"op": op, "check": check, "bytes": nbytes, "mismatches": bad, "ok": bad == 0})

    def poisoned(op: str, scaled: bool) -> dict:  # fresh allocations likely reuse the poisoned block
        torch.empty(3 * N * K, dtype=torch.uint8, device=x.device).fill_(POISON)
        return dict(zip(ROUTED_NAMES, routed_op(op, c0, x, ws, scaled)))

    for op in [c.op for c in block if c.op != "routed_torchao"]:
        scaled = op == "routed_scaled"
        g = poisoned(op, scaled)
        if op != "routed_unfused":
            u = poisoned("routed_unfused", scaled)
            record(op, "== unfused (device)", [(u[k], g[k]) for k in ROUTED_NAMES])
        offs = g["offs_p"].tolist()
        plain = {k: plain_scales(k, g[k], g["q_row"].shape[0], K, offs) for k in ("s_row", "s_col")}
        pairs = []
        for ea, eb in bands:
            na, nb, pa = ends[ea], ends[eb], offs[ea - 1] if ea else 0
            sc = scale[na:nb] if scaled else None
            ref = torch.ops.mxq.quantize_routed.default(
                xc, index[na:nb], ws.counts[ea:eb].cpu(), sc, mode, True, True, *fmt
            )
            ref = dict(zip(ROUTED_NAMES, ref))
            if full:
                pairs += [(ref[k], g[k]) for k in ROUTED_NAMES]
                continue
            pb, roffs = offs[eb - 1], ref["offs_p"].tolist()
            mine = {k: plain_scales(k, ref[k], ref["q_row"].shape[0], K, roffs) for k in ("s_row", "s_col")}
            pairs += [(ref[k][: pb - pa], g[k][pa:pb].cpu()) for k in ("q_row", "q_col")]
            pairs += [
                (mine["s_row"][: pb - pa], plain["s_row"][pa:pb]),
                (mine["s_col"][:, : (pb - pa) // block_size], plain["s_col"][:, pa // block_size : pb // block_size]),
            ]
            pairs += [(ref["offs_p"], g["offs_p"][ea:eb].cpu() - pa), (ref["dest"], g["dest"][na:nb].cpu() - pa)]
        record(op, "== cpu" if full else f"== cpu (first and last experts, >= {BAND_ROWS} rows each)", pairs, full)
    return records


# ---- the run ----


def gpu_facts() -> dict:
    p, driver = torch.cuda.get_device_properties(torch.cuda.current_device()), ctypes.c_int(0)
    try:
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(driver))
    except OSError:
        pass
    facts = {"name": p.name, "compute_capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count}
    facts |= {"l2_bytes": getattr(p, "L2_cache_size", 0), "memory_bytes": p.total_memory}
    v = driver.value
    return facts | {"driver": f"{v // 1000}.{v % 1000 // 10}", "torch": torch.__version__, "cuda": torch.version.cuda}


def commit() -> str:
    """MXQ_COMMIT when set (a copy without .git; the package's commit in an A/B), else git's short HEAD."""
    if os.environ.get("MXQ_COMMIT"):
        return os.environ["MXQ_COMMIT"]
    git = lambda *a: subprocess.run(["git", *a], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()
    try:
        return git("rev-parse", "--short", "HEAD") + "-dirty" * bool(git("status", "--porcelain", "-uno"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def output_path(given, prefix: str, gpu: str) -> Path | None:
    """--json's path (`-`: none; default benchmarks/results/<prefix><gpu>_<date>[_n].json), checked writable now (a
    file made for the check is removed again): a bad path fails before the run, not after it."""
    if given == "-":
        return None
    stem = HERE / "results" / f"{prefix}{re.sub(r'[^a-z0-9]+', '-', gpu.lower()).strip('-')}_{datetime.date.today()}"
    paths = (Path(f"{stem}{f'_{n}' * (n > 1)}.json") for n in itertools.count(1))
    path = Path(given) if given else next(p for p in paths if not p.exists())
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    path.open("a").close()
    if not existed:
        path.unlink()
    return path


def capture_all(a, cases: list[Case], l2: int) -> tuple[list, list, list, dict]:
    """Block by block: buffers, offsets, the checks, then one graph per case. (timed, verify, errors, offs)."""
    workspaces, timed, verify, errors, offs_record = {}, [], [], [], {}
    pool, index, max_groups = torch.cuda.graph_pool_handle(), itertools.count(1), collections.defaultdict(int)
    for c in cases:
        max_groups[c.key] = max(max_groups[c.key], c.groups)

    def fail(c: Case, e: Exception) -> None:
        errors.append(c.fields() | {"message": f"{type(e).__name__}: {e}"})
        print(f"[{next(index):>3}/{len(cases)}] {c.text()} FAILED: {errors[-1]['message']}", flush=True)

    for block in [list(b) for _, b in itertools.groupby(cases, lambda c: c.block)]:
        c0 = block[0]
        try:
            if c0.routed:
                ws, offs = RoutedWorkspace(c0, l2, a.seed), None
                offs_record[f"routed {c0.M}x{c0.K}/E={c0.groups}/k={c0.top_k}/{c0.kind}"] = ws.counts.tolist()
                print(f"-- {c0.shape_text()} {c0.grouping_text()}: {ws.sets} buffer sets, counts {ws.routing}")
                checks = verify_routed(block, ws) if a.verify else []
            elif c0.key not in workspaces:
                ws = workspaces[c0.key] = Workspace(c0, max_groups[c0.key], l2, a.seed)
                print(f"-- {c0.shape_text()} {c0.dtype}: {ws.sets} buffer sets of {fmt_bytes(ws.x[0].nbytes)} input")
            if not c0.routed:
                ws = workspaces[c0.key]
                align = 128 if c0.blockwise else 32
                offs_list = group_offsets(c0.kind, c0.M, c0.groups, a.seed, align) if c0.groups else None
                offs = torch.tensor(offs_list, dtype=torch.int32, device="cuda") if offs_list else None
                if offs_list:
                    name = f"{c0.M}x{c0.K}/{c0.groups}" + f"-{c0.kind}" * (c0.kind != "random")
                    offs_record[name + f"/{c0.format}" * c0.blockwise] = offs_list
                checks = verify_block(block, ws, offs, offs_list) if a.verify else []
            if a.verify:
                verify += checks
                said = [
                    f"{r['op']} {r['check']} " + ("ok" if r["ok"] else f"{r['mismatches']} bytes DIFFER")
                    for r in checks
                ]
                print(f"   verify {c0.set} {c0.grouping_text()}: " + ", ".join(said), flush=True)
            if any(c.op == "dequantize" for c in block):  # valid q and scales for dequantize to read
                for i in range(ws.sets):
                    torch.ops.mxq.quantize.out(ws.x[i], 32, "rceil", offs, **ws.views(i, c0))
        except Exception as e:  # noqa: BLE001 (one bad block must not cost the other rows)
            for c in block:
                fail(c, e)
            continue
        for c in block:
            try:
                timed.append(t := capture(c, ws, offs, pool))
                said = f"{t.buffers} buffers, {t.calls} calls/graph, {t.kernel_nodes} kernel nodes"
                print(f"[{next(index):>3}/{len(cases)}] {c.text()} {said}", flush=True)
            except Exception as e:  # noqa: BLE001
                fail(c, e)
    return timed, verify, errors, offs_record


def run_bench(a, cases: list[Case], mxq) -> int:
    gpu = gpu_facts()
    l2, json_path, render = gpu["l2_bytes"] or 128 * MIB, output_path(a.json, "", gpu["name"]), load_plot(a.plot)
    print(
        f"bench.py on {gpu['name']} (cc {gpu['compute_capability']}, {gpu['sm_count']} SMs, L2 {fmt_bytes(l2)}), "
        f"driver {gpu['driver']}, torch {gpu['torch']} (CUDA {gpu['cuda']}), mxq {commit()} from "
        f"{Path(mxq.__file__).parent}: {len(cases)} cases, sets {','.join(a.sets)}"
    )
    cases, skipped = skip_unavailable(cases)
    start = measure_roof("start")
    timed, verify, errors, offs = capture_all(a, cases, l2)
    print(f"timing {len(timed)} graphs: {a.rounds} rounds, each replaying every graph {a.replays}x in turn", flush=True)
    time_rounds(timed, a.rounds, a.replays)
    for t in timed:
        t.graph = t.keep = None
    torch.cuda.empty_cache()
    end = measure_roof("end")
    roof = [
        {"copy_bytes": n, "TBps": round(max(s, e), 4), "TBps_start": round(s, 4), "TBps_end": round(e, 4)}
        for n, s, e in zip(ROOF_COPY_BYTES, start, end)
    ]
    results = [(t.case, make_row(t, roof)) for t in timed]
    for s in a.sets:
        routed = [c.routed for c, _ in results if c.set == s]
        tables = [set_table(results, s)] * (not all(routed)) + [routed_table(results, s)] * any(routed)
        print(f"\n## {s}\n\n" + "\n\n".join(tables))
    print(summary(results, l2))
    method = {"rounds": a.rounds, "replays": a.replays, "warmup_rounds": WARMUP_ROUNDS, "seed": a.seed}
    method |= {"dtype": a.dtype, "scaling_mode": "rceil", "roof_copies": ROOF_COPIES, "verify": a.verify}
    method |= {"full_check_elements": FULL_CHECK_ELEMENTS, "band_rows": BAND_ROWS, "described": "benchmarks/README.md"}
    if any(c.op == "routed_torchao" for c in cases):
        method["torchao"] = torchao_pipeline()[2]
    if any(c.op == "torchao_blockwise" for c in cases):
        method["torchao_blockwise"] = torchao_blockwise()[2]
    if "blockwise" in a.sets:
        method["blockwise_scaling_mode"] = BLOCKWISE_MODE
    doc = {"schema": SCHEMA, "date": now(), "commit": commit(), "mxq": str(Path(mxq.__file__).parent), "gpu": gpu}
    doc |= {"sets": a.sets, "method": method, "roof": roof, "rows": [r for _, r in results], "verify": verify}
    doc |= {"routed_targets": routed_targets(results), "skipped": skipped}
    write_outputs(doc | {"errors": errors, "offs": offs}, json_path, render, a.plot)
    bad = [v for v in verify if not v["ok"]]
    for e in errors:
        print(
            f"FAILED: {e['set']} {e['op']} {e['shape']} {e['dtype']} {e['groups_kind']} {e['groups']}: {e['message']}"
        )
    if bad:
        print(f"FAILED: {len(bad)} checks found differing bytes (verify in the JSON)")
    return 1 if errors or bad else 0


def make_row(t: Timed, roof: list[dict]) -> dict:
    c, (read, written, effective) = t.case, case_bytes(t.case)
    us, p = statistics.median(t.samples), pick_roof(roof, read + written)
    align = next(n for n in (128, 64, 32) if c.M % n == 0 and c.K % n == 0)
    row = {"set": c.set, "op": c.op, "M": max(c.experts, 1) * c.M, "K": c.K, "dtype": c.dtype, "groups": c.groups}
    row |= {"groups_kind": c.kind, "align": align, "aligned128": align == 128, "format": c.format}
    if c.blockwise:
        row["scaling_mode"] = BLOCKWISE_MODE
    if c.neighbour:
        row["neighbour"] = {"M": c.neighbour[0], "K": c.neighbour[1]}
    if c.op == "weight":
        row |= {"experts": c.experts, "N": c.M, "scaling": c.scaling}
    if c.routed:
        row |= {"T": c.M, "E": c.groups, "top_k": c.top_k, "N": c.M * c.top_k, "routing": c.kind}
    row |= {"us": us, "us_min": min(t.samples), "us_max": max(t.samples), "bytes_read": read, "bytes_written": written}
    row |= {"bytes": read + written, "TBps": (read + written) / us / 1e6, "effective_bytes": effective}
    row |= {"effective_TBps": effective / us / 1e6, "roof_TBps": p["TBps"], "roof_copy_bytes": p["copy_bytes"]}
    row |= {"pct_roof": 100 * row["TBps"] / p["TBps"], "buffers": t.buffers, "calls_per_graph": t.calls}
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in (row | {"kernel_nodes": t.kernel_nodes}).items()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ---- tables and files ----


def fmt_bytes(n: float) -> str:
    e = min(int(math.log(max(n, 1), 1024)), 4)
    return f"{n / 1024**e:.1f} {('B', 'KiB', 'MiB', 'GiB', 'TiB')[e]}"


def md_table(header: list, body: list) -> str:
    """A markdown table, the first column left-aligned, the others right-aligned."""
    cells = [[str(v) for v in r] for r in (header, *body)]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(v.rjust(w[i]) if i else v.ljust(w[0]) for i, v in enumerate(r)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (n + 1) + ":" if i else ":" + "-" * (n + 1) for i, n in enumerate(w)) + "|")
    return "\n".join(lines)


def partner(results: list, c: Case, **change) -> dict | None:
    """The row of the case like c but for the fields in `change`."""
    other = dataclasses.replace(c, neighbour=None, **change)
    return next((r for d, r in results if dataclasses.replace(d, neighbour=None) == other), None)


def ratio(a: dict | None, b: dict | None, key: str) -> str:
    return f"{a[key] / b[key]:.2f}x" if a and b and a is not b else "-"


def cell(row: dict | None, key: str, spec: str) -> str:
    return format(row[key], spec) if row else "-"


SET_COLUMNS = {"main": ["dtype", "groups"], "ragged": ["align"], "grouped": ["groups"], "dtypes": ["dtype"]}
SET_COLUMNS["blockwise"] = ["groups"]
SET_EXTRAS = {"ragged": ["TB/s vs aligned"], "grouped": ["TB/s vs dense", "skew vs even"], "dtypes": ["time vs bf16"]}
SET_EXTRAS["blockwise"] = ["torchao / mxq time", "% of copy row"]


def set_table(results: list, s: str) -> str:
    """One set's rows (outside main op by op) with the columns that the set compares."""
    body, columns = [], SET_COLUMNS.get(s, ["scaling"])
    rows = [cr for cr in results if cr[0].set == s and not cr[0].routed]
    for c, r in sorted(rows, key=lambda cr: s == "main" or OPS.index(cr[0].op)):
        named = {"dtype": c.dtype, "groups": c.grouping_text(), "align": r["align"], "scaling": c.scaling}
        eff = f"{r['effective_TBps']:.3f}" if c.op in ("fused", "composed") else ""
        cells = [c.op, c.shape_text(), *(named[k] for k in columns), f"{r['us']:.1f}", fmt_bytes(r["bytes"])]
        cells += [f"{r['TBps']:.3f}", f"{r['pct_roof']:.1f}", eff]
        if s == "ragged":
            n = c.neighbour and partner(results, c, M=c.neighbour[0], K=c.neighbour[1])
            cells.append(f"{ratio(r, n, 'TBps')} ({c.neighbour[0]}x{c.neighbour[1]})" if n else "")
        elif s == "grouped":
            even = c.kind == "skewed" and partner(results, c, kind="even")
            cells += [ratio(r, partner(results, c, kind="dense", groups=0), "TBps"), ratio(r, even, "TBps")]
        elif s == "dtypes":
            cells.append(ratio(r, partner(results, c, dtype="bf16"), "us"))
        elif s == "blockwise":  # the dense fused row: torchao's two kernels on the same x, and the shape's copy row
            dense = c.op == "fused" and c.kind == "dense"
            ao, copy = (
                dense and partner(results, c, op="torchao_blockwise"),
                partner(results, c, op="copy", kind="dense", groups=0),
            )
            share = f"{100 * r['effective_TBps'] / copy['TBps']:.1f}" if c.op == "fused" and copy else ""
            cells += [ratio(ao, r, "us") if dense else "", share]
        body.append(cells)
    header = ["op", "shape", *columns, "us", "moved", "TB/s", "% roof", "eff. TB/s", *SET_EXTRAS.get(s, [])]
    return md_table(header, body)


def routed_targets(results: list) -> list[dict]:
    """Per fused routed row: speedup over the unfused pipeline and torchao's, skewed / uniform time, and issue 42's
    targets (>= 1.8x unfused where N * K >= 2^26, >= 85% of the copy roof, skewed within 3% of uniform)."""
    out, t = [], ROUTED_TARGETS
    for c, r in results:
        if c.op != "routed":
            continue
        unfused, ao = partner(results, c, op="routed_unfused"), partner(results, c, op="routed_torchao")
        uniform = partner(results, c, kind="uniform") if c.kind == "skewed" else None
        big = c.elements >= t["min_elements"]
        x = {"set": c.set, "format": c.format, "T": c.M, "K": c.K, "E": c.groups, "top_k": c.top_k, "routing": c.kind}
        x["us"] = r["us"]
        x |= {
            "vs_unfused": unfused and round(unfused["us"] / r["us"], 3),
            "vs_torchao": ao and round(ao["us"] / r["us"], 3),
        }
        x |= {"skew_over_uniform": uniform and round(r["us"] / uniform["us"], 4), "pct_roof": r["pct_roof"]}
        x["pass_speedup"] = None if not (big and unfused) else x["vs_unfused"] >= t["speedup"]
        x["pass_roof"] = r["pct_roof"] >= t["pct_roof"]
        x["pass_skew"] = None if uniform is None else x["skew_over_uniform"] <= t["skew"]
        out.append(x)
    return out


def routed_table(results: list, s: str) -> str:
    """Set s's routed rows, then the fused op against the others with the targets as pass/fail columns."""
    body = []
    for c, r in [cr for cr in results if cr[0].set == s and cr[0].routed]:
        cells = [c.op, c.shape_text(), c.grouping_text(), f"{r['us']:.1f}", fmt_bytes(r["bytes"])]
        body.append(cells + [f"{r['TBps']:.3f}", f"{r['pct_roof']:.1f}"])
    text = md_table(["op", "TxK", "routing", "us", "fused bytes", "TB/s", "% roof"], body)
    mark = lambda v: "-" if v is None else "pass" if v else "FAIL"
    rows = [
        [f"{x['T']}x{x['K']}", f"E={x['E']} k={x['top_k']} {x['routing']}", f"{x['us']:.1f}"]
        + [f"{x[k]:.2f}x" if x[k] else "-" for k in ("vs_unfused", "vs_torchao")]
        + [f"{x['skew_over_uniform']:.3f}" if x["skew_over_uniform"] else "-", f"{x['pct_roof']:.1f}"]
        + [mark(x[k]) for k in ("pass_speedup", "pass_roof", "pass_skew")]
        for x in routed_targets(results)
        if x["set"] == s
    ]
    t = ROUTED_TARGETS
    header = ["TxK", "routing", "fused us", "vs unfused", "vs torchao", "skew/uniform", "% roof"]
    header += [f">= {t['speedup']}x unfused", f">= {t['pct_roof']:.0f}% roof", f"skew <= {t['skew']}"]
    note = "\n\n(>= 1.8x applies where N*K >= 2^26; TB/s of every routed op: the fused op's bytes / time)"
    return text + "\n\n### routed: fused vs unfused and torchao, issue 42's targets\n\n" + md_table(header, rows) + note


def summary(results: list, l2: int) -> str:
    """Fused against composed and the copy in the main set, and fused's share of the roof at the bandwidth shapes."""
    body, pct = [], []
    for c, r in results:
        if c.set == "main" and c.op == "fused":
            comp, copy = partner(results, c, op="composed"), partner(results, c, op="copy")
            pct += [r["pct_roof"]] * (r["bytes"] >= 2 * l2)
            cells = [c.shape_text(), c.grouping_text(), f"{r['us']:.1f}", cell(comp, "us", ".1f"), ratio(comp, r, "us")]
            cells += [f"{r['effective_TBps']:.3f}", f"{r['pct_roof']:.1f}", cell(comp, "effective_TBps", ".3f")]
            body.append([*cells, cell(copy, "pct_roof", ".1f")])
    header = ["shape", "groups", "fused us", "composed us", "speedup", "fused eff. TB/s", "fused % roof"]
    text = "\n## main: fused vs composed (eff. TB/s: fused bytes / time)\n\n" if body else ""
    text += md_table(header + ["composed eff. TB/s", "copy % roof"], body) if body else ""
    if pct:
        text += f"\n\nfused % of copy roof over {len(pct)} bandwidth cases (fused traffic >= 2x L2): min "
        text += f"{min(pct):.1f}%, median {statistics.median(pct):.1f}%, max {max(pct):.1f}%"
    return text


def load_plot(path: Path | None):
    """plot.render, imported before the run: a missing matplotlib or a bad path fails at once."""
    if path is None:
        return None
    output_path(str(path), "", "")
    import plot  # benchmarks/plot.py (the script's directory is on sys.path)

    plot.require_matplotlib()
    return plot.render


def write_outputs(doc: dict, json_path: Path | None, render, plot_path: Path | None) -> None:
    if json_path:
        json_path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        print(f"\nwrote {json_path}")
    if render:
        render(doc, plot_path)
        print(f"wrote {plot_path}")


# ---- eager host cost ----


def time_eager(rows: dict, rounds: int) -> dict:
    """Per row [eager, host] us per call: EAGER_CALLS calls from a synchronize to the synchronize after them (eager)
    or to the return of the last call (host: the calling thread's cost); median of rounds, the rows in turn."""
    for fn in rows.values():
        for _ in range(EAGER_WARMUP):
            fn()
    samples = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(EAGER_CALLS):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            samples[name].append(((time.perf_counter() - t0) * 1e6 / EAGER_CALLS, (t1 - t0) * 1e6 / EAGER_CALLS))
    return {name: [statistics.median(v[i] for v in s) for i in (0, 1)] for name, s in samples.items()}


def time_graph(fn, rounds: int) -> float:
    """GPU us per call of fn under graph replay: EAGER_GRAPH_CALLS captured calls, median of `rounds` replays."""
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.empty_like captures no kernel: torch warns about an empty graph
        with torch.cuda.graph(graph):
            outs = [fn() for _ in range(EAGER_GRAPH_CALLS)]  # noqa: F841 (alive: the graph writes them)
    return median_ms(graph.replay, rounds) * 1e3 / EAGER_GRAPH_CALLS


def eager_shape(a, mxq, M: int, K: int) -> dict:
    """mxq.quantize (allocating, out=) beside x.add_(0) and torch.empty_like(x): eager, host and graph us per call."""
    x = random_input(M, K, "bf16", a.seed)
    bufs = mxq.empty_quantized(x)
    rows = {"mxq.quantize(x)": lambda: mxq.quantize(x), "mxq.quantize(x, out=bufs)": lambda: mxq.quantize(x, out=bufs)}
    rows |= {"x.add_(0)": lambda: x.add_(0), "torch.empty_like(x)": lambda: torch.empty_like(x)}
    times = time_eager(rows, a.rounds)
    for name, fn in rows.items():
        times[name].append(time_graph(fn, a.rounds))
    print(
        f"\n## {M}x{K} bf16\n\n"
        + md_table(["op", "eager us", "host us", "graph us"], [[n, *(f"{v:.2f}" for v in t)] for n, t in times.items()])
    )
    add = times["x.add_(0)"]
    over = {
        f"{k}_over_add_{m}": round(times[n][i] / add[i], 3)
        for k, n in zip(("fused", "out"), rows)
        for i, m in enumerate(("eager", "host"))
    }
    return {
        "M": M,
        "K": K,
        "rows": {n: dict(zip(("eager_us", "host_us", "graph_us"), t)) for n, t in times.items()},
    } | over


def run_eager(a, mxq) -> int:
    gpu = gpu_facts()
    json_path = output_path(a.json, "eager_", gpu["name"])
    print(
        f"bench.py --eager on {gpu['name']}, torch {gpu['torch']} (CUDA {gpu['cuda']}), mxq {commit()}: eager "
        f"{EAGER_CALLS} calls a loop, graph {EAGER_GRAPH_CALLS} calls a graph, median of {a.rounds} rounds"
    )
    shapes = [eager_shape(a, mxq, M, K) for M, K in a.shapes_given or EAGER_SHAPES]
    keys = ("fused_over_add_eager", "out_over_add_eager", "fused_over_add_host", "out_over_add_host")
    print(f"\n## per call / x.add_(0) (target <= {EAGER_TARGET}; eager: synchronized wall time, host: issue time)\n")
    body = [[f"{s['M']}x{s['K']}", *(f"{s[k]:.2f}" for k in keys)] for s in shapes]
    print(md_table(["shape", "fused eager", "out= eager", "fused host", "out= host"], body))
    method = {"calls": EAGER_CALLS, "warmup": EAGER_WARMUP, "rounds": a.rounds, "graph_calls": EAGER_GRAPH_CALLS}
    doc = {"schema": SCHEMA, "mode": "eager", "date": now(), "commit": commit(), "gpu": gpu, "method": method}
    write_outputs(doc | {"target_ratio": EAGER_TARGET, "eager": shapes}, json_path, None, None)
    return 0


# ---- an MoE layer step: --moe-step ----

STAGES = ("dispatch", "experts", "combine", "backward")
MOE_STEP_TARGET = 1.25  # issue 51: the fp8_blockwise layer step against the bf16 layer
HOST_LEAD_CYCLES = 20_000_000  # a spin kernel queued before each step (~10 ms): the host issues the step meanwhile


class Bf16Dispatcher:
    """The bf16 MoE layer the recipes are measured against, with TokenDispatcher's call shape: dispatch gathers
    x[index] in expert order (no padding), the grouped GEMMs are torch._grouped_mm in bf16 (fp32 accumulation),
    combine_mm scales each routed row by its gate score (rounded to bf16) and scatter-adds it; backward is autograd."""

    def __init__(self, num_experts: int):
        self.num_experts = num_experts

    def dispatch(self, x, scores, expert_ids):
        k = expert_ids.shape[1]
        order = torch.argsort(expert_ids.reshape(-1), stable=True)
        counts = torch.bincount(expert_ids.reshape(-1), minlength=self.num_experts)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        index = order // k
        return x.to(torch.bfloat16).index_select(0, index), offs, index, scores.reshape(-1)[order], x.shape[0]

    def grouped_mm(self, routed, w):
        return torch._grouped_mm(routed[0], w.transpose(-2, -1), offs=routed[1])

    def combine_mm(self, routed, h, w):
        _, offs, index, scores, num_tokens = routed
        y = (torch._grouped_mm(h, w.transpose(-2, -1), offs=offs).float() * scores.unsqueeze(1)).to(torch.bfloat16)
        return y.new_zeros(num_tokens, y.shape[1]).index_put_((index,), y, accumulate=True)


def moe_step(a, mxq, T: int, D: int, E: int, k: int, H: int, routing: str) -> list[dict]:
    """One shape and routing: TokenDispatcher with --recipe, fused vs composed routed quantization, and the bf16 layer
    (Bf16Dispatcher): the layer forward (dispatch, w1 and w3 grouped GEMMs with SwiGLU, combine_mm) and its backward,
    eager; CUDA events on the stream between the stages, issued while a spin kernel holds the GPU (the stages are GPU
    time, not the host's), the three alternating step by step; per stage the median over --rounds steps after 3
    warm-up steps. The routed quantizations (dispatch's of x, the backward's of d(routed y) with the scores) are timed
    alone too."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(a.seed)
    x = random_input(T, D, "bf16", a.seed).requires_grad_()
    ids = expert_choices(routing, T, E, k, a.seed).cuda()
    scores = torch.rand(T, k, generator=g).cuda().requires_grad_()
    w1, w2, w3 = (
        (torch.randn(E, *s, generator=g) * s[1] ** -0.5).cuda().bfloat16().requires_grad_()
        for s in ((H, D), (D, H), (H, D))
    )
    dout = random_input(T, D, "bf16", a.seed + 1)
    config = mxq.MXFP8Config.recipe(a.recipe)
    runs = {how: mxq.TokenDispatcher(E, config=config, routed_quantization=how) for how in ("fused", "composed")}
    runs["bf16"] = Bf16Dispatcher(E)
    samples, results = {how: [] for how in runs}, {}
    # --reuse-weights: every step after the first reads the quantized weights the first step made (no optimizer
    # step runs here, and the weights do not change), the cost per step of many microbatches per optimizer step.
    reuse = mxq.nn.reuse_quantized_weights() if a.reuse_weights else contextlib.nullcontext()
    with reuse:
        for step in range(3 + a.rounds):
            for how, d in runs.items():
                for t in (x, scores, w1, w2, w3):
                    t.grad = None
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(STAGES) + 1)]
                torch.cuda._sleep(HOST_LEAD_CYCLES)
                ev[0].record()
                routed = d.dispatch(x, scores, ids)
                ev[1].record()
                h = F.silu(d.grouped_mm(routed, w1)) * d.grouped_mm(routed, w3)
                ev[2].record()
                y = d.combine_mm(routed, h, w2)
                ev[3].record()
                y.backward(dout)
                ev[4].record()
                torch.cuda.synchronize()
                if step >= 3:
                    samples[how].append([ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(len(STAGES))])
                if step == 0 and how != "bf16":  # the first step's results of both dispatchers: bitwise equal?
                    results[how] = [y.detach(), x.grad, scores.grad, w1.grad, w2.grad, w3.grad]
    same = all(torch.equal(p, q) for p, q in zip(results["fused"], results["composed"]))
    index, counts = route(ids.cpu(), E)
    index, counts, scale = index.cuda(), counts.cuda(), scores.detach().reshape(-1)[index.cuda()].float()
    from mxq._gemm import use_native_gemm

    path = mxq.moe.grouped_gemm_path(x.device, use_native_gemm("bench.py", config, x.device), config.format)
    stage = lambda how: {s: round(statistics.median(v[i] for v in samples[how]), 2) for i, s in enumerate(STAGES)}
    bf16_step = round(sum(stage("bf16").values()), 2)
    rows = []
    for how, fn in (("fused", mxq.quantize_routed), ("composed", mxq.dispatch.quantize_routed_composed)):
        alone = {
            "quantize_x": lambda fn=fn: fn(x.detach(), index, counts, format=config.format),
            "quantize_dy": lambda fn=fn: fn(dout, index, counts, scale=scale, format=config.format),
        }
        row = {"T": T, "D": D, "E": E, "top_k": k, "H": H, "routing": routing, "routed_quantization": how}
        row |= {"recipe": a.recipe, "stages_us": stage(how), "gemm_path": path, "bf16_stages_us": stage("bf16")}
        row |= {"step_us": round(sum(row["stages_us"].values()), 2), "bf16_step_us": bf16_step}
        row["vs_bf16"] = round(bf16_step / row["step_us"], 3)
        row |= {f"{n}_us": round(median_ms(f, a.rounds) * 1e3, 2) for n, f in alone.items()}
        rows.append(
            row | {"outputs_equal": same, "counts_max": int(counts.max()), "counts_empty": int((counts == 0).sum())}
        )
    return rows


def run_moe_step(a, mxq) -> int:
    gpu = gpu_facts()
    json_path = output_path(a.json, "moe_step_", gpu["name"])
    print(
        f"bench.py --moe-step on {gpu['name']}, torch {gpu['torch']}, mxq {commit()}: recipe {a.recipe} vs bf16, "
        f"median of {a.rounds} steps"
        + (", expert weights quantized once for all steps (--reuse-weights)" if a.reuse_weights else "")
    )
    rows = [r for T, D, E, k, H in MOE_STEP_SHAPES for kind in ROUTINGS for r in moe_step(a, mxq, T, D, E, k, H, kind)]
    body = []
    for r in rows:
        cells = [f"{r['T']}x{r['D']} E={r['E']} k={r['top_k']} H={r['H']}", r["routing"], r["routed_quantization"]]
        cells += [f"{r['stages_us'][s]:.0f} / {r['bf16_stages_us'][s]:.0f}" for s in STAGES]
        cells += [f"{r['step_us']:.0f} / {r['bf16_step_us']:.0f}", f"{r['vs_bf16']:.2f}x"]
        body.append(cells + [f"{r['quantize_x_us']:.0f}", f"{r['quantize_dy_us']:.0f}", r["outputs_equal"]])
    header = ["shape", "routing", "routed quantization", *(f"{s} us (bf16)" for s in STAGES), "step us (bf16)"]
    header += [f"x bf16 (target >= {MOE_STEP_TARGET}x)", "quantize x us (alone)", "quantize dy us (alone)"]
    print("\n" + md_table(header + ["bitwise equal"], body))
    print("(stages: CUDA events between the eager calls; backward is the whole autograd backward; bf16: torch's layer)")
    method = {"rounds": a.rounds, "warmup_steps": 3, "seed": a.seed, "timing": "eager, CUDA events between stages"}
    method["recipe"], method["reuse_weights"] = a.recipe, a.reuse_weights
    doc = {"schema": SCHEMA, "mode": "moe_step", "date": now(), "commit": commit(), "gpu": gpu, "method": method}
    write_outputs(doc | {"steps": rows}, json_path, None, None)
    return 0 if all(r["outputs_equal"] for r in rows) else 1


# ---- a Linear's training step: --linear-step ----

LINEAR_STEP_SHAPES = ((8192, 8192, 8192), (16384, 7168, 2048), (16384, 2048, 7168))  # (M, K, N)
LINEAR_TARGETS = {"vs_bf16": {(8192, 8192, 8192): 1.3}, "vs_bf16_default": 1.2, "vs_torchao": 1.15}  # issue 51
LINEAR_RUNS = ("bf16", "mxq fp8_blockwise", "torchao Float8BlockwiseLinear", "mxq mxfp8_rceil")


def linear_modules(mxq, w: torch.Tensor) -> tuple[dict, dict]:
    """({name: module}, {name: why it cannot run}) for LINEAR_RUNS, all on the same bf16 weight (N, K), no bias:
    torch's nn.Linear, MXFP8Linear with the "fp8_blockwise" and "mxfp8_rceil" recipes (gemm "auto": F.scaled_mm on
    Hopper for the first, the emulation below SM100 for the second) and torchao 0.18's Float8BlockwiseLinear."""
    N, K = w.shape
    ref = torch.nn.Linear(K, N, bias=False, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref.weight.copy_(w)
    mods, why = {"bf16": ref}, {}
    for name, recipe in (("mxq fp8_blockwise", "fp8_blockwise"), ("mxq mxfp8_rceil", "mxfp8_rceil")):
        m = mxq.MXFP8Linear(
            K, N, bias=False, device="cuda", dtype=torch.bfloat16, config=mxq.MXFP8Config.recipe(recipe)
        )
        with torch.no_grad():
            m.weight.copy_(w)
        mods[name] = m
    try:
        from torchao.prototype.blockwise_fp8_training.linear import Float8BlockwiseLinear

        mods["torchao Float8BlockwiseLinear"] = Float8BlockwiseLinear.from_float(copy.deepcopy(ref))
    except Exception as e:  # noqa: BLE001 (absent, or an incompatible build)
        why["torchao Float8BlockwiseLinear"] = f"torchao is not usable ({type(e).__name__}: {e})"
    return mods, why


def step_us(module, x: torch.Tensor, dy: torch.Tensor, rounds: int) -> float:
    """GPU us of one forward + backward (y = module(x); y.backward(dy)), eager, between CUDA events issued while a
    spin kernel holds the GPU (GPU time, not the host's): the median of `rounds` after 3 warm-up steps."""
    times = []
    for i in range(3 + rounds):
        x.grad = module.weight.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HOST_LEAD_CYCLES)
        start.record()
        module(x).backward(dy)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def linear_stages(mxq, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rounds: int) -> dict:
    """us of each piece of the fp8_blockwise step alone (its quantizations and its three F.scaled_mm GEMMs, the
    operands as the layer makes them) and of the three bf16 GEMMs: what limits the step."""
    from mxq._gemm import blockwise_gemm  # the layer's own GEMM entry, on operands made here

    fmt = "fp8_blockwise"
    qx, qw, qdy = mxq.quantize(x, format=fmt), mxq.quantize_weight(w, format=fmt), mxq.quantize(dy, format=fmt)
    pieces = {
        "quantize x (rowwise)": lambda: mxq.quantize(x, colwise=False, format=fmt),
        "quantize x (colwise, backward)": lambda: mxq.quantize(x, rowwise=False, format=fmt),
        "quantize W (both axes)": lambda: mxq.quantize_weight(w, format=fmt),
        "quantize dy (both axes)": lambda: mxq.quantize(dy, format=fmt),
        "fp8 forward GEMM": lambda: blockwise_gemm(qx.q_row, qx.s_row, qw.q_row, qw.s_row, True, "scaled_mm"),
        "fp8 dgrad GEMM": lambda: blockwise_gemm(qdy.q_row, qdy.s_row, qw.q_col.t(), qw.s_col, True, "scaled_mm"),
        "fp8 wgrad GEMM": lambda: blockwise_gemm(qdy.q_col.t(), qdy.s_col, qx.q_col.t(), qx.s_col, False, "scaled_mm"),
        "bf16 forward GEMM": lambda: x @ w.t(),
        "bf16 dgrad GEMM": lambda: dy @ w,
        "bf16 wgrad GEMM": lambda: dy.t() @ x,
    }
    return {name: round(median_ms(fn, rounds) * 1e3, 2) for name, fn in pieces.items()}


def linear_step(a, mxq, M: int, K: int, N: int) -> dict:
    """One shape: every LINEAR_RUNS module's fwd + bwd step on the same x, W, dy (the runs alternate round by round
    through step_us's medians), the ratios to bf16 and torchao with issue 51's targets, the fp8_blockwise stages."""
    g = torch.Generator().manual_seed(a.seed)
    w = (torch.randn(N, K, generator=g) / math.sqrt(K)).cuda().bfloat16()
    x = random_input(M, K, "bf16", a.seed).requires_grad_()
    dy = random_input(M, N, "bf16", a.seed + 1)
    from mxq._gemm import dense_gemm_path, native_blockwise_gemm

    mods, why = linear_modules(mxq, w)
    us = {name: round(step_us(m, x, dy, a.rounds), 2) for name, m in mods.items()}
    mine, ao = us["mxq fp8_blockwise"], us.get("torchao Float8BlockwiseLinear")
    want_bf16 = LINEAR_TARGETS["vs_bf16"].get((M, K, N), LINEAR_TARGETS["vs_bf16_default"])
    row = {"M": M, "K": K, "N": N, "step_us": us, "skipped": why, "vs_bf16": round(us["bf16"] / mine, 3)}
    row |= {"vs_torchao": ao and round(ao / mine, 3), "target_vs_bf16": want_bf16}
    row |= {"pass_vs_bf16": row["vs_bf16"] >= want_bf16}
    row["pass_vs_torchao"] = None if ao is None else row["vs_torchao"] >= LINEAR_TARGETS["vs_torchao"]
    row["gemm_path"] = dense_gemm_path(native_blockwise_gemm(x.device))
    return row | {"stages_us": linear_stages(mxq, x.detach(), w, dy, a.rounds)}


GROUPED_FORWARD_TARGET = 1.4  # issue 51: the FP8 blockwise grouped forward against torch._grouped_mm in bf16


def grouped_forward(a, mxq, T: int, D: int, E: int, k: int, H: int) -> dict:
    """The experts' first GEMM at an --moe-step shape, uniform routing: h = x_e · W1_eᵀ over the T·top_k routed rows
    (D -> H per expert), torch._grouped_mm in bf16 on the expert-sorted rows against mxq's FP8 blockwise grouped GEMM
    on the rows padded to 128 per expert (quantize_routed's offs_p): the GEMM alone and with its x quantization
    (quantize_routed, both axes as the dispatcher makes them; W quantized once, outside)."""
    ids = expert_choices("uniform", T, E, k, a.seed).cuda()
    index, counts = route(ids.cpu(), E)
    index, counts = index.cuda(), counts.cuda()
    x = random_input(T, D, "bf16", a.seed)
    w = random_input(E * H, D, "bf16", a.seed + 1).view(E, H, D)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xr = x.index_select(0, index)
    fmt = "fp8_blockwise"
    routed = mxq.quantize_routed(x, index, counts, format=fmt)
    qw = mxq.quantize_weight(w, format=fmt)
    gemm = lambda: mxq.ops.grouped_mm_fp8_blockwise(routed.q_row, routed.s_row, qw.q_row, qw.s_row, routed.offs_p)
    with_x = lambda: (mxq.quantize_routed(x, index, counts, format=fmt), gemm())
    us = {
        "bf16 torch._grouped_mm": median_ms(lambda: torch._grouped_mm(xr, w.transpose(-2, -1), offs=offs), a.rounds),
        "fp8_blockwise GEMM": median_ms(gemm, a.rounds),
        "fp8_blockwise GEMM + quantize_routed(x)": median_ms(with_x, a.rounds),
    }
    us = {n: round(t * 1e3, 2) for n, t in us.items()}
    bf16 = us["bf16 torch._grouped_mm"]
    row = {"T": T, "D": D, "E": E, "top_k": k, "H": H, "us": us, "padded_rows": int(routed.q_row.shape[0])}
    row |= {"vs_bf16": round(bf16 / us["fp8_blockwise GEMM"], 3)}
    row |= {"vs_bf16_with_quantize": round(bf16 / us["fp8_blockwise GEMM + quantize_routed(x)"], 3)}
    return row | {"pass_vs_bf16": row["vs_bf16"] >= GROUPED_FORWARD_TARGET}


def run_linear_step(a, mxq) -> int:
    gpu = gpu_facts()
    json_path = output_path(a.json, "linear_step_", gpu["name"])
    print(f"bench.py --linear-step on {gpu['name']}, torch {gpu['torch']}, mxq {commit()}: median of {a.rounds} steps")
    rows = []
    for M, K, N in a.shapes_3d or LINEAR_STEP_SHAPES:
        rows.append(linear_step(a, mxq, M, K, N))
        print(f"   {M}x{K} -> {N}: " + ", ".join(f"{n} {t:.0f} us" for n, t in rows[-1]["step_us"].items()), flush=True)
    mark = lambda v: "-" if v is None else "pass" if v else "FAIL"
    body = [
        [f"{r['M']}x{r['K']} -> {r['N']}"]
        + [f"{r['step_us'][n]:.0f}" if n in r["step_us"] else "-" for n in LINEAR_RUNS]
        + [f"{r['vs_bf16']:.2f}x", f"{r['vs_torchao']:.2f}x" if r["vs_torchao"] else "-"]
        + [f"{mark(r['pass_vs_bf16'])} (>= {r['target_vs_bf16']}x)", mark(r["pass_vs_torchao"])]
        for r in rows
    ]
    header = ["M x K -> N", *(f"{n} us" for n in LINEAR_RUNS), "fp8_blockwise vs bf16", "vs torchao"]
    header += ["target vs bf16", f">= {LINEAR_TARGETS['vs_torchao']}x torchao"]
    print("\n## fwd + bwd step (GPU us, eager; all quantization included)\n\n" + md_table(header, body))
    stages = list(rows[0]["stages_us"])
    body = [[s, *(f"{r['stages_us'][s]:.1f}" for r in rows)] for s in stages]
    shapes = [f"{r['M']}x{r['K']} -> {r['N']}" for r in rows]
    print("\n## fp8_blockwise pieces alone vs bf16 GEMMs (us)\n\n" + md_table(["piece", *shapes], body))
    grouped = [grouped_forward(a, mxq, *shape) for shape in MOE_STEP_SHAPES]
    body = [
        [f"{g['T']}x{g['D']} -> {g['H']}, E={g['E']} k={g['top_k']}", *(f"{t:.1f}" for t in g["us"].values())]
        + [f"{g['vs_bf16']:.2f}x", f"{g['vs_bf16_with_quantize']:.2f}x", mark(g["pass_vs_bf16"])]
        for g in grouped
    ]
    header = ["T x D -> H, experts", *(f"{n} us" for n in grouped[0]["us"]), "vs bf16", "with quantize"]
    title = f"\n## grouped forward (uniform routing; target >= {GROUPED_FORWARD_TARGET}x bf16, GEMM alone)\n\n"
    print(title + md_table([*header, "target"], body))
    for r in rows:
        for name, reason in r["skipped"].items():
            print(f"SKIPPED: {name} at {r['M']}x{r['K']} -> {r['N']}: {reason}")
    method = {"rounds": a.rounds, "warmup_steps": 3, "seed": a.seed, "timing": "eager fwd + bwd between CUDA events"}
    doc = {"schema": SCHEMA, "mode": "linear_step", "date": now(), "commit": commit(), "gpu": gpu, "method": method}
    targets = {"vs_torchao": LINEAR_TARGETS["vs_torchao"], "grouped_forward_vs_bf16": GROUPED_FORWARD_TARGET}
    write_outputs(doc | {"targets": targets, "steps": rows, "grouped_forward": grouped}, json_path, None, None)
    return 0


# ---- command line ----


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    add = ap.add_argument
    add("--sets", help=f"{','.join(SETS)} (default all; main with --shapes)")
    add("--shapes", help="the main set's MxK,... (with --eager: its shapes)")
    add("--ops", help=f"{','.join(OPS)} (default all)")
    add("--groups", help="the main set's random group counts (default 4,8,64)")
    add("--dtype", choices=DTYPES, default="bf16", help="x of the main, ragged and grouped sets")
    add("--quick", action="store_true", help="main on 8192x2048 and 32768x7168 (dense, G=8), one ragged pair")
    add("--list", action="store_true", help="print the selected cases and their bytes, and exit (no GPU needed)")
    add("--rounds", type=int, default=20, help="timed rounds (default 20)")
    add("--replays", type=int, default=1, help="timed replays of a case per round (default 1)")
    add("--seed", type=int, default=1, help="inputs and group offsets (default 1)")
    add("--no-verify", dest="verify", action="store_false", help="skip the checks against the CPU reference")
    add("--eager", action="store_true", help="time a call from Python without CUDA graphs instead")
    add("--moe-step", action="store_true", help="time an MoE layer step by stage, fused vs composed dispatch instead")
    add("--recipe", help="--moe-step's recipe (a name in mxq.config.RECIPES; default mxfp8_rceil)")
    add(
        "--reuse-weights",
        action="store_true",
        help="--moe-step: the recipe's layers quantize each expert weight once for all steps "
        "(mxq.nn.reuse_quantized_weights: the gradient-accumulation limit, many microbatches per optimizer step)",
    )
    add(
        "--linear-step",
        action="store_true",
        help="time a Linear's fwd + bwd: FP8 blockwise vs bf16 and torchao instead (--shapes MxKxN,...)",
    )
    add("--json", help="results file (default benchmarks/results/<gpu>_<date>.json; - for none)")
    add("--plot", type=Path, help="also draw the results there (benchmarks/plot.py; needs matplotlib)")
    a = ap.parse_args(argv)
    dims = 3 if a.linear_step else 2  # --linear-step's shapes are M x K x N, 128-multiples
    is_shape = lambda v: (
        re.fullmatch(r"\d+" + r"x\d+" * (dims - 1), v)
        and all(int(n) > 0 and int(n) % (128 if a.linear_step else 32) == 0 for n in v.split("x"))
    )
    valid = {"sets": SETS.__contains__, "ops": OPS.__contains__, "shapes": is_shape}
    valid["groups"] = lambda v: v.isdigit() and 0 < int(v) <= 1024
    for name, ok in valid.items():  # comma-separated lists
        values = getattr(a, name) and getattr(a, name).split(",")
        if values and not all(map(ok, values)):
            ap.error(f'--{name}: "{next(v for v in values if not ok(v))}" is not valid (see --help)')
        setattr(a, name, values)
    if (a.recipe is not None or a.reuse_weights) and not a.moe_step:
        ap.error("--recipe and --reuse-weights are --moe-step's options")
    a.recipe = a.recipe or "mxfp8_rceil"
    modes = a.eager + a.moe_step + a.linear_step
    if a.rounds < 1 or a.replays < 1 or a.seed < 0 or (a.plot and modes) or modes > 1:
        ap.error("--rounds and --replays take at least 1, --seed at least 0; --plot draws the sets; one mode at a time")
    a.shapes_given = a.shapes and [tuple(map(int, v.split("x"))) for v in a.shapes]
    a.shapes_3d = a.shapes_given if a.linear_step else None
    if a.linear_step:
        a.shapes = a.shapes_given = None
    a.sets = [s for s in SETS if s in (a.sets or (["main"] if a.shapes else ["main", "ragged"] if a.quick else SETS))]
    a.shapes = a.shapes_given or (QUICK_SHAPES if a.quick else MAIN_SHAPES)
    a.groups = [int(g) for g in a.groups or [8] * a.quick or [4, 8, 64]]
    a.ops = a.ops or OPS
    return a


def run(argv: list[str] | None) -> int:
    a = parse_args(argv)
    try:
        import mxq
    except ImportError as e:
        raise Unavailable(f"cannot import mxq ({e}): set PYTHONPATH=python and MXQ_TORCH_LIBRARY, or pip install .")
    if a.recipe not in mxq.config.RECIPES:
        print(f"bench.py: --recipe must be one of {', '.join(mxq.config.RECIPES)}, got {a.recipe!r}", file=sys.stderr)
        return 2
    cases = plan(a)
    if not cases and not (a.eager or a.moe_step or a.linear_step):
        print("bench.py: nothing to run: no case of the chosen sets uses the chosen ops", file=sys.stderr)
        return 1
    if a.list:
        for i, c in enumerate(cases, 1):
            print(f"[{i:>3}/{len(cases)}] {c.text()}{fmt_bytes(sum(case_bytes(c)[:2])):>12}")
        print(f"{len(cases)} cases")
        return 0
    if not torch.cuda.is_available():
        raise Unavailable(
            f"no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda}): the benchmark "
            "needs a GPU; --list runs without one"
        )
    if not mxq.has_cuda_kernels():
        raise Unavailable("the mxq extension has no CUDA kernels (built without nvcc or without a CUDA torch)")
    if a.moe_step:
        return run_moe_step(a, mxq)
    if a.linear_step:
        return run_linear_step(a, mxq)
    return run_eager(a, mxq) if a.eager else run_bench(a, cases, mxq)


def main(argv: list[str] | None = None) -> int:
    try:
        code = run(argv)
    except Unavailable as e:
        print(f"bench.py: {e}", file=sys.stderr)
        code = 2
    except OSError as e:  # a results file or stdout that cannot be written
        print(f"bench.py: {e}", file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
    except OSError as e:
        print(f"bench.py: cannot write the output: {e}", file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush must not fail again
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
