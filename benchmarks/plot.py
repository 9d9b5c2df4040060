#!/usr/bin/env python3
"""Draw the results JSON of `mxq bench` as a bar chart (PNG).

    python benchmarks/plot.py benchmarks/results/nvidia-h200_2026-12-03.json            # -> same name .png
    python benchmarks/plot.py RESULTS.json -o chart.png --no-peers

Panels: dense dual-axis quantization per shape, grouped (MoE) dual-axis per shape and group count, and the
single-axis / helper ops. Dual-axis bars are *effective* TB/s (fused bytes, ~4.06 B/elem, over time) so fused,
composed and the peers compare on the same work; the other ops use their own bytes (tools/traffic.h). The black
tick over each group is the copy roof (cudaMemcpy, bytes read + written) measured in the same run.
Needs matplotlib (pip install matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

# Peers on the H200 (CUDA-graph replay over rotating inputs, per call, TB/s at 4.0625 B/elem), measured on
# 2026-12-02 with the same method as `mxq bench`, outside this repository; these constants are the record.
#   triton:  torchao Triton dim0 + dim1 casts + blocked swizzles of both scale tensors
#   compile: torch.compile of the reference to_mx on x and x.t() plus to_blocked
#   triton_grouped: the Triton casts with the M-groups and K-groups swizzles (G = 4, 8)
PEERS_SOURCE = "H200 peers measured 2026-12-02 (constants in benchmarks/plot.py)"
PEERS_DENSE = {
    (8192, 2048): {"torchao Triton": 1.264, "torch.compile": 0.806},
    (8192, 7168): {"torchao Triton": 1.476, "torch.compile": 0.909},
    (32768, 2048): {"torchao Triton": 1.488, "torch.compile": 0.900},
    (32768, 7168): {"torchao Triton": 1.584, "torch.compile": 0.911},
    (131072, 2048): {"torchao Triton": 1.506, "torch.compile": 0.911},
    (131072, 7168): {"torchao Triton": 1.455, "torch.compile": 0.892},
}
PEERS_GROUPED = {  # (M, K, G) -> TB/s of torchao's Triton grouped path
    (8192, 2048, 4): 0.865,
    (8192, 2048, 8): 0.945,
    (8192, 7168, 4): 1.191,
    (8192, 7168, 8): 1.334,
    (32768, 2048, 4): 0.973,
    (32768, 2048, 8): 1.110,
    (32768, 7168, 4): 1.396,
    (32768, 7168, 8): 1.485,
    (131072, 2048, 4): 0.923,
    (131072, 2048, 8): 1.138,
    (131072, 7168, 4): 1.331,
    (131072, 7168, 8): 1.358,
}

COLORS = {
    "mxq fused": "#1f6fb4",
    "mxq composed": "#7fb3e0",
    "torchao Triton": "#e3893b",
    "torch.compile": "#c9c9c9",
    "rowwise": "#2a9d8f",
    "colwise": "#8ab17d",
    "swizzle": "#e9c46a",
    "dequantize": "#b56576",
}
SINGLE_OPS = ["rowwise", "colwise", "swizzle", "dequantize"]


def load(path: Path) -> dict:
    with path.open() as f:
        data = json.load(f)
    if not str(data.get("schema", "")).startswith("mxq-bench/"):
        sys.exit(f"{path}: not an `mxq bench` results file (schema {data.get('schema')!r})")
    return data


def shape_order(rows: list[dict]) -> list[tuple[int, int]]:
    """Shapes in the order the run measured them."""
    return list(OrderedDict(((r["M"], r["K"]), None) for r in rows))


def index_rows(rows: list[dict]) -> dict:
    return {(r["op"], r["M"], r["K"], r["groups"]): r for r in rows}


def draw_groups(ax, labels, series, roofs, ylabel, title, legend_y=-0.12):
    """Grouped bars: `series` maps a legend name to one value (or None) per label; `roofs` one value per label."""
    import numpy as np

    names = [n for n, vals in series.items() if any(v is not None for v in vals)]
    if not names:
        ax.set_visible(False)
        return
    x = np.arange(len(labels))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        vals = series[name]
        xs = [x[j] - 0.4 + width * (i + 0.5) for j, v in enumerate(vals) if v is not None]
        ys = [v for v in vals if v is not None]
        peer = name in ("torchao Triton", "torch.compile")
        bars = ax.bar(
            xs,
            ys,
            width,
            label=name + (" (peer)" if peer else ""),
            color=COLORS.get(name),
            hatch="//" if peer else None,
            edgecolor="white" if not peer else "#555555",
            linewidth=0.5,
        )
        if name == "mxq fused":
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    for j, roof in enumerate(roofs):
        if roof:
            ax.hlines(
                roof,
                x[j] - 0.45,
                x[j] + 0.45,
                colors="black",
                linewidth=2,
                label="copy roof (same run)" if j == next(k for k, r in enumerate(roofs) if r) else None,
            )
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(
        fontsize=7,
        ncol=len(names) + 1,
        loc="upper left",
        bbox_to_anchor=(0, legend_y),
        frameon=False,
    )


def dense_panel(ax, data, by_key, peers):
    shapes = [s for s in shape_order(data["rows"]) if ("fused", *s, 0) in by_key or ("composed", *s, 0) in by_key]
    labels = [f"{m}x{k}" for m, k in shapes]
    series = {"mxq fused": [], "mxq composed": [], "torchao Triton": [], "torch.compile": []}
    roofs = []
    for m, k in shapes:
        fused, composed = by_key.get(("fused", m, k, 0)), by_key.get(("composed", m, k, 0))
        series["mxq fused"].append(fused["effective_TBps"] if fused else None)
        series["mxq composed"].append(composed["effective_TBps"] if composed else None)
        for peer in ("torchao Triton", "torch.compile"):
            series[peer].append(PEERS_DENSE.get((m, k), {}).get(peer) if peers else None)
        roofs.append((fused or composed)["roof_TBps"])
    draw_groups(
        ax,
        labels,
        series,
        roofs,
        "effective TB/s (4.06 B/elem)",
        "Dense dual-axis MXFP8 (all four outputs), bf16 in",
    )


def grouped_panel(ax, data, by_key, peers):
    keys = sorted(
        {(r["M"], r["K"], r["groups"]) for r in data["rows"] if r["groups"] > 0 and r["op"] in ("fused", "composed")},
        key=lambda t: (shape_order(data["rows"]).index((t[0], t[1])), t[2]),
    )
    labels = [f"G={g}" for m, k, g in keys]
    series = {"mxq fused": [], "mxq composed": [], "torchao Triton": []}
    roofs = []
    for m, k, g in keys:
        fused, composed = by_key.get(("fused", m, k, g)), by_key.get(("composed", m, k, g))
        series["mxq fused"].append(fused["effective_TBps"] if fused else None)
        series["mxq composed"].append(composed["effective_TBps"] if composed else None)
        series["torchao Triton"].append(PEERS_GROUPED.get((m, k, g)) if peers else None)
        roofs.append((fused or composed)["roof_TBps"])
    if not keys:
        ax.set_visible(False)
        return
    draw_groups(
        ax,
        labels,
        series,
        roofs,
        "effective TB/s (4.06 B/elem)",
        "Grouped (MoE) dual-axis: M-groups s_row, K-groups s_col; random 128-multiple groups, an empty one, a tail",
        legend_y=-0.16,
    )
    # The shape once under its group counts.
    from matplotlib.transforms import blended_transform_factory

    under = blended_transform_factory(ax.transData, ax.transAxes)
    for shape in OrderedDict(((m, k), None) for m, k, _ in keys):
        xs = [j for j, key in enumerate(keys) if key[:2] == shape]
        ax.text(
            sum(xs) / len(xs),
            -0.09,
            f"{shape[0]}x{shape[1]}",
            transform=under,
            ha="center",
            va="top",
            fontsize=8,
        )


def single_panel(ax, data, by_key):
    shapes = [s for s in shape_order(data["rows"]) if any((op, *s, 0) in by_key for op in SINGLE_OPS)]
    labels = [f"{m}x{k}" for m, k in shapes]
    series = {op: [] for op in SINGLE_OPS}
    roofs = []
    for m, k in shapes:
        rows = [by_key.get((op, m, k, 0)) for op in SINGLE_OPS]
        for op, row in zip(SINGLE_OPS, rows):
            series[op].append(row["TBps"] if row else None)
        roofs.append(max(r["roof_TBps"] for r in rows if r))
    if not shapes:
        ax.set_visible(False)
        return
    draw_groups(
        ax,
        labels,
        series,
        roofs,
        "TB/s (own bytes)",
        "Single-axis and helper ops, dense (rowwise 1x32, colwise 32x1, scale swizzle, dequantize)",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="JSON written by `mxq bench`")
    parser.add_argument("-o", "--output", type=Path, help="PNG path (default: the JSON's path with .png)")
    parser.add_argument("--no-peers", action="store_true", help="leave out the H200 peer numbers")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = load(args.results)
    by_key = index_rows(data["rows"])
    gpu = data.get("gpu", {})
    peers = not args.no_peers and "H200" in gpu.get("name", "")

    fig, axes = plt.subplots(3, 1, figsize=(16, 15), gridspec_kw={"height_ratios": [1, 1.2, 1]})
    dense_panel(axes[0], data, by_key, peers)
    grouped_panel(axes[1], data, by_key, peers)
    single_panel(axes[2], data, by_key)
    note = f"peers: {PEERS_SOURCE} (same GPU kind, same method)" if peers else "peers not shown"
    fig.suptitle(
        f"mxq bench on {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, commit "
        f"{data.get('commit', '?')}, {data.get('date', '?')[:10]}  |  median of "
        f"{data.get('method', {}).get('replays', '?')} CUDA-graph replays  |  {note}",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97), h_pad=3)
    out = args.output or args.results.with_suffix(".png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
