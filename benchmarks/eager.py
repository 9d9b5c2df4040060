#!/usr/bin/env python3
"""The per-call cost of mxq's torch ops for a caller without CUDA graphs (eager PyTorch), next to the GPU time.

    python3 benchmarks/eager.py                          # after `pip install --no-build-isolation .`
    python3 benchmarks/eager.py --json out.json --shapes 512x4096,8192x4096 --calls 500

For each shape, on one bf16 tensor x, each row is timed three ways in the same run:

- eager: `calls` back-to-back calls from Python, torch.cuda.synchronize() before and after the timed loop, wall
  time / calls; after a warm-up, median of `repeats` rounds, each round timing every row once in turn (a drift
  of the host's speed reaches all rows alike). This is what a training step without CUDA graphs
  pays per call: Python, the dispatcher, the op's checks and allocations, the launch, and the GPU time where
  the GPU is the slower side.
- host: the same loops up to the return of the last call: what the calling thread spends issuing the calls,
  whatever the GPU's speed or clocks.
- graph: the same call captured `graph_calls` times into one CUDA graph; replay time between CUDA events /
  graph_calls, median of `repeats` replays: the GPU time per call.

Rows: mxq.quantize(x) (the fused default), the same into preallocated outputs (out=, from the wrapper and from the
op overload), torch.ops.mxq.quantize called directly, the composed backend, rowwise only, colwise only, and two
yardsticks on the same tensor: x.add_(0) (one elementwise kernel; the cheapest useful op a user launches) and
torch.empty_like(x) (an allocation, no kernel). --breakdown adds eager-only rows that split the fused op's cost
(breakdown_rows; docs/performance.md, "Eager cost"). The numbers to watch are fused / add_ per shape, allocating
and with out=, eager and host: the target is <= 1.5, i.e. mxq.quantize costs a caller at most half again what a
trivial torch op costs.

Writes JSON (--json PATH; default benchmarks/results/eager_<gpu>_<date>.json, `-` for none) with the GPU, torch,
the mxq commit (MXQ_COMMIT, else `git rev-parse --short HEAD`), the method and, per shape, each row's
[eager us, host us, graph us] and the ratios. Exit status: 0 ok, 1 an error or differing bytes, 2 no CUDA device
(or an mxq build without CUDA kernels).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SHAPES = "128x4096,512x4096,2048x4096,8192x4096"
TARGET_RATIO = 1.5
FUSED = "mxq.quantize(x)"
FUSED_OUT = "mxq.quantize(x, out=bufs)"
ADD = "x.add_(0)"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", item)
        if not m:
            raise argparse.ArgumentTypeError(f"shape {item!r} is not MxK")
        shapes.append((int(m.group(1)), int(m.group(2))))
    return shapes


def mxq_commit() -> str:
    if os.environ.get("MXQ_COMMIT"):
        return os.environ["MXQ_COMMIT"]
    try:
        root = HERE.parent
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = (
            subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root, capture_output=True, check=False).returncode
            != 0
        )
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def default_json_path(gpu_name: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"
    date = datetime.date.today().isoformat()
    base = HERE / "results" / f"eager_{slug}_{date}"
    path, n = base.with_suffix(".json"), 2
    while path.exists():
        path, n = Path(f"{base}_{n}.json"), n + 1
    return path


def time_eager(torch, rows: dict, calls: int, warmup: int, repeats: int) -> dict:
    """Per row, [eager, host] in microseconds per call: the medians over `repeats` rounds of the wall time of
    `calls` calls from torch.cuda.synchronize() to the synchronize after them (eager) and to the return of the last
    call (host: what the calling thread spends issuing them, whatever the GPU's speed; fewer calls than the launch
    queue holds, so no call waits for the GPU). Each round times every row once, in turn, so that a drift of the
    host's speed reaches all rows alike."""
    for fn in rows.values():
        for _ in range(warmup):
            fn()
    samples = {name: ([], []) for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            samples[name][0].append((t2 - t0) / calls * 1e6)
            samples[name][1].append((t1 - t0) / calls * 1e6)
    return {name: [statistics.median(e), statistics.median(h)] for name, (e, h) in samples.items()}


def time_graph(torch, fn, graph_calls: int, repeats: int) -> float:
    """GPU time per call under CUDA-graph replay: median over `repeats` replays of event time / graph_calls, us."""
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.empty_like captures no kernel: torch warns about an empty graph
        with torch.cuda.graph(graph):
            outs = [fn() for _ in range(graph_calls)]  # kept alive: the graph's outputs live in its pool
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / graph_calls)
    del outs, graph
    return statistics.median(samples)


def make_rows(torch, mxq, x, bufs) -> dict:
    """The timed calls on one input tensor, by row name; ``bufs`` are the outputs the out= rows write."""
    ops = torch.ops.mxq
    out = dict(zip(mxq.MXTensors._fields, bufs))
    return {
        FUSED: lambda: mxq.quantize(x),
        FUSED_OUT: lambda: mxq.quantize(x, out=bufs),
        "torch.ops.mxq.quantize.out": lambda: ops.quantize.out(x, 32, "rceil", None, **out),
        "torch.ops.mxq.quantize": lambda: ops.quantize(x, 32, "rceil", None),
        'mxq.quantize(x, backend="composed")': lambda: mxq.quantize(x, backend="composed"),
        "mxq.quantize(x, colwise=False)": lambda: mxq.quantize(x, colwise=False),
        "mxq.quantize(x, rowwise=False)": lambda: mxq.quantize(x, rowwise=False),
        ADD: lambda: x.add_(0),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
    }


def breakdown_rows(torch, x) -> dict:
    """--breakdown: eager-only rows that split the fused op's cost (dispatch without a launch on a meta tensor, one
    output pair instead of two, the four outputs' allocations alone), beside the same for x.add_(0)."""
    ops = torch.ops.mxq
    meta = torch.empty_like(x, device="meta")
    outs = ops.quantize.default(x, 32, "rceil", None)
    shapes = [(t.shape, t.stride(), t.dtype) for t in outs]
    return {
        "quantize.default (the overload)": lambda: ops.quantize.default(x, 32, "rceil", None),
        "quantize_rowwise.default (2 outputs)": lambda: ops.quantize_rowwise.default(x, 32, "rceil", None),
        "quantize.default on a meta tensor": lambda: ops.quantize.default(meta, 32, "rceil", None),
        "x.add_(0) on a meta tensor": lambda: meta.add_(0),
        "4 x torch.empty_strided (the outputs)": lambda: [
            torch.empty_strided(shape, stride, dtype=dtype, device=x.device) for shape, stride, dtype in shapes
        ],
    }


def same_bytes(torch, a, b) -> bool:
    return all(
        u.dtype == v.dtype and u.shape == v.shape and torch.equal(u.view(torch.uint8), v.view(torch.uint8))
        for u, v in zip(a, b)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES), help="MxK,MxK,...")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed eager loop (default 200)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls before the eager loops (default 20)")
    ap.add_argument("--repeats", type=int, default=15, help="timed rounds / graph replays, median (default 15)")
    ap.add_argument("--graph-calls", type=int, default=20, help="calls captured per CUDA graph (default 20)")
    ap.add_argument("--json", default=None, help="output path; `-` writes none")
    ap.add_argument("--no-verify", action="store_true", help="skip the fused == composed byte check")
    ap.add_argument("--breakdown", action="store_true", help="also time eager-only rows that split the fused op's cost")
    args = ap.parse_args()

    try:
        import torch
    except ImportError:
        print("eager.py: PyTorch is not installed; nothing to measure", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"eager.py: skipped: no CUDA device (torch {torch.__version__}); this benchmark needs a GPU")
        return 2
    import mxq

    if not mxq.has_cuda_kernels():
        print("eager.py: skipped: the mxq extension has no CUDA kernels (built without nvcc or a CUDA torch)")
        return 2

    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    print(f"eager.py: {gpu}, torch {torch.__version__} (CUDA {torch.version.cuda}), mxq {mxq_commit()}")
    print(
        f"eager: {args.calls} back-to-back calls / loop, median of {args.repeats} rounds (rows in turn) after {args.warmup} warm-up"
        f" calls; graph: {args.graph_calls} calls / CUDA graph, median of {args.repeats} replays"
    )

    results = []
    failed = False
    for M, K in args.shapes:
        torch.manual_seed(0)
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        bufs = mxq.empty_quantized(x)
        rows = make_rows(torch, mxq, x, bufs)
        verified = None
        if not args.no_verify:
            fused = mxq.quantize(x)
            for t in bufs:
                t.view(torch.uint8).fill_(0xA5)  # poisoned: out= must write every byte
            verified = same_bytes(torch, fused, mxq.quantize(x, backend="composed")) and same_bytes(
                torch, fused, mxq.quantize(x, out=bufs)
            )
            if not verified:
                print(f"eager.py: {M}x{K}: fused, out= and composed outputs differ", file=sys.stderr)
                failed = True
        extra = breakdown_rows(torch, x) if args.breakdown else {}
        eager = time_eager(torch, {**rows, **extra}, args.calls, args.warmup, args.repeats)
        timed = {}
        for name in {**rows, **extra}:  # breakdown rows: eager only (a meta tensor has no GPU time)
            graph = time_graph(torch, rows[name], args.graph_calls, args.repeats) if name in rows else None
            timed[name] = [
                round(eager[name][0], 3),
                round(eager[name][1], 3),
                None if graph is None else round(graph, 3),
            ]
        ratios = {
            f"{op}_{kind}_over_add_{kind}": round(timed[row][col] / timed[ADD][col], 3)
            for op, row in (("fused", FUSED), ("fused_out", FUSED_OUT))
            for kind, col in (("eager", 0), ("host", 1))
        }
        results.append(
            {
                "M": M,
                "K": K,
                "rows": timed,
                **ratios,
                "meets_target": {name: value <= TARGET_RATIO for name, value in ratios.items()},
                "fused_equals_composed_and_out": verified,
            }
        )
        del rows, extra, x, bufs
        torch.cuda.empty_cache()

        print(f"\n{M}x{K}")
        print(f"  {'op':<38} {'eager us':>10} {'host us':>10} {'graph us':>10}")
        for name, (eager_us, host_us, graph_us) in timed.items():
            shown = f"{graph_us:>10.2f}" if graph_us is not None else f"{'-':>10}"
            print(f"  {name:<38} {eager_us:>10.2f} {host_us:>10.2f} {shown}")
        for name, value in ratios.items():
            verdict = "ok" if value <= TARGET_RATIO else "ABOVE TARGET"
            print(f"  {name} = {value:.2f} (target <= {TARGET_RATIO}: {verdict})")

    print(
        f"\nsummary: per shape, / x.add_(0) (target <= {TARGET_RATIO}); eager = synchronized wall time, host = issue time"
    )
    print(f"  {'shape':<12} {'fused eager':>12} {'out= eager':>11} {'fused host':>11} {'out= host':>10}")
    for r in results:
        values = [r[f"{op}_{kind}_over_add_{kind}"] for kind in ("eager", "host") for op in ("fused", "fused_out")]
        print(f"  {r['M']}x{r['K']:<7} {values[0]:>12.2f} {values[1]:>11.2f} {values[2]:>11.2f} {values[3]:>10.2f}")

    if args.json != "-":
        path = Path(args.json) if args.json else default_json_path(gpu)
        path.parent.mkdir(parents=True, exist_ok=True)
        props = torch.cuda.get_device_properties(dev)
        doc = {
            "schema": "mxq-eager/2",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": mxq_commit(),
            "gpu": {
                "name": gpu,
                "compute_capability": f"{props.major}.{props.minor}",
                "sms": props.multi_processor_count,
            },
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": sys.version.split()[0],
            "method": {
                "eager": "wall time of `calls` back-to-back calls between torch.cuda.synchronize(), / calls; "
                "median over `repeats` rounds (each round times every row once, in turn) after `warmup` calls",
                "host": "the same loops' wall time from the first synchronize to the return of the last call, / calls: "
                "the calling thread's issue cost, independent of the GPU's speed",
                "graph": "CUDA-graph replay of `graph_calls` captured calls between CUDA events, / graph_calls; "
                "median over `repeats` replays",
                "calls": args.calls,
                "warmup": args.warmup,
                "repeats": args.repeats,
                "graph_calls": args.graph_calls,
                "units": "microseconds per call, [eager, host, graph]",
                "input": "torch.randn bf16, seed 0; scaling_mode rceil",
            },
            "target_ratio": TARGET_RATIO,
            "shapes": results,
        }
        path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
