#!/usr/bin/env python3
"""Where a kernel's warps spend their time, per phase: a summary of ncu's per-instruction warp sampling.

    ncu --section SourceCounters --warp-sampling-interval 0 --cache-control none --clock-control none \\
        --launch-skip 100 --launch-count 5 -k regex:quantize_tile_kernel -o prof \\
        python3 benchmarks/bench.py --shapes 512x4096 --ops fused --no-verify
    ncu --import prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 benchmarks/sass_profile.py prof.csv [--top 15]

(`scripts/device.sh profile` runs all three.) The samples of every profiled launch are summed per SASS
instruction. The kernel is then cut into phases at its landmarks (copy-group commits and waits, barriers, exits):
each phase is the instructions from one landmark up to the next, reported with its share of all samples, the
most executions of any of its instructions per launch (how many warps reach it) and its largest stall reasons.
A sample is charged to the instruction a warp is about to issue, so a wait at a landmark shows up on the
instruction after it: in the phase that the landmark opens. Then the instructions with the most samples.
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from collections import Counter
from dataclasses import dataclass, field

# SASS mnemonics that open a phase: cp.async group commit and wait, barriers, warp exits.
LANDMARKS = ("LDGDEPBAR", "DEPBAR", "BAR.SYNC", "BAR.ARV", "EXIT")
SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Instruction:
    source: str  # the SASS text
    samples: int = 0  # warp samples charged to it, all launches
    executed: int = 0  # warp-level executions, all launches
    stalls: Counter = field(default_factory=Counter)  # stall reason (without "stall_") -> samples


@dataclass
class Profile:
    kernel: str
    launches: int  # at least 1 (read_source_csv refuses a file without one)
    instructions: list[Instruction]

    @property
    def samples(self) -> int:
        return sum(i.samples for i in self.instructions)


def read_source_csv(path: str) -> Profile:
    """The sampling of every launch in ncu's `--page source --csv --print-source sass` output, summed per
    instruction. Every launch must be of the same kernel (ncu -k); the instructions line up by position. ncu
    may print a launch twice in a row: a launch whose rows repeat the one before it exactly is counted once."""
    launches: list[tuple[str, list[str], list[list[str]]]] = []  # (kernel, header, rows)
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                launches.append((row[1], [], []))
            elif not launches:
                raise ValueError(f"{path}: not ncu --page source --csv output (no 'Kernel Name' line)")
            elif row[0] == "Address":
                launches[-1][1].extend(row)
            else:
                launches[-1][2].append(row)
    if not launches:
        raise ValueError(f"{path}: no kernel in it")
    kernel = launches[0][0]
    instructions: list[Instruction] = []
    counted = 0
    previous = None
    for name, header, rows in launches:
        if name != kernel:
            raise ValueError(f"{path}: launches of more than one kernel ({kernel!r}, {name!r}); filter with ncu -k")
        missing = [c for c in ("Source", SAMPLES, EXECUTED) if c not in header]
        if missing:
            raise ValueError(f"{path}: no {', '.join(map(repr, missing))} column (ncu --section SourceCounters)")
        if any(len(r) != len(header) for r in rows):
            raise ValueError(f"{path}: a row of {name!r} does not have the header's {len(header)} columns")
        if rows == previous:
            continue
        previous = rows
        counted += 1
        col = {c: i for i, c in enumerate(header)}
        stall_cols = [
            (c[len("stall_") :], i) for c, i in col.items() if c.startswith("stall_") and "(Not Issued)" not in c
        ]
        if not instructions:
            instructions = [Instruction(r[col["Source"]].strip()) for r in rows]
        elif len(rows) != len(instructions):
            raise ValueError(f"{path}: launches with different instruction counts; filter one kernel with ncu -k")
        for ins, r in zip(instructions, rows):
            ins.samples += int(r[col[SAMPLES]] or 0)
            ins.executed += int(r[col[EXECUTED]] or 0)
            for reason, i in stall_cols:
                if r[i] not in ("", "0"):
                    ins.stalls[reason] += int(r[i])
    return Profile(kernel, counted, instructions)


def is_landmark(source: str) -> bool:
    words = source.split()
    opcode = words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0] if words else ""
    return any(opcode == m or opcode.startswith(m + ".") for m in LANDMARKS)


@dataclass
class Phase:
    first: int  # index of its first instruction
    end: int  # one past its last
    opener: str  # the SASS of its first instruction
    share: float  # % of all samples
    reached: int  # most executions per launch of any of its instructions
    stalls: list[tuple[str, float]]  # largest stall reasons, % of all samples


def phases(profile: Profile, reasons: int = 6) -> list[Phase]:
    """The kernel cut at its landmarks; phases without samples are left out."""
    ins = profile.instructions
    cuts = sorted({0, len(ins), *(i for i, x in enumerate(ins) if is_landmark(x.source))})
    total = profile.samples or 1
    out = []
    for a, b in itertools.pairwise(cuts):
        stalls: Counter = Counter()
        for x in ins[a:b]:
            stalls.update(x.stalls)
        samples = sum(x.samples for x in ins[a:b])
        if samples == 0:
            continue
        out.append(
            Phase(
                a,
                b,
                ins[a].source,
                100.0 * samples / total,
                max(x.executed for x in ins[a:b]) // profile.launches,
                [(k, 100.0 * v / total) for k, v in stalls.most_common(reasons)],
            )
        )
    return out


def report(profile: Profile, top: int = 15) -> str:
    total = profile.samples
    lines = [
        profile.kernel,
        f"{profile.launches} launches, {len(profile.instructions)} instructions, {total} samples",
    ]
    lines.append(f"{'phase [first, end)':>20}  {'opened by':34} {'share':>6} {'reached':>8}  stalls (% of all samples)")
    for p in phases(profile):
        stalls = " ".join(f"{k} {v:.1f}" for k, v in p.stalls)
        lines.append(f"{f'[{p.first}, {p.end})':>20}  {p.opener[:34]:34} {p.share:5.1f}% {p.reached:8d}  {stalls}")
    lines.append(f"the {top} instructions with the most samples:")
    ranked = sorted(range(len(profile.instructions)), key=lambda i: -profile.instructions[i].samples)[:top]
    for i in sorted(ranked):
        x = profile.instructions[i]
        stalls = " ".join(f"{k} {v}" for k, v in x.stalls.most_common(3))
        share = 100.0 * x.samples / (total or 1)
        lines.append(f"{i:6d}  {x.source[:50]:50} {share:5.1f}% {x.executed // profile.launches:7d}  {stalls}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --import REPORT --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=15, help="instructions listed by samples (default 15)")
    args = ap.parse_args(argv)
    try:
        print(report(read_source_csv(args.csv), args.top))
    except (OSError, ValueError) as e:
        print(f"sass_profile: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
