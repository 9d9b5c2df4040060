#!/usr/bin/env python3
"""Where the FP8 blockwise training steps spend their GPU time: torch.profiler's kernel table (CUDA time per step,
calls per step) of one MoE layer step at each of bench.py's --moe-step shapes (mxq's TokenDispatcher with the
fp8_blockwise recipe, fused routed quantization, against bench.py's bf16 layer) and of one Linear fwd + bwd at
8192 x 8192 -> 8192 (mxq fp8_blockwise, torchao's Float8BlockwiseLinear, bf16).

    python3 benchmarks/kernel_profile.py            # a CUDA GPU; torchao optional
    python3 benchmarks/kernel_profile.py --rows 30

The steps are bench.py's own (the same inputs, layers and routing); 3 warm-up steps, then 2 profiled. The tables
say what limits a step (docs/performance.md "FP8 blockwise training" reads them); bench.py measures the speed.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # the steps' inputs and layers

PROFILED_STEPS = 2


def kernel_table(step, title: str, rows: int) -> None:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED_STEPS):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    total = sum(e.device_time_total for e in kernels) / PROFILED_STEPS
    print(f"\n### {title}: {total:.0f} us of kernels per step\n")
    for e in sorted(kernels, key=lambda e: -e.device_time_total)[:rows]:
        print(f"{e.device_time_total / PROFILED_STEPS:9.0f} us {e.count // PROFILED_STEPS:4d}x  {e.key[:150]}")


def moe_step(d, x, scores, ids, ws, dout) -> None:
    for t in (x, scores, *ws):
        t.grad = None
    w1, w2, w3 = ws
    routed = d.dispatch(x, scores, ids)
    h = F.silu(d.grouped_mm(routed, w1)) * d.grouped_mm(routed, w3)
    d.combine_mm(routed, h, w2).backward(dout)


def moe_steps(mxq, rows: int) -> None:
    for T, D, E, k, H in bench.MOE_STEP_SHAPES:
        x = bench.random_input(T, D, "bf16", 0).requires_grad_()
        ids = bench.expert_choices("uniform", T, E, k, 0).cuda()
        scores = torch.rand(T, k).cuda().requires_grad_()
        shapes = ((H, D), (D, H), (H, D))
        ws = [(torch.randn(E, *s) * s[1] ** -0.5).cuda().bfloat16().requires_grad_() for s in shapes]
        dout = bench.random_input(T, D, "bf16", 1)
        layers = {
            "fp8_blockwise (fused)": mxq.TokenDispatcher(E, config=mxq.MXFP8Config.recipe("fp8_blockwise")),
            "bf16": bench.Bf16Dispatcher(E),
        }
        for name, d in layers.items():
            step = functools.partial(moe_step, d, x, scores, ids, ws, dout)
            kernel_table(step, f"MoE step {T}x{D} E={E} k={k} H={H}: {name}", rows)


def linear_step(m, x, dy) -> None:
    x.grad = m.weight.grad = None
    m(x).backward(dy)


def linear_steps(mxq, rows: int) -> None:
    M = K = N = 8192
    w = (torch.randn(N, K) / math.sqrt(K)).cuda().bfloat16()
    x = bench.random_input(M, K, "bf16", 0).requires_grad_()
    dy = bench.random_input(M, N, "bf16", 1)
    modules, why = bench.linear_modules(mxq, w)
    for name in ("mxq fp8_blockwise", "torchao Float8BlockwiseLinear", "bf16"):
        if name not in modules:
            print(f"\nSKIPPED: {name}: {why[name]}")
            continue

        kernel_table(functools.partial(linear_step, modules[name], x, dy), f"Linear {M}x{K} -> {N}: {name}", rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=22, help="kernels per table (default 22)")
    a = ap.parse_args()
    if a.rows < 1:
        ap.error("--rows takes at least 1")
    if not torch.cuda.is_available():
        print("kernel_profile.py: no CUDA device", file=sys.stderr)
        return 2
    try:
        import mxq
    except ImportError as e:
        print(
            f"kernel_profile.py: cannot import mxq ({e}): set PYTHONPATH=python and MXQ_TORCH_LIBRARY", file=sys.stderr
        )
        return 2
    gpu = bench.gpu_facts()
    print(f"kernel_profile.py on {gpu['name']}, torch {gpu['torch']}, mxq {bench.commit()}")
    moe_steps(mxq, a.rows)
    linear_steps(mxq, a.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
