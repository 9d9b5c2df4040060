"""benchmarks/sass_profile.py, the summary of ncu's per-instruction warp sampling (scripts/device.sh profile), on
hand-made ncu CSV: samples and executions summed over launches, a repeated launch counted once, the kernel cut
into phases at its landmarks, and clear errors for input it cannot read. Standard library only (no torch)."""

import csv
import importlib.util
import io
import pathlib
import sys

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "sass_profile.py"
_spec = importlib.util.spec_from_file_location("sass_profile", _PATH)
sass_profile = importlib.util.module_from_spec(_spec)
sys.modules["sass_profile"] = sass_profile  # dataclasses look their module up
_spec.loader.exec_module(sass_profile)

HEADER = [
    "Address",
    "Source",
    "Warp Stall Sampling (All Samples)",
    "Warp Stall Sampling (Not-issued Samples)",
    "Instructions Executed",
    "stall_barrier",
    "stall_long_sb",
    "stall_selected",
    "stall_barrier (Not Issued)",
]
KERNEL = "void k(int)"
# (SASS, executed per launch); the samples of each launch are given per test.
CODE = [
    ("LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]", 8),
    ("LDGDEPBAR", 8),
    ("DEPBAR.LE SB0, 0x0", 8),
    ("LEA R6, R2, R5, 0x18", 8),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", 8),
    ("BSSY B0, 0x100", 8),
    ("@P0 EXIT", 8),
    ("STG.E.U8 desc[UR4][R2.64], RZ", 2),
    ("EXIT", 2),
]


def write_csv(tmp_path, launches, kernels=None):
    """launches: per launch, per instruction (barrier, long_sb, selected) samples."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    for n, stalls in enumerate(launches):
        w.writerow(["Kernel Name", (kernels or [KERNEL] * len(launches))[n], ""])
        w.writerow(HEADER)
        for i, ((sass, executed), (bar, lsb, sel)) in enumerate(zip(CODE, stalls)):
            total = bar + lsb + sel
            w.writerow([hex(0x100 + 16 * i), "      " + sass, total, total - sel, executed, bar, lsb, sel, bar])
    path = tmp_path / "prof.csv"
    path.write_text(out.getvalue())
    return str(path)


ZERO = (0, 0, 0)
LAUNCH_A = [ZERO, ZERO, ZERO, (0, 30, 0), ZERO, (20, 0, 0), (0, 0, 10), ZERO, (0, 0, 0)]
LAUNCH_B = [ZERO, ZERO, (0, 0, 2), (0, 28, 0), ZERO, (22, 0, 0), (0, 0, 8), ZERO, ZERO]


def test_sums_launches_and_counts_a_repeated_one_once(tmp_path):
    profile = sass_profile.read_source_csv(write_csv(tmp_path, [LAUNCH_A, LAUNCH_A, LAUNCH_B]))
    assert profile.kernel == KERNEL
    assert profile.launches == 2  # ncu prints a launch twice in a row: counted once
    assert profile.samples == 60 + 60
    lea = profile.instructions[3]
    assert lea.source == "LEA R6, R2, R5, 0x18"
    assert (lea.samples, lea.executed, lea.stalls["long_sb"]) == (58, 16, 58)
    assert "barrier (Not Issued)" not in profile.instructions[5].stalls


def test_phases_open_at_the_landmarks(tmp_path):
    profile = sass_profile.read_source_csv(write_csv(tmp_path, [LAUNCH_A, LAUNCH_B]))
    got = {(p.first, p.end): p for p in sass_profile.phases(profile)}
    # LDGDEPBAR, DEPBAR, BAR.SYNC, both EXITs cut; the phases without samples are left out.
    assert sorted(got) == [(2, 4), (4, 6), (6, 8)]
    wait, barrier, exit_ = got[(2, 4)], got[(4, 6)], got[(6, 8)]
    assert wait.opener.startswith("DEPBAR") and barrier.opener.startswith("BAR.SYNC")
    assert wait.share == pytest.approx(100 * 60 / 120)
    assert barrier.share == pytest.approx(100 * 42 / 120)
    assert exit_.share == pytest.approx(100 * 18 / 120)
    assert wait.stalls[0] == ("long_sb", pytest.approx(100 * 58 / 120))
    assert (wait.reached, exit_.reached) == (8, 8)
    assert sass_profile.is_landmark("@!P2 EXIT") and not sass_profile.is_landmark("BSSY B0, 0x1")


def test_report_lists_phases_and_top_instructions(tmp_path):
    text = sass_profile.report(sass_profile.read_source_csv(write_csv(tmp_path, [LAUNCH_A])), top=2)
    assert "1 launches, 9 instructions, 60 samples" in text
    assert "DEPBAR.LE SB0, 0x0" in text and "long_sb 50.0" in text
    top = text.split("the 2 instructions with the most samples:\n")[1].splitlines()
    assert [line.split()[1] for line in top] == ["LEA", "BSSY"]


def test_unreadable_input_is_one_clear_error(tmp_path, capsys):
    mixed = write_csv(tmp_path, [LAUNCH_A, LAUNCH_B], kernels=[KERNEL, "void other()"])
    with pytest.raises(ValueError, match="more than one kernel"):
        sass_profile.read_source_csv(mixed)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert sass_profile.main([str(tmp_path / "x.csv")]) == 1
    assert capsys.readouterr().err.startswith("sass_profile: ")
    no_sampling = tmp_path / "y.csv"
    no_sampling.write_text('"Kernel Name","k",""\n"Address","Source"\n"0x0","EXIT"\n')
    with pytest.raises(ValueError, match="SourceCounters"):
        sass_profile.read_source_csv(str(no_sampling))
    short = pathlib.Path(write_csv(tmp_path, [LAUNCH_A]))
    short.write_text(short.read_text().rsplit(",", 1)[0] + "\n")
    with pytest.raises(ValueError, match="columns"):
        sass_profile.read_source_csv(str(short))
