#!/usr/bin/env python3
"""Draw a results file of benchmarks/bench.py as a bar chart (PNG), or compare two results files row by row.

    python3 benchmarks/plot.py benchmarks/results/nvidia-h200_2026-12-08.json   # -> the same path, .png
    python3 benchmarks/plot.py RESULTS.json -o chart.png --no-peers
    python3 benchmarks/plot.py --compare BASE.json NEW.json                    # new/base time per row (text)
    python3 benchmarks/plot.py --table RESULTS.json      # the README's and docs/performance.md's results table

Panels: the main set's dense two-axis quantization per shape and its grouped one per shape and G (fused and
composed at effective TB/s: the fused bytes over the time, as the peers are quoted), its single-axis ops and
dequantize (own bytes); then one panel per other set of the run (the blockwise set: FP8 blockwise against torchao's
Triton quantizers). The black tick over a group is the same-run copy
roof, the dotted one the copy row (x's bytes by a copy kernel: the shape's own ceiling). --compare also reads the
`mxq bench` files (mxq-bench/2). Drawing needs matplotlib (pip install matplotlib); --compare does not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# Peers on the H200 (CUDA-graph replay over rotating inputs, per call, TB/s at 4.0625 B/elem), measured on
# 2026-12-02 with the same method, outside this repository; these constants are the record.
#   torchao Triton: torchao's Triton dim0 + dim1 casts + blocked swizzles of both scale tensors (grouped: the
#                   M-groups and K-groups swizzles, G = 4, 8)
#   torch.compile:  torch.compile of the reference to_mx on x and x.t() plus to_blocked
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
PEERS = ("torchao Triton", "torch.compile")
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
    "mxq routed (fused)": "#1f6fb4",
    "mxq routed, scaled": "#5a9bd4",
    "gather + pad + mxq": "#b0b0b0",
    "torchao pipeline": "#e3893b",
    "torchao blockwise (lhs + transposed lhs)": "#e3893b",
    "128x128": "#1f6fb4",
}
SERIES = {"fused": "mxq fused", "composed": "mxq composed", "rowwise": "rowwise", "colwise": "colwise"}
SERIES |= {"dequantize": "dequantize", "copy": "copy"}
ROUTED = {"routed": "mxq routed (fused)", "routed_scaled": "mxq routed, scaled", "routed_unfused": "gather + pad + mxq"}
SERIES |= ROUTED | {"routed_torchao": "torchao pipeline"}
SERIES["torchao_blockwise"] = "torchao blockwise (lhs + transposed lhs)"
ORDER = [
    "mxq fused",
    "mxq composed",
    *PEERS,
    "rowwise",
    "colwise",
    "dequantize",
    "1x32",
    "32x32",
    *ROUTED.values(),
    "torchao pipeline",
    "torchao blockwise (lhs + transposed lhs)",
    "128x128",
]
SINGLE = ("rowwise", "colwise", "dequantize")
EFFECTIVE = "effective TB/s (fused bytes / time)"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise ImportError(f"drawing needs matplotlib ({e}): pip install matplotlib") from e


def load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    if not str(doc.get("schema", "")).startswith("mxq-bench/") or not doc.get("rows"):
        sys.exit(f"{path}: not a results file with rows (schema {doc.get('schema')!r}; --eager files have none)")
    return doc


def value(r: dict) -> float:
    """A bar's height: effective TB/s for the two-axis ops, TB/s of its own bytes otherwise."""
    return r["effective_TBps"] if r["op"] in ("fused", "composed") else r["TBps"]


def grouping(r: dict) -> str:
    kind = r["groups_kind"]
    return "dense" if kind == "dense" else f"G={r['groups']}" + {"random": "", "even": " even"}.get(kind, " skew90")


def collect(rows: list[dict], pick) -> dict:
    """label -> {series: value, "roof": the roof over its rows, "copy": the copy row's TB/s}, in run order;
    pick(row) gives the row's (label, series name) or None to leave it out."""
    groups: dict = {}
    for r in rows:
        if (picked := pick(r)) is not None:
            g = groups.setdefault(picked[0], {"roof": 0.0})
            g[picked[1]], g["roof"] = value(r), max(g["roof"], r["roof_TBps"])
    return groups


def bars(ax, groups: dict, title: str, ylabel: str = "TB/s (fused, composed: effective)") -> None:
    """One group of bars per label, one bar per series, the roof (and copy) tick over each group."""
    import numpy as np

    names = [n for n in ORDER if any(n in g for g in groups.values())]
    x, width = np.arange(len(groups)), 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        at = [(j, g[name]) for j, g in enumerate(groups.values()) if g.get(name) is not None]
        peer = name in PEERS
        drawn = ax.bar(
            [x[j] - 0.4 + width * (i + 0.5) for j, _ in at],
            [v for _, v in at],
            width,
            label=name + " (peer)" * peer,
            color=COLORS.get(name),
            hatch="//" if peer else None,
            edgecolor="#555555" if peer else "white",
            linewidth=0.5,
        )
        if name == "mxq fused":
            ax.bar_label(drawn, fmt="%.2f", fontsize=7, padding=2)
    ticks = {"roof": ("copy roof (same run)", "solid", 2), "copy": ("copy (shape ceiling)", "dotted", 1.5)}
    for key, (label, style, width) in ticks.items():
        at = [(j, g[key]) for j, g in enumerate(groups.values()) if g.get(key)]
        for n, (j, v) in enumerate(at):
            ax.hlines(
                v, x[j] - 0.45, x[j] + 0.45, colors="black", linestyles=style, linewidth=width, label=label * (n == 0)
            )
    ax.set_xticks(x, list(groups), fontsize=8 if len(groups) <= 12 else 6.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(fontsize=7, ncol=len(names) + 2, loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False)


def shape(r: dict) -> str:
    return f"{r['M']}x{r['K']}"


def routed_label(r: dict) -> str:
    return f"{r['M']}x{r['K']}\nE={r['groups']} k={r.get('top_k')} {r['groups_kind']}"


def panels(rows: list[dict], peers: bool) -> list[tuple]:
    """(title, groups, y label) of every panel the run has rows for."""
    main = [r for r in rows if r["set"] == "main"]
    dtype, split = main[0]["dtype"] if main else "bf16", next((shape(r) for r in rows if r["set"] == "grouped"), "")

    def of(rows: list[dict], label, ops=tuple(SERIES)) -> dict:  # series: the op, or a weight's scaling
        return collect(
            rows, lambda r: (label(r), SERIES.get(r["op"], r.get("scaling"))) if label(r) and r["op"] in ops else None
        )

    dense = of(main, lambda r: r["groups"] == 0 and shape(r), ("fused", "composed", "copy"))
    grouped = of(main, lambda r: r["groups"] and f"{shape(r)}\nG={r['groups']}", ("fused", "composed"))
    for (M, K), tbps in PEERS_DENSE.items() if peers else ():
        dense.get(f"{M}x{K}", {}).update(tbps)
    for (M, K, G), tbps in PEERS_GROUPED.items() if peers else ():
        grouped.get(f"{M}x{K}\nG={G}", {}).update({"torchao Triton": tbps})
    found = [
        (f"Dense, both axes (all four outputs), {dtype} in", dense, EFFECTIVE),
        (f"Grouped (MoE), both axes: random 32-multiple groups, an empty one, a tail; {dtype} in", grouped, EFFECTIVE),
        ("Single-axis ops and dequantize, dense", of(main, lambda r: r["groups"] == 0 and shape(r), SINGLE), "TB/s"),
        (
            "Ragged shapes (multiples of 32, not of 128) next to aligned ones",
            of([r for r in rows if r["set"] == "ragged"], lambda r: shape(r) + " (ragged)" * (not r["aligned128"])),
            None,
        ),
        (
            f"Group splits at {split}: random, even, skewed (one group 90%)",
            of([r for r in rows if r["set"] == "grouped"], grouping),
            None,
        ),
        (
            "Input dtype, dense (fp32 reads 4 B/elem)",
            of([r for r in rows if r["set"] == "dtypes"], lambda r: r["dtype"]),
            None,
        ),
        (
            "Expert weights W (G x N x K), bf16, both axes: 1x32 and 32x32 scaling",
            of([r for r in rows if r["set"] == "weights"], lambda r: f"{r['experts']}x{r['N']}x{r['K']}", ("weight",)),
            "TB/s",
        ),
        (
            "Routed input stage (gather by route, pad to 32, both axes), bf16 x; all ops: the fused op's bytes / time",
            of([r for r in rows if r["set"] == "routed"], routed_label, (*ROUTED, "routed_torchao")),
            EFFECTIVE,
        ),
    ]
    blockwise = [r for r in rows if r["set"] == "blockwise"]
    found.append(
        (
            f"FP8 blockwise (1x128 / 128x1 blocks, fp32 factors, rule {blockwise[0].get('scaling_mode', 'fp32')}), "
            f"{blockwise[0]['dtype']} in: fused vs torchao's two Triton kernels (fused bytes / time), one axis, "
            "grouped G=8, weights in 128x128 tiles"
            if blockwise
            else "",
            of(
                blockwise,
                lambda r: (
                    f"W {r['experts']}x{r['N']}x{r['K']}" if r["op"] == "weight" else shape(r) + f"\n{grouping(r)}"
                ),
                ("fused", "torchao_blockwise", "rowwise", "colwise", "copy", "weight"),
            ),
            "TB/s (fused, torchao: fused bytes / time)",
        )
    )
    found.append(
        (
            "FP8 blockwise routed input stage (gather by route, pad to 128, both axes), bf16 x; fused op's bytes / time",
            of(blockwise, routed_label, tuple(ROUTED)),
            EFFECTIVE,
        )
    )
    return [p for p in found if any(set(g) & set(ORDER) for g in p[1].values())]


def render(doc: dict, out: Path, peers: bool = True) -> None:
    """Draw the results `doc` (bench.py's JSON) into the PNG `out`."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpu = doc.get("gpu", {})
    main_bf16 = all(r["dtype"] == "bf16" for r in doc["rows"] if r["set"] == "main")
    peers = peers and "H200" in gpu.get("name", "") and main_bf16  # the peers were measured on bf16 input
    drawn = panels(doc["rows"], peers)
    fig, axes = plt.subplots(len(drawn), 1, figsize=(16, 4.8 * len(drawn)), squeeze=False)
    for ax, (title, groups, ylabel) in zip(axes[:, 0], drawn):
        bars(ax, groups, title, *(ylabel,) * bool(ylabel))
    method = doc.get("method", {})
    fig.suptitle(
        f"mxq on {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}, commit {doc.get('commit', '?')}, "
        f"{doc.get('date', '?')[:10]} | CUDA-graph replay, median of {method.get('rounds', method.get('replays', '?'))} "
        f"rounds | " + (f"peers: {PEERS_SOURCE}" if peers else "peers not shown"),
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98), h_pad=3)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def compare(base_path: Path, new_path: Path) -> str:
    """Per-row time ratio new / base of two results files, rows matched by set, op, shape, dtype and grouping."""
    base, new = (json.loads(Path(p).read_text()) for p in (base_path, new_path))
    fields = ("set", "op", "M", "K", "dtype", "groups", "groups_kind", "scaling")
    old = {tuple(r.get(k) for k in fields): r for r in base["rows"]}
    lines, ratios = [f"base {base_path} ({base.get('commit')}), new {new_path} ({new.get('commit')})", ""], []
    lines.append(
        f"{'set':<8}{'op':<11}{'shape':<14}{'dtype':<6}{'groups':<12}{'base us':>10}{'new us':>10}{'new/base':>9}"
    )
    for r in new["rows"]:
        if (b := old.get(tuple(r.get(k) for k in fields))) is not None:
            ratios.append(r["us"] / b["us"])
            label = r.get("scaling") or grouping(r)
            lines.append(
                f"{r['set']:<8}{r['op']:<11}{r['M']}x{r['K']:<{13 - len(str(r['M']))}}{r['dtype']:<6}{label:<12}"
                f"{b['us']:>10.2f}{r['us']:>10.2f}{ratios[-1]:>9.3f}"
            )
    if ratios:
        lines.append(
            f"\nnew/base over {len(ratios)} rows: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
            f"max {max(ratios):.3f}"
        )
    return "\n".join(lines)


def results_table(doc: dict) -> str:
    """The main set as the README and docs/performance.md show it: per shape the fused kernel (dense and G = 8)
    beside the copy row, the composed path and the single-axis ops."""
    rows = {(r["op"], r["M"], r["K"], r["groups"]): r for r in doc["rows"] if r["set"] == "main"}
    cell = lambda r, f: "-" if r is None else f(r)
    tbps = lambda r: f"{r['TBps']:.2f} ({r['pct_roof']:.0f}%)"
    pct = lambda r: f"{r['pct_roof']:.0f}%"
    header = ["shape (M×K)", "fused µs", "fused TB/s (% roof)", "copy % roof", "fused G=8 TB/s (% roof)"]
    header += ["composed µs", "fused speedup", "rowwise % roof", "colwise % roof", "dequantize % roof"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for M, K in dict.fromkeys((r["M"], r["K"]) for r in doc["rows"] if r["set"] == "main"):
        get = lambda op, g=0, mk=(M, K): rows.get((op, *mk, g))
        fused, composed = get("fused"), get("composed")
        speedup = "-" if not (fused and composed) else f"{composed['us'] / fused['us']:.2f}×"
        cells = [f"{M}×{K}", cell(fused, lambda r: f"{r['us']:.1f}"), cell(fused, tbps), cell(get("copy"), pct)]
        cells += [cell(get("fused", 8), tbps), cell(composed, lambda r: f"{r['us']:.1f}"), speedup]
        cells += [cell(get(op), pct) for op in ("rowwise", "colwise", "dequantize")]
        lines.append("| " + " | ".join(cells) + " |")
    roof = ", ".join(f"{r['TBps']:.2f} TB/s at {r['copy_bytes'] >> 20} MiB" for r in doc.get("roof", []))
    gpu = doc.get("gpu", {})
    lines.append(f"\n{gpu.get('name', '?')}, commit {doc.get('commit', '?')}, {doc.get('date', '?')[:10]}; roof {roof}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, help="a JSON written by benchmarks/bench.py")
    parser.add_argument("-o", "--output", type=Path, help="PNG path (default: the JSON's path with .png)")
    parser.add_argument("--no-peers", action="store_true", help="leave out the H200 peer numbers")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BASE", "NEW"), help="print new/base per row")
    parser.add_argument("--table", action="store_true", help="print the main set's results table (markdown)")
    args = parser.parse_args(argv)
    if args.table and args.results:
        print(results_table(load(args.results)))
        return 0
    if args.compare:
        print(compare(*args.compare))
        return 0
    if args.results is None:
        parser.error("give a results file, or --compare BASE NEW")
    out = args.output or args.results.with_suffix(".png")
    render(load(args.results), out, peers=not args.no_peers)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
