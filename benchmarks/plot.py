#!/usr/bin/env python3
"""Draw the results JSON of `mxq bench` as a bar chart (PNG).

    python benchmarks/plot.py benchmarks/results/nvidia-h200_2026-12-03.json            # -> same name .png
    python benchmarks/plot.py RESULTS.json -o chart.png --no-peers

Panels, from the case sets of the run (`mxq bench --sets`): the main set's dense dual-axis quantization per
shape, its grouped (MoE) dual-axis per shape and group count, and its single-axis ops; then, when the run has
them, ragged shapes next to their aligned neighbours, grouped splits (random, even, skewed) at one shape, the
input dtypes, and expert weights. Dual-axis bars are *effective* TB/s (fused bytes, ~4.06 B/elem for bf16, over
time) so fused, composed and the peers compare on the same work; the other ops use their own bytes
(tools/traffic.h). The black tick over each group is the copy roof (cudaMemcpy, bytes read + written) measured
in the same run; on the dense panel a dashed tick marks the probe (`mxq bench` op "probe": the fused kernel's data
movement without the math), the design's own ceiling, and a dotted tick the copy (op "copy": a plain copy kernel
of x's bytes), the shape's own ceiling, when the run has them. Reads both result schemas (mxq-bench/1
rows have no set: they are the main set, bf16).
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
    "dequantize": "#b56576",
    "1x32": "#2a9d8f",
    "32x32": "#1f6fb4",
}
SINGLE_OPS = ["rowwise", "colwise", "dequantize"]
# Series of the set panels: dual-axis ops at effective TB/s, the others at their own bytes.
SET_SERIES = {
    "fused": "mxq fused",
    "composed": "mxq composed",
    "rowwise": "rowwise",
    "colwise": "colwise",
    "dequantize": "dequantize",
}
SERIES_ORDER = ["mxq fused", "mxq composed", "rowwise", "colwise", "dequantize"]


def load(path: Path) -> dict:
    with path.open() as f:
        data = json.load(f)
    if not str(data.get("schema", "")).startswith("mxq-bench/"):
        sys.exit(f"{path}: not an `mxq bench` results file (schema {data.get('schema')!r})")
    return data


def normalize(rows: list[dict]) -> list[dict]:
    """Fill in the fields a mxq-bench/1 file lacks: its rows are the main set, bf16, random groups."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("set", "main")
        r.setdefault("dtype", "bf16")
        r.setdefault("groups_kind", "random" if r["groups"] else "dense")
        out.append(r)
    return out


def shape_order(rows: list[dict]) -> list[tuple[int, int]]:
    """Shapes in the order the run measured them."""
    return list(OrderedDict(((r["M"], r["K"]), None) for r in rows))


def main_dtype(rows: list[dict]) -> str:
    """The input dtype of the main set (`mxq bench --dtype`, bf16 by default)."""
    return next((r["dtype"] for r in rows if r["set"] == "main"), "bf16")


def index_rows(rows: list[dict]) -> dict:
    """The main set's rows (the panels the first schema had), keyed (op, M, K, groups)."""
    dtype = main_dtype(rows)
    return {
        (r["op"], r["M"], r["K"], r["groups"]): r
        for r in rows
        if r["set"] == "main" and r["dtype"] == dtype and r["groups_kind"] in ("dense", "random")
    }


def value(row: dict | None) -> float | None:
    """The bar height of a set panel: effective TB/s for the dual-axis ops, own-bytes TB/s otherwise."""
    if row is None:
        return None
    return row["effective_TBps"] if row["op"] in ("fused", "composed", "probe") else row["TBps"]


def grouping_label(r: dict) -> str:
    """'dense', 'G=8', 'G=8 even', 'G=8 skew' (as `mxq bench` prints them)."""
    kind = r["groups_kind"]
    if kind == "dense":
        return "dense"
    return f"G={r['groups']}" + ("" if kind == "random" else " " + ("skew" if kind == "skewed" else kind))


def draw_groups(ax, labels, series, roofs, ylabel, title, legend_y=-0.12, ceilings=None, copies=None):
    """Grouped bars: `series` maps a legend name to one value (or None) per label; `roofs` one value per label;
    `ceilings` and `copies` (optional) one probe or copy value (or None) per label, drawn as a dashed or a dotted
    tick."""
    import numpy as np

    names = [n for n, vals in series.items() if any(v is not None for v in vals)]
    ceilings = ceilings or [None] * len(labels)
    copies = copies or [None] * len(labels)
    if not names and not any(ceilings):
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

    def ticks(values, label, **style):
        """One horizontal tick per bar group where values[j] is set; the legend entry on the first one."""
        first = next((j for j, v in enumerate(values) if v), None)
        for j, v in enumerate(values):
            if v:
                ax.hlines(v, x[j] - 0.45, x[j] + 0.45, label=label if j == first else None, **style)

    ticks(roofs, "copy roof (same run)", colors="black", linewidth=2)
    ticks(ceilings, "probe (design ceiling)", colors="#444444", linestyles="dashed", linewidth=1.5)
    ticks(copies, "copy (shape ceiling)", colors="#444444", linestyles="dotted", linewidth=1.5)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(
        fontsize=7,
        ncol=len(names) + 1 + any(ceilings) + any(copies),
        loc="upper left",
        bbox_to_anchor=(0, legend_y),
        frameon=False,
    )


def dense_panel(ax, data, by_key, peers):
    shapes = [
        s for s in shape_order(data["rows"]) if any((op, *s, 0) in by_key for op in ("fused", "composed", "probe"))
    ]
    labels = [f"{m}x{k}" for m, k in shapes]
    series = {"mxq fused": [], "mxq composed": [], "torchao Triton": [], "torch.compile": []}
    roofs, ceilings, copies = [], [], []
    for m, k in shapes:
        fused, composed = by_key.get(("fused", m, k, 0)), by_key.get(("composed", m, k, 0))
        probe, copy = by_key.get(("probe", m, k, 0)), by_key.get(("copy", m, k, 0))
        series["mxq fused"].append(fused["effective_TBps"] if fused else None)
        series["mxq composed"].append(composed["effective_TBps"] if composed else None)
        for peer in ("torchao Triton", "torch.compile"):
            series[peer].append(PEERS_DENSE.get((m, k), {}).get(peer) if peers else None)
        roofs.append((fused or composed or probe)["roof_TBps"])
        ceilings.append(probe["effective_TBps"] if probe else None)
        copies.append(copy["TBps"] if copy else None)
    draw_groups(
        ax,
        labels,
        series,
        roofs,
        "effective TB/s (4.06 B/elem)",
        f"Dense dual-axis MXFP8 (all four outputs), {main_dtype(data['rows'])} in",
        ceilings=ceilings,
        copies=copies,
    )


def grouped_panel(ax, data, by_key, peers):
    keys = sorted(
        {(m, k, g) for (op, m, k, g) in by_key if g > 0 and op in ("fused", "composed")},
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
        "Grouped (MoE) dual-axis: M-groups s_row, K-groups s_col; random group sizes (multiples of 32 since "
        "mxq-bench/2, of 128 before), an empty one, a tail",
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
        "Single-axis ops and dequantize, dense (rowwise 1x32, colwise 32x1 with blocked scales, dequantize to bf16)",
    )


def set_panel(ax, rows, labels_of, title, series_names=None, legend_y=-0.14):
    """Bars of one case set: one group per label (in run order), one bar per series, the roof tick per group.
    `labels_of(row)` gives a row's (label, series name), or None to leave the row out."""
    groups: OrderedDict = OrderedDict()
    for r in rows:
        picked = labels_of(r)
        if picked is None:
            continue
        label, name = picked
        groups.setdefault(label, {})[name] = r
    if not groups:
        ax.set_visible(False)
        return False
    present = {n for by_name in groups.values() for n in by_name}
    names = series_names or [n for n in SERIES_ORDER if n in present]
    series = {n: [value(groups[label].get(n)) for label in groups] for n in names}
    roofs = [max(r["roof_TBps"] for r in by_name.values()) for by_name in groups.values()]
    draw_groups(ax, list(groups), series, roofs, "TB/s (fused, composed: effective)", title, legend_y=legend_y)
    return True


def ragged_panel(ax, rows):
    def pick(r):
        if r["set"] != "ragged" or r["op"] not in SET_SERIES:
            return None
        ragged = "" if r.get("aligned128", True) else " (ragged)"
        return f"{r['M']}x{r['K']}{ragged}", SET_SERIES[r["op"]]

    return set_panel(
        ax,
        rows,
        pick,
        "Ragged shapes (multiples of 32, not of 128) next to their aligned neighbours",
        legend_y=-0.2,
    )


def grouped_set_panel(ax, rows):
    def pick(r):
        if r["set"] != "grouped" or r["op"] not in SET_SERIES:
            return None
        return grouping_label(r), SET_SERIES[r["op"]]

    shape = next((f"{r['M']}x{r['K']}" for r in rows if r["set"] == "grouped"), "")
    return set_panel(
        ax,
        rows,
        pick,
        f"Group splits at {shape}: random (empty group, tail), even, skewed (one group 90%)",
        legend_y=-0.2,
    )


def dtype_panel(ax, rows):
    def pick(r):
        if r["set"] != "dtypes" or r["op"] not in SET_SERIES:
            return None
        return r["dtype"], SET_SERIES[r["op"]]

    shape = next((f"{r['M']}x{r['K']}" for r in rows if r["set"] == "dtypes"), "")
    return set_panel(ax, rows, pick, f"Input dtype at {shape}, dense (fp32 reads 4 B/elem)", legend_y=-0.2)


def weight_panel(ax, rows):
    def pick(r):
        if r["set"] != "weights" or r["op"] != "weight":
            return None
        return f"{r['experts']}x{r['N']}x{r['K']}", r["scaling"]

    return set_panel(
        ax,
        rows,
        pick,
        "Expert weights W (G x N x K), bf16, both axes: 1x32 and 32x32 scaling",
        series_names=["1x32", "32x32"],
        legend_y=-0.2,
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
    data["rows"] = normalize(data["rows"])
    rows = data["rows"]
    by_key = index_rows(rows)
    gpu = data.get("gpu", {})
    # The peers were measured on bf16 input.
    peers = not args.no_peers and "H200" in gpu.get("name", "") and main_dtype(rows) == "bf16"

    sets = {r["set"] for r in rows}
    extra_rows = (1 if sets & {"ragged", "grouped"} else 0) + (1 if sets & {"dtypes", "weights"} else 0)
    fig = plt.figure(figsize=(16, 15 + 5.5 * extra_rows))
    grid = fig.add_gridspec(3 + extra_rows, 2, height_ratios=[1, 1.2, 1] + [1] * extra_rows)
    dense_panel(fig.add_subplot(grid[0, :]), data, by_key, peers)
    grouped_panel(fig.add_subplot(grid[1, :]), data, by_key, peers)
    single_panel(fig.add_subplot(grid[2, :]), data, by_key)
    row = 3
    if sets & {"ragged", "grouped"}:
        ragged_panel(fig.add_subplot(grid[row, 0]), rows)
        grouped_set_panel(fig.add_subplot(grid[row, 1]), rows)
        row += 1
    if sets & {"dtypes", "weights"}:
        dtype_panel(fig.add_subplot(grid[row, 0]), rows)
        weight_panel(fig.add_subplot(grid[row, 1]), rows)
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
