#!/usr/bin/env python3
"""Group splits against dense, timed in turn: how much a grouped (MoE) call costs over a dense one of the same shape.

    python3 benchmarks/splits.py                         # 32768x7168, 7 rounds
    python3 benchmarks/splits.py --shape 8192x7168 --rounds 11

`mxq bench` times its rows one after another, so a drift of the GPU's speed during a run reaches the rows unequally
(2026-12-03: two runs of the grouped set disagreed by up to 7% on the same split). Here every round times every
(op, split) pair once, in turn, so a drift reaches all of them alike: each pair runs `calls` back-to-back calls
between CUDA events after two untimed calls, and the table shows the median over rounds of the time per call
(no CUDA graph: the calls are long enough that the launch gaps do not show), and its ratio to dense.

Splits: dense; even G = 8 and G = 256 (every group a multiple of 128 rows); random G = 8, 64, 256 (32-multiple
sizes, sorted uniform cuts: empty groups likely at G = 256); 90% of the rows in one of G = 8 groups. Exit status 2
without a CUDA device.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys

import mxq  # noqa: F401  (registers torch.ops.mxq)
import torch

OPS = {
    "fused": torch.ops.mxq.quantize.default,
    "rowwise": torch.ops.mxq.quantize_rowwise.default,
    "colwise": torch.ops.mxq.quantize_colwise.default,
}


def even(M: int, G: int) -> list[int]:
    return [(g + 1) * M // G // 32 * 32 if g + 1 < G else M for g in range(G)]


def random_split(M: int, G: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    units = M // 32
    return [32 * e for e in sorted(rng.randint(0, units) for _ in range(G - 1))] + [M]


def skewed(M: int, G: int, share: float, seed: int) -> list[int]:
    rng = random.Random(seed)
    units = M // 32
    big = round(share * units)
    sizes = [0] * G
    cuts = sorted(rng.randint(0, units - big) for _ in range(G - 2)) + [units - big]
    others = [b - a for a, b in zip([0] + cuts[:-1], cuts)]
    big_group = rng.randrange(G)
    sizes[big_group] = big
    for i, g in enumerate(g for g in range(G) if g != big_group):
        sizes[g] = others[i]
    ends, run = [], 0
    for s in sizes:
        run += s
        ends.append(32 * run)
    return ends


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="32768x7168", help="MxK, multiples of 32 (M a multiple of 256)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("splits.py: no CUDA device", file=sys.stderr)
        return 2
    M, K = (int(v) for v in a.shape.lower().split("x"))
    torch.manual_seed(a.seed)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    splits = {
        "dense": None,
        "G=8 even": even(M, 8),
        "G=256 even": even(M, 256),
        "G=8": random_split(M, 8, a.seed),
        "G=64": random_split(M, 64, a.seed),
        "G=256": random_split(M, 256, a.seed),
        "G=8 skew90": skewed(M, 8, 0.9, a.seed),
    }
    offs = {k: None if v is None else torch.tensor(v, dtype=torch.int32, device="cuda") for k, v in splits.items()}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(a.rounds):
        for op_name, op in OPS.items():
            for split, o in offs.items():
                for _ in range(2):
                    op(x, 32, "rceil", o)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.calls):
                    op(x, 32, "rceil", o)
                end.record()
                end.synchronize()
                times.setdefault((op_name, split), []).append(start.elapsed_time(end) * 1000 / a.calls)
    print(f"{M}x{K} bf16, median of {a.rounds} rounds (us per call; ratio to dense, same op)")
    for op_name in OPS:
        dense = statistics.median(times[(op_name, "dense")])
        for split in splits:
            us = statistics.median(times[(op_name, split)])
            print(f"{op_name:8s} {split:11s} {us:8.1f}  {us / dense:5.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
