"""benchmarks/bench.py without a GPU: the case plan (--list), the byte formula against the real tensors of the CPU ops,
the group offsets, the scale-layout reading its band checks rely on, the roof pick, the exit codes (no CUDA device:
2; an output that cannot be written: not 0), and plot.py's reading of a results file."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")
import mxq  # noqa: F401  (registers torch.ops.mxq)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = load("bench")
plot = load("plot")
ops = torch.ops.mxq


def listed(capsys, *args):
    assert bench.main(["--list", *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{len(out) - 1} cases"
    return out[:-1]


def test_list_counts_the_cases_of_each_set(capsys):
    assert len(listed(capsys)) == 214 + 32 + 38  # mxq bench's 221 less the 7 probe rows, routed, FP8 blockwise
    counts = {s: len(listed(capsys, "--sets", s)) for s in bench.SETS}
    assert counts == {
        "main": 147,
        "ragged": 20,
        "grouped": 30,
        "dtypes": 9,
        "weights": 8,
        "routed": 32,
        "blockwise": 38,
    }
    assert len(listed(capsys, "--quick")) == 2 * (6 + 5) + 10
    lines = listed(capsys, "--shapes", "512x4096", "--ops", "fused,copy", "--groups", "8")
    assert [line.split("] ")[1].split()[1:3] for line in lines] == [
        ["fused", "512x4096"],
        ["copy", "512x4096"],
        ["fused", "512x4096"],
    ]
    assert "8.0 MiB" in lines[1]  # copy: x's 4 MiB read and written


@pytest.mark.parametrize(
    "argv", [["--sets", "main,nope"], ["--shapes", "100x64"], ["--groups", "0"], ["--rounds", "0"]]
)
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2
    assert "bench.py: error:" in capsys.readouterr().err


def cpu_input(rows, cols, dtype):
    return (torch.rand(rows, cols) * 2 - 1).to(bench.DTYPES[dtype])


@pytest.mark.parametrize("M,K,groups,dtype", [(256, 128, 0, "bf16"), (96, 160, 3, "fp16"), (160, 64, 2, "fp32")])
def test_bytes_are_the_tensors_the_cpu_ops_read_and_write(M, K, groups, dtype):
    x = cpu_input(M, K, dtype)
    offs = torch.tensor(bench.group_offsets("random", M, groups, 1), dtype=torch.int32) if groups else None
    size = lambda *ts: sum(t.nbytes for t in ts)
    q_row, s_row, q_col, s_col = ops.quantize(x, 32, "rceil", offs)
    if offs is None:
        out = ops.dequantize(q_row, s_row, None, "blocked")
        dequantize = size(q_row, s_row, out)
    else:
        out = ops.dequantize(q_col.t(), s_col, offs, "k_groups")
        dequantize = size(q_col, s_col, out)
    plain = K * M // 32  # composed's workspace: S_col (K, M/32), written and read back
    expected = {
        "fused": size(x, q_row, s_row, q_col, s_col),
        "rowwise": size(x, *ops.quantize_rowwise(x, 32, "rceil", offs)),
        "colwise": size(x, *ops.quantize_colwise(x, 32, "rceil", offs)),
        "composed": size(x, x, *ops.quantize_composed(x, 32, "rceil", offs)) + 2 * plain,
        "dequantize": dequantize,
        "copy": 2 * x.nbytes,
    }
    for op, nbytes in expected.items():
        case = bench.Case("main", op, M, K, dtype, "random" if groups else "dense", groups)
        read, written, effective = bench.case_bytes(case)
        assert read + written == nbytes, op
        assert effective == (expected["fused"] if op in ("fused", "composed") else nbytes), op


@pytest.mark.parametrize("G,N,K,scaling", [(2, 96, 64, "1x32"), (3, 160, 128, "32x32"), (1, 64, 32, "32x32")])
def test_weight_bytes_are_the_tensors_of_quantize_weight(G, N, K, scaling):
    w = cpu_input(G * N, K, "bf16").view(G, N, K)
    outputs = ops.quantize_weight(w, "rceil", scaling, True, True)
    read, written, _ = bench.case_bytes(bench.Case("weights", "weight", N, K, experts=G, scaling=scaling))
    assert (read, written) == (w.nbytes, sum(t.nbytes for t in outputs))


def test_group_offsets():
    # mxq bench's offsets for seed 1 (benchmarks/results/nvidia-h200_2026-12-04.json): the same splits
    assert bench.group_offsets("random", 8192, 4, 1) == [1728, 7424, 7424, 7968]
    assert bench.group_offsets("skewed", 32768, 8, 1) == [320, 960, 2816, 2816, 2816, 3232, 32736, 32768]
    assert bench.group_offsets("even", 32768, 8, 1) == [4096 * g for g in range(1, 9)]
    for G in (2, 8, 64, 256):
        offs = bench.group_offsets("random", 32768, G, 1)
        sizes = [b - a for a, b in zip([0, *offs], offs)]
        assert len(offs) == G and all(s >= 0 and s % 32 == 0 for s in sizes)
        assert 0 in sizes and offs[-1] < 32768  # an empty group and an uncovered tail


@pytest.mark.parametrize("kind,G", [("dense", 0), ("random", 5), ("even", 4), ("skewed", 3)])
def test_plain_scales_read_every_layout(kind, G):
    """The grouped layouts hold the dense scales, placed per group: what the band checks compare."""
    M, K = 1024, 384
    offs = bench.group_offsets(kind, M, G, 1) if G else None
    x = cpu_input(M, K, "bf16")
    dense = dict(zip(bench.NAMES, ops.quantize(x, 32, "rceil", None)))
    placed = dict(zip(bench.NAMES, ops.quantize(x, 32, "rceil", offs and torch.tensor(offs, dtype=torch.int32))))
    covered = (offs or [M])[-1] // 32
    assert torch.equal(
        bench.plain_scales("s_row", placed["s_row"], M, K, offs),
        bench.plain_scales("s_row", dense["s_row"], M, K, None),
    )
    assert torch.equal(
        bench.plain_scales("s_col", placed["s_col"], M, K, offs),
        bench.plain_scales("s_col", dense["s_col"], M, K, None)[:, :covered],
    )


def test_roof_pick_is_the_nearest_copy_on_a_log_scale():
    roof = [{"copy_bytes": n, "TBps": 1.0} for n in bench.ROOF_COPY_BYTES]  # traffic 512 MiB, 2 GiB, 8 GiB
    pick = lambda nbytes: bench.pick_roof(roof, nbytes)["copy_bytes"] >> 20
    assert [pick(n << 20) for n in (1, 512, 1000, 1100, 3000, 5000, 1 << 20)] == [256, 256, 256, 1024, 1024, 4096, 4096]


def test_calls_per_graph_matches_mxq_bench():
    # 8192x2048 rowwise on the H200: 8 buffer sets, 64 calls (benchmarks/results/nvidia-h200_2026-12-04.json)
    assert bench.calls_per_graph(50855936, 8) == 64
    assert bench.calls_per_graph(8388608, 60) == 300  # 512x4096 copy: 256 calls at most, a multiple of 60


def test_no_cuda_device_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--quick", "--json", "-"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="this platform has no /dev/full")
def test_output_that_cannot_be_written_is_a_failure():
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--list", "--sets", "dtypes"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert run.returncode != 0
    assert "No space left on device" in run.stderr


def results(**changes):
    row = {"set": "main", "op": "fused", "M": 8192, "K": 2048, "dtype": "bf16", "groups": 0, "groups_kind": "dense"}
    row |= {"us": 20.0, "TBps": 3.0, "effective_TBps": 3.0, "roof_TBps": 4.0, "pct_roof": 75.0} | changes
    return {"schema": bench.SCHEMA, "commit": "abc", "gpu": {"name": "NVIDIA H200"}, "rows": [row]}


def test_plot_compare(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(results()))
    (tmp_path / "b.json").write_text(json.dumps(results(us=19.0)))
    assert plot.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "new/base over 1 rows: min 0.950, median 0.950, max 0.950" in capsys.readouterr().out


def test_plot_table_is_the_readme_table(tmp_path, capsys):
    rows = [results(op="fused", us=20.0)["rows"][0], results(op="composed", us=36.0)["rows"][0]]
    rows += [results(op="fused", groups=8, groups_kind="random", TBps=2.9, pct_roof=72.4)["rows"][0]]
    (tmp_path / "r.json").write_text(json.dumps(results() | {"rows": rows, "roof": []}))
    assert plot.main(["--table", str(tmp_path / "r.json")]) == 0
    line = capsys.readouterr().out.splitlines()[2]
    assert line == "| 8192×2048 | 20.0 | 3.00 (75%) | - | 2.90 (72%) | 36.0 | 1.80× | - | - | - |"


def blockwise_rows():
    bw = {"set": "blockwise", "format": bench.BLOCKWISE, "scaling_mode": "fp32", "M": 16384, "K": 7168}
    rows = [results(**bw, op=op)["rows"][0] for op in ("fused", "copy", "torchao_blockwise", "rowwise", "colwise")]
    rows.append(results(**bw, op="fused", groups=8, groups_kind="random")["rows"][0])
    rows.append(results(**bw | {"M": 7168, "K": 2048}, op="weight", experts=1, N=7168, scaling="128x128")["rows"][0])
    return rows


def test_plot_blockwise_panel():
    """The blockwise set's panel (no matplotlib needed): per shape fused, torchao, the single axes and the copy tick;
    grouped and weights as their own groups."""
    ((title, groups, _),) = plot.panels(blockwise_rows(), False)
    assert title.startswith("FP8 blockwise") and "rule fp32" in title
    dense = groups["16384x7168\ndense"]
    assert set(dense) == {"roof", "copy", "mxq fused", "torchao blockwise (lhs + transposed lhs)", "rowwise", "colwise"}
    assert set(groups["16384x7168\nG=8"]) == {"roof", "mxq fused"}
    assert set(groups["W 1x7168x2048"]) == {"roof", "128x128"}


def test_plot_draws_a_results_file(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        results(op=op, groups=g, groups_kind="random" if g else "dense")["rows"][0]
        for op in bench.OPS[:5]
        for g in (0, 8)
    ]
    rows += [results(set="weights", op="weight", experts=8, N=1024, scaling=s)["rows"][0] for s in ("1x32", "32x32")]
    rows += [
        results(set="routed", op=op, groups=64, groups_kind=kind, top_k=8)["rows"][0]
        for op in bench.ROUTED_OPS[:3]
        for kind in bench.ROUTINGS
    ]
    rows += blockwise_rows()
    assert [p[0].split()[0] for p in plot.panels(rows, False)] == [
        "Dense,",
        "Grouped",
        "Single-axis",
        "Expert",
        "Routed",
        "FP8",
    ]
    plot.render(results() | {"rows": rows}, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 10_000


def test_routed_set_lists_every_shape_routing_and_op(capsys):
    lines = [line.split("] ")[1].split() for line in listed(capsys, "--sets", "routed")]
    expected = [
        ["routed", op, f"{T}x{K}", "bf16", f"E={E}", f"k={k}", kind]
        for T, K, E, k in [(16384, 7168, 256, 8), (16384, 2048, 128, 8), (16384, 4096, 8, 2), (4096, 7168, 64, 8)]
        for kind in ("uniform", "skewed")
        for op in ("routed", "routed_scaled", "routed_unfused", "routed_torchao")
    ]
    assert [line[:7] for line in lines] == expected
    assert len(listed(capsys, "--sets", "routed", "--ops", "routed,routed_unfused")) == 16


def routed_inputs(T, K, E, k, kind, seed=1):
    index, counts = bench.route(bench.expert_choices(kind, T, E, k, seed), E)
    x = cpu_input(T, K, "bf16")
    return x, index, counts, torch.rand(T * k)


@pytest.mark.parametrize("kind", ["uniform", "skewed"])
@pytest.mark.parametrize("T,E,k", [(4096, 64, 8), (16384, 8, 2), (96, 256, 8), (64, 3, 1)])
def test_routing_is_a_valid_router_output(kind, T, E, k):
    ids = bench.expert_choices(kind, T, E, k, 1)
    assert ids.shape == (T, k) and ids.dtype == torch.int64
    assert all(len(set(row)) == k for row in ids.tolist())  # distinct experts per token
    assert 0 <= int(ids.min()) and int(ids.max()) < E
    index, counts = bench.route(ids, E)
    assert counts.dtype == torch.int32 and counts.shape == (E,) and int(counts.sum()) == T * k
    assert 0 <= int(index.min()) and int(index.max()) < T
    assert torch.equal(torch.bincount(index, minlength=T), torch.full((T,), k))  # every token k times
    experts = ids.reshape(-1)[torch.argsort(ids.reshape(-1), stable=True)]  # expert-sorted, counts[e] rows each
    assert torch.equal(experts, torch.repeat_interleave(torch.arange(E), counts.long()))
    assert torch.equal(ids, bench.expert_choices(kind, T, E, k, 1))  # deterministic from the seed


def test_skewed_routing_has_hot_experts():
    _, uniform = bench.route(bench.expert_choices("uniform", 16384, 256, 8, 1), 256)
    _, skewed = bench.route(bench.expert_choices("skewed", 16384, 256, 8, 1), 256)
    assert int(uniform.max()) < 2 * 512 and int(skewed.max()) > 10 * 512


@pytest.mark.parametrize("op", ["routed", "routed_scaled", "routed_unfused"])
@pytest.mark.parametrize("T,K,E,k", [(128, 64, 8, 2), (96, 160, 3, 1), (64, 96, 32, 4)])
def test_routed_bytes_are_the_tensors_of_the_cpu_op(op, T, K, E, k):
    x, index, counts, scale = routed_inputs(T, K, E, k, "skewed")
    scale = scale if op == "routed_scaled" else None
    outs = ops.quantize_routed(x, index, counts, scale, "rceil", True, True)
    read, written, effective = bench.case_bytes(bench.Case("routed", op, T, K, "bf16", "skewed", E, top_k=k))
    assert written == sum(t.nbytes for t in outs)
    assert read == T * k * K * x.element_size() + index.nbytes + counts.nbytes + (
        scale.nbytes if op == "routed_scaled" else 0
    )
    assert effective == read + written


def test_torchao_missing_is_a_recorded_skip(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao raises ImportError
    bench.torchao_pipeline.cache_clear()
    cases = bench.plan(bench.parse_args(["--sets", "routed"]))
    kept, skipped = bench.skip_unavailable(cases)
    bench.torchao_pipeline.cache_clear()
    assert [c.op for c in kept] == [c.op for c in cases if c.op != "routed_torchao"]
    assert len(skipped) == 8 and all(r["op"] == "routed_torchao" for r in skipped)
    assert all("torchao is not importable" in r["reason"] for r in skipped)
    assert capsys.readouterr().out.count("SKIPPED: routed routed_torchao") == 8


@pytest.mark.parametrize("full", [True, False])
def test_verify_routed_on_the_cpu(monkeypatch, full):
    """verify_routed's comparisons (whole tensors, or the first and last experts' bands with the padded rows and
    plain scales shifted) agree on correct outputs and count a changed byte of the fused op."""
    T, K, E, k = 256, 64, 8, 2
    x, index, counts, scale = routed_inputs(T, K, E, k, "skewed")
    ws = types.SimpleNamespace(x=[x], index=index, counts=counts, scale=scale)
    monkeypatch.setattr(bench, "FULL_CHECK_ELEMENTS", 1 << 25 if full else 0)
    monkeypatch.setattr(bench, "BAND_ROWS", 40)
    block = [bench.Case("routed", op, T, K, "bf16", "skewed", E, top_k=k) for op in bench.ROUTED_OPS]
    records = bench.verify_routed(block, ws)
    assert [(r["op"], r["check"].split(" (")[0]) for r in records] == [
        ("routed", "== unfused"),
        ("routed", "== cpu"),
        ("routed_scaled", "== unfused"),
        ("routed_scaled", "== cpu"),
        ("routed_unfused", "== cpu"),
    ]
    assert all(r["ok"] and r["bytes"] > 0 for r in records)
    real = bench.routed_op

    def corrupt(op, c, x, ws, scaled=False):  # the fused op's first q_row byte changed
        out = real(op, c, x, ws, scaled)
        if op == "routed":
            out[0].view(torch.uint8)[0, 0] ^= 1
        return out

    monkeypatch.setattr(bench, "routed_op", corrupt)
    bad = [r for r in bench.verify_routed(block[:1], ws) if not r["ok"]]
    assert [(r["op"], r["mismatches"]) for r in bad] == [("routed", 1), ("routed", 1)]


# ---- the FP8 blockwise set ----

BW = bench.BLOCKWISE


def test_blockwise_set_lists_its_shapes_and_ops(capsys):
    lines = [line.split("] ")[1].split()[:5] for line in listed(capsys, "--sets", "blockwise")]
    shapes = [f"{M}x{K}" for M, K in bench.BLOCKWISE_SHAPES]
    assert shapes[:2] == ["16384x7168", "65536x2048"]  # issue 50's
    assert all(int(M) * int(K) >= 1 << 26 for M, K in (s.split("x") for s in shapes))
    for shape in shapes:
        ops = sorted((op, grouping) for _, op, sh, _, grouping in lines if sh == shape and op not in bench.ROUTED_OPS)
        assert ops == sorted(
            [(op, "dense") for op in ("fused", "copy", "torchao_blockwise", "rowwise", "colwise")] + [("fused", "G=8")]
        )
    assert [line[1:3] for line in lines if line[1] == "weight"] == [
        ["weight", "1x7168x2048"],
        ["weight", "8x4096x7168"],
    ]
    # the routed input stage at the routed set's shapes, uniform routing, without torchao's (MXFP8-only) pipeline
    routed = sorted((op, sh, grouping) for _, op, sh, _, grouping in lines if op in bench.ROUTED_OPS)
    assert routed == sorted(
        (op, f"{T}x{K}", f"E={E}")
        for T, K, E, _ in bench.ROUTED_SHAPES
        for op in ("routed", "routed_scaled", "routed_unfused")
    )
    assert "torchao_blockwise" in bench.parse_args(["--ops", "torchao_blockwise"]).ops


@pytest.mark.parametrize("M,K,groups", [(256, 384, 0), (512, 128, 3), (128, 1024, 1)])
def test_blockwise_bytes_are_the_tensors_the_cpu_ops_read_and_write(M, K, groups):
    """FP8 blockwise through the one byte formula: bf16 x, e4m3 data, fp32 factors (8/128 B an element, both axes)."""
    x = cpu_input(M, K, "bf16")
    offs = torch.tensor(bench.group_offsets("random", M, groups, 1, 128), dtype=torch.int32) if groups else None
    size = lambda *ts: sum(t.nbytes for t in ts)
    fused = size(x, *ops.quantize(x, 128, "fp32", offs, BW))
    assert fused == M * K * (2 + 2) + 2 * M * K // 128 * 4
    expected = {
        "fused": fused,
        "torchao_blockwise": fused,  # counted as the fused op's result
        "rowwise": size(x, *ops.quantize_rowwise(x, 128, "fp32", offs, BW)),
        "colwise": size(x, *ops.quantize_colwise(x, 128, "fp32", offs, BW)),
        "copy": 2 * x.nbytes,
    }
    for op, nbytes in expected.items():
        case = bench.Case("blockwise", op, M, K, "bf16", "random" if groups else "dense", groups, format=BW)
        read, written, effective = bench.case_bytes(case)
        assert read + written == nbytes == effective, op


@pytest.mark.parametrize("G,N,K", [(1, 256, 384), (3, 128, 640)])
def test_blockwise_weight_bytes(G, N, K):
    case = bench.Case("blockwise", "weight", N, K, experts=G, scaling="128x128", format=BW)
    w = cpu_input(G * N, K, "bf16").view(case.weight_shape)
    assert w.dim() == (2 if G == 1 else 3)  # G = 1: a dense Linear's 2-D weight
    outputs = ops.quantize_weight(w, "fp32", "128x128", True, True, BW)
    assert bench.case_bytes(case)[:2] == (w.nbytes, sum(t.nbytes for t in outputs))


def test_blockwise_group_offsets_are_128_multiples():
    for kind, G in (("random", 8), ("even", 8), ("skewed", 8)):
        offs = bench.group_offsets(kind, 16384, G, 1, 128)
        sizes = [b - a for a, b in zip([0, *offs], offs)]
        assert len(offs) == G and all(s >= 0 and s % 128 == 0 for s in sizes) and offs[-1] <= 16384
    assert bench.group_offsets("random", 8192, 4, 1) == [1728, 7424, 7424, 7968]  # MXFP8's unchanged


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("groups", [0, 3])
def test_verify_blockwise_block_on_the_cpu(monkeypatch, full, groups):
    """verify_block on an FP8 blockwise block (the CPU op standing in for the GPU's): whole tensors, or the first and
    last row bands with the fp32 factors sliced by 128; every check passes on correct outputs and a changed factor
    is counted."""
    M, K = 1024, 256
    monkeypatch.setattr(bench, "FULL_CHECK_ELEMENTS", 1 << 25 if full else 0)
    monkeypatch.setattr(bench, "BAND_ROWS", 256)
    x = cpu_input(M, K, "bf16")
    kind = "random" if groups else "dense"
    ops_ = ("fused", "copy", "rowwise", "colwise") if not groups else ("fused",)
    block = [bench.Case("blockwise", op, M, K, "bf16", kind, groups, format=BW) for op in ops_]
    offs_list = bench.group_offsets("random", M, groups, 1, 128) if groups else None
    offs = torch.tensor(offs_list, dtype=torch.int32) if groups else None
    ws = types.SimpleNamespace(x=[x])
    records = bench.verify_block(block, ws, offs, offs_list)
    assert records and all(r["ok"] and r["bytes"] > 0 and r["format"] == BW for r in records), records
    real, calls = bench.run_op, []

    def corrupt(op, c, x, offs, fused=None, grouped=None):  # the first fused call (the device's): a factor changed
        out = real(op, c, x, offs, fused, grouped)
        if op == "fused" and not calls:
            calls.append(op)
            out["s_row"][M - 1, 0] *= 2
        return out

    monkeypatch.setattr(bench, "run_op", corrupt)
    bad = [r for r in bench.verify_block(block[:1], ws, offs, offs_list) if not r["ok"]]
    assert [(r["op"], r["mismatches"] > 0) for r in bad] == [("fused", True)]


def test_verify_blockwise_weights_on_the_cpu():
    ws2 = types.SimpleNamespace(x=[cpu_input(256, 384, "bf16")])
    block = [bench.Case("blockwise", "weight", 256, 384, experts=1, scaling="128x128", format=BW)]
    records = bench.verify_block(block, ws2, None, None)
    assert [(r["op"], r["check"], r["ok"]) for r in records] == [("weight", "== cpu", True)]
    ws3 = types.SimpleNamespace(x=[cpu_input(2 * 128, 256, "bf16").view(2, 128, 256)])
    block = [bench.Case("blockwise", "weight", 128, 256, experts=2, scaling="128x128", format=BW)]
    assert all(r["ok"] for r in bench.verify_block(block, ws3, None, None))


def test_blockwise_torchao_missing_is_a_recorded_skip(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchao", None)
    bench.torchao_blockwise.cache_clear()
    cases = bench.plan(bench.parse_args(["--sets", "blockwise"]))
    kept, skipped = bench.skip_unavailable(cases)
    bench.torchao_blockwise.cache_clear()
    assert [c.op for c in kept] == [c.op for c in cases if c.op != "torchao_blockwise"]
    assert len(skipped) == len(bench.BLOCKWISE_SHAPES) and all("not importable" in r["reason"] for r in skipped)


# ---- --linear-step ----


def test_linear_step_arguments():
    a = bench.parse_args(["--linear-step", "--shapes", "8192x8192x8192,256x384x512"])
    assert a.linear_step and a.shapes_3d == [(8192, 8192, 8192), (256, 384, 512)]
    assert bench.parse_args(["--linear-step"]).shapes_3d is None  # LINEAR_STEP_SHAPES
    assert bench.LINEAR_STEP_SHAPES[0] == (8192, 8192, 8192)  # issue 51's shapes, M x K -> N
    for bad in (["--shapes", "256x256"], ["--shapes", "256x256x96"], ["--eager"], ["--moe-step"], ["--plot", "p.png"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--linear-step", *bad])


def test_moe_step_recipe_argument():
    assert bench.parse_args(["--moe-step"]).recipe == "mxfp8_rceil"
    assert bench.parse_args(["--moe-step", "--recipe", "fp8_blockwise"]).recipe == "fp8_blockwise"
    with pytest.raises(SystemExit):
        bench.parse_args(["--recipe", "fp8_blockwise"])  # --moe-step's option only
    assert bench.parse_args(["--moe-step", "--reuse-weights"]).reuse_weights
    assert not bench.parse_args(["--moe-step"]).reuse_weights
    with pytest.raises(SystemExit):
        bench.parse_args(["--reuse-weights"])  # --moe-step's option only
