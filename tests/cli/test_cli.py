#!/usr/bin/env python3
"""Drives the built `mxq` binary with bad and good inputs: exit codes, messages, no crashes.

Usage: test_cli.py /path/to/mxq   (CTest passes $<TARGET_FILE:mxq_cli>; Python 3 standard library only),
or MXQ_BIN=/path/to/mxq python -m pytest tests/cli/test_cli.py

Each case asserts the exit code (0 ok, 1 error, 2 unavailable), that no signal killed the process
(returncode >= 0: SIGFPE or an uncaught exception's abort would show up as a negative code), that an
error is one line starting with the subcommand's prefix exactly once with no C++ exception names or
file paths, and that every element coordinate the demo prints lies inside the tensor. One shape rule holds on
every path (M and K multiples of 32, GPU and CPU reference alike); where the outcome still depends on the
machine (with a usable GPU the demo must run and check the GPU paths, never quietly fall back to the CPU;
without one it says so), the case asks `mxq info` whether the GPU path is usable and expects the matching
behaviour.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

# The binary: argv[1] when run as a script (CTest), else $MXQ_BIN (e.g. under pytest).
MXQ = os.environ.get("MXQ_BIN")
# Things an error message must never contain: exception class names, abort text, source paths.
LEAKS = [
    "std::",
    "bad_alloc",
    "terminate called",
    "what():",
    "stoll",
    "Floating point",
    "Aborted",
    "core dumped",
    ".cpp",
    ".cu:",
    ".h:",
]


def run(*args, timeout=120):
    return subprocess.run([MXQ, *args], check=False, capture_output=True, text=True, timeout=timeout)


class CliTest(unittest.TestCase):
    gpu = False

    @classmethod
    def setUpClass(cls):
        if not MXQ:
            raise unittest.SkipTest("no mxq binary: pass it as the argument, or set MXQ_BIN")
        info = run("info")
        assert info.returncode == 0, info
        cls.gpu = "mxq kernels usable: yes" in info.stdout
        cls.cpu_build = "CPU only" in info.stdout  # configured without nvcc: no bench at all

    # ---- helpers ----
    def check_clean(self, r, code, prefix="mxq demo:"):
        """Exit code `code`, not killed by a signal, no leaked internals; errors prefixed once."""
        where = f"args={r.args[1:]} rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        self.assertGreaterEqual(r.returncode, 0, "killed by a signal: " + where)
        self.assertEqual(r.returncode, code, where)
        for leak in LEAKS:
            self.assertNotIn(leak, r.stderr, where)
        if code != 0:
            error = r.stderr.strip().splitlines()[-1]
            self.assertTrue(error.startswith(prefix + " "), where)
            self.assertEqual(r.stderr.count(prefix), 1, "prefix repeated: " + where)
            self.assertNotIn(prefix + " mxq", error, "doubled prefix: " + where)
        return where

    def error(self, *args, fragments, code=1, prefix="mxq demo:"):
        r = run(*args)
        where = self.check_clean(r, code, prefix)
        for f in fragments:
            self.assertIn(f, r.stderr, where)
        self.assertEqual(r.stdout, "", "an error run printed results: " + where)
        return r

    def demo_ok(self, M, K, *args):
        """A successful demo: exit 0, an OK verdict, every printed x[m, k] inside (M, K). Without --cpu on a
        machine with a usable GPU, the GPU paths must have run and matched (no quiet CPU fallback)."""
        r = run("demo", "--shape", f"{M}x{K}", *args)
        where = self.check_clean(r, 0)
        self.assertIn("\nOK: ", r.stdout, where)
        if "--cpu" in args:
            self.assertIn("--cpu: running the CPU reference only", r.stdout, where)
        elif self.gpu:
            self.assertIn("OK: fused and composed GPU outputs byte-exact with the CPU reference", r.stdout, where)
        else:
            self.assertIn("no usable GPU", r.stdout, where)
        points = [(int(m), int(k)) for m, k in re.findall(r"x\[(-?\d+), (-?\d+)\]", r.stdout)]
        self.assertTrue(points, "no sample coordinates printed: " + where)
        for m, k in points:
            self.assertTrue(0 <= m < M, f"sample row {m} outside M={M}: " + where)
            self.assertTrue(0 <= k < K, f"sample column {k} outside K={K}: " + where)
        self.assertIn((M - 1, K - 1), points, "the last element is not shown: " + where)
        return r

    # ---- the inputs that used to crash or lie ----
    def test_tiny_shape_samples_stay_inside(self):
        # Used to print x[1, 33] and x[23, -8] of a 32x32 tensor (out-of-bounds reads).
        self.demo_ok(32, 32, "--cpu")
        self.demo_ok(32, 32)  # the GPU paths where there is a GPU: the same rule as the CPU reference

    def test_zero_dimension(self):
        # Used to die with SIGFPE.
        self.error("demo", "--shape", "0x64", "--cpu", fragments=["M must be at least 32", "got 0"])
        self.error("demo", "--shape", "64x0", "--cpu", fragments=["K must be at least 32", "got 0"])
        self.error("demo", "--shape", "0x64", fragments=["M must be at least", "got 0"])

    def test_dimension_beyond_int64(self):
        # Used to abort on an uncaught std::out_of_range from std::stoll.
        self.error(
            "demo",
            "--shape",
            "99999999999999999999x64",
            fragments=["M must be at most 2^31-1, got 99999999999999999999"],
        )
        self.error("demo", "--shape", "64x99999999999999999999999999", fragments=["K must be at most 2^31-1"])

    def test_dimension_beyond_int32(self):
        # Used to say "std::bad_alloc".
        self.error("demo", "--shape", "2147483648x64", fragments=["M must be at most 2^31-1, got 2147483648"])

    def test_shape_too_big_for_memory(self):
        # Legal dimensions whose buffers cannot fit: refused from an estimate, before allocating.
        self.error(
            "demo",
            "--shape",
            "2147483520x2147483520",
            "--cpu",
            fragments=["needs about", "of host memory", "available"],
        )

    def test_unaligned_shapes(self):
        # One rule on every path, in the library's words; the same message with or without --cpu or a GPU.
        for shape, bad in (("31x64", "31"), ("100x64", "100")):
            for extra in (["--cpu"], []):
                r = self.error("demo", "--shape", shape, *extra, fragments=[f"M must be a multiple of 32, got {bad}"])
                self.assertNotIn("128", r.stderr, "an old 128 rule is back: " + r.stderr)
                self.assertNotIn("--cpu", r.stderr, "the old --cpu hint is back: " + r.stderr)
        self.error("demo", "--shape", "64x31", "--cpu", fragments=["K must be a multiple of 32, got 31"])
        self.error("demo", "--shape", "64x100", fragments=["K must be a multiple of 32, got 100"])
        self.error("demo", "--shape", "64", fragments=['--shape: expected MxK such as 4096x4096, got "64"'])
        self.error("demo", "--shape", "-5x64", fragments=["--shape: expected MxK"])

    def test_32_multiple_not_128(self):
        # 2880 = 22.5 x 128 and 96, 160: every path takes 32-multiples now. With a GPU, demo_ok insists that the
        # GPU paths ran and matched the reference byte for byte (no refusal, no quiet switch to the CPU).
        self.demo_ok(2880, 64, "--cpu")
        r = self.demo_ok(2880, 64)
        self.assertNotIn("would be refused", r.stdout)
        self.demo_ok(96, 160)
        self.demo_ok(160, 2880, "--groups", "3")

    def test_negative_seed(self):
        # CLI11 used to wrap -1 to 18446744073709551615.
        self.error("demo", "--shape", "256x256", "--cpu", "--seed", "-1", fragments=["--seed", "non-negative", "-1"])
        self.error("demo", "--seed", "18446744073709551616", fragments=["--seed"])
        r = self.demo_ok(256, 256, "--cpu", "--seed", "18446744073709551615")
        self.assertIn("seed 18446744073709551615", r.stdout)

    def test_too_many_groups(self):
        # Group sizes are multiples of 32 rows: M holds at most M/32 non-empty groups.
        for extra in (["--cpu"], []):
            self.error(
                "demo",
                "--shape",
                "256x256",
                *extra,
                "--groups",
                "9",
                fragments=["--groups 9 is too many for M=256", "multiples of 32 rows", "at most 8", "--groups 8"],
            )
        self.error("demo", "--shape", "64x256", "--cpu", "--groups", "3", fragments=["--groups 3", "M=64", "at most 2"])
        self.demo_ok(256, 256, "--cpu", "--groups", "8")
        self.demo_ok(64, 256, "--cpu", "--groups", "2")
        self.error("demo", "--shape", "256x256", "--cpu", "--groups", "5000", fragments=["--groups", "1024"])

    def test_whole_numbers_are_decimal(self):
        # CLI11 used to read "010" as octal (8 groups) and "0x10" as hex, and to call "3.0" out of range.
        r = self.demo_ok(320, 32, "--cpu", "--groups", "010")
        self.assertIn(", 10 groups (", r.stdout)
        for value in ("0x10", "3.0", "2x", "1e3", "+3", ""):
            self.error(
                "demo",
                "--shape",
                "320x32",
                "--cpu",
                "--groups",
                value,
                fragments=[f"--groups: expected a whole number, got {value} (see `mxq demo --help`)"],
            )
        self.error("demo", "--repeats", "1e3", fragments=["--repeats: expected a whole number, got 1e3"])
        self.error("demo", "--groups", "-1", fragments=["--groups: must be in [0, 1024], got -1"])
        self.error("demo", "--repeats", "99999999999999999999", fragments=["--repeats: must be in [1, 1000]"])
        if self.cpu_build:
            return
        r = run("bench", "--list", "--shapes", "512x512", "--ops", "fused", "--groups", "010")
        where = self.check_clean(r, 0, prefix="mxq bench:")
        self.assertIn("main    fused      512x512       bf16 G=10 ", r.stdout, where)
        for option, value in (
            ("--replays", "1e3"),
            ("--warmup", "1.5"),
            ("--groups", "8,0x10"),
            ("--tile-rows", "0x40"),
        ):
            bad = value.split(",")[-1]
            self.error(
                "bench",
                option,
                value,
                "--list",
                fragments=[f"{option}: expected a whole number, got {bad} (see `mxq bench --help`)"],
                prefix="mxq bench:",
            )
        r = run("bench", "--list", "--sets", "main", "--ops", "fused", "--tile-rows", "0064")
        self.check_clean(r, 0, prefix="mxq bench:")

    def test_bench_lists_refuse_empty_entries(self):
        # CLI11's list splitting dropped empty entries without a word: "--ops fused," ran fused alone and
        # "--groups 4,,8" two group counts. Checked while parsing, so a CPU-only build refuses them too.
        for option, value in (
            ("--shapes", "64x64,,128x128"),
            ("--ops", "fused,"),
            ("--groups", ",8"),
            ("--sets", "main,,ragged"),
        ):
            self.error(
                "bench",
                option,
                value,
                "--list",
                fragments=[f'mxq bench: {option}: empty entry in the list "{value}" (see `mxq bench --help`)'],
                prefix="mxq bench:",
            )
        self.error(
            "bench",
            "--groups",
            "",
            fragments=["--groups: expected a comma-separated list, got nothing"],
            prefix="mxq bench:",
        )
        if self.cpu_build:
            return
        # Lists still split, repeat and rewrite their entries as before.
        r = run(
            "bench",
            "--list",
            "--shapes",
            "512x512,1024x1024",
            "--shapes",
            "64x64",
            "--ops",
            "fused,copy",
            "--groups",
            "010,4",
        )
        where = self.check_clean(r, 0, prefix="mxq bench:")
        for shape in ("512x512", "1024x1024", "64x64"):
            self.assertIn(f"main    copy       {shape} ", r.stdout, where)
        self.assertIn("main    fused      64x64         bf16 G=10 ", r.stdout, where)
        self.assertIn("main    fused      64x64         bf16 G=4 ", r.stdout, where)
        self.assertTrue(r.stdout.endswith("\n12 cases\n"), where)

    def test_unknown_subcommand_or_option(self):
        # Used to say only "A subcommand is required", without naming the word it did not know.
        for word in ("dem", "bogus"):
            self.error(
                word,
                fragments=[
                    f'mxq: unknown subcommand "{word}": expected demo, bench, info or version (see `mxq --help`)'
                ],
                prefix="mxq:",
            )
        self.error("--bogus", fragments=['mxq: unknown option "--bogus" (see `mxq --help`)'], prefix="mxq:")
        self.error("bogus", "demo", fragments=['unknown subcommand "bogus"'], prefix="mxq:")

    def test_option_errors_after_parsing(self):
        # Rules checked after parsing used to leave out the option and the pointer to --help.
        self.error(
            "demo",
            "--shape",
            "100x64",
            "--cpu",
            fragments=["mxq demo: --shape: M must be a multiple of 32, got 100 (see `mxq demo --help`)"],
        )
        self.error("demo", "--shape", "64x0", fragments=["--shape: K must be at least 32", "(see `mxq demo --help`)"])
        self.error(
            "demo",
            "--shape",
            "64x256",
            "--cpu",
            "--groups",
            "3",
            fragments=["--groups 3 is too many for M=64", "(see `mxq demo --help`)"],
        )
        if self.cpu_build:
            return
        self.error(
            "bench",
            "--shapes",
            "100x64",
            fragments=["mxq bench: --shapes 100x64: M must be a multiple of 32, got 100 (see `mxq bench --help`)"],
            prefix="mxq bench:",
        )
        self.error(
            "bench",
            "--sets",
            "weights",
            "--ops",
            "fused",
            fragments=["nothing to run", "(see `mxq bench --help`)"],
            prefix="mxq bench:",
        )

    def test_bench_byte_counts_fit(self):
        # 2147483616x1073741824 used to list a negative byte count (signed 64-bit overflow in traffic.h).
        if self.cpu_build:
            self.skipTest("a CPU-only build has no bench")
        shape = "2147483616x1073741824"
        self.error(
            "bench",
            "--list",
            "--shapes",
            shape,
            "--ops",
            "fused",
            fragments=[f"--shapes {shape}: M*K must be at most 2^56", "(see `mxq bench --help`)"],
            prefix="mxq bench:",
        )
        # The largest shape taken: every count of every op stays positive.
        r = run("bench", "--list", "--shapes", "268435456x268435456", "--dtype", "fp32", "--groups", "1024")
        where = self.check_clean(r, 0, prefix="mxq bench:")
        self.assertNotIn(" -", r.stdout, where)
        self.assertTrue(r.stdout.endswith("\n10 cases\n"), where)

    def test_bench_json_checked_first(self):
        # An unwritable --json used to fail only after the whole run. It is an option like the others: refused
        # before the GPU check (so here, too, with or without a GPU), and with nothing run.
        if self.cpu_build:
            self.skipTest("a CPU-only build has no bench")
        with tempfile.TemporaryDirectory() as tmp:
            regular = os.path.join(tmp, "file")
            open(regular, "w").close()
            for path in (os.path.join(regular, "out.json"), tmp):
                self.error(
                    "bench",
                    "--quick",
                    "--json",
                    path,
                    fragments=[f"--json {path}: cannot ", "(see `mxq bench --help`)"],
                    prefix="mxq bench:",
                )
            if not self.gpu:
                # A writable path passes the check (on to the GPU check) and leaves no file behind: the run
                # writes it at the end.
                good = os.path.join(tmp, "new", "out.json")
                self.error("bench", "--json", good, fragments=["no usable GPU"], code=2, prefix="mxq bench:")
                self.assertFalse(os.path.exists(good), "the check left a file behind")
            # --list writes no JSON and checks none.
            r = run("bench", "--list", "--quick", "--json", os.path.join(regular, "out.json"))
            self.check_clean(r, 0, prefix="mxq bench:")

    # ---- what works ----
    def test_version(self):
        for args in (["--version"], ["version"]):
            r = run(*args)
            self.check_clean(r, 0)
            self.assertRegex(r.stdout, r"^mxq \d+\.\d+\.\d+")
        r = run("info")
        self.check_clean(r, 0)
        self.assertIn("mxq ", r.stdout)
        self.assertNotIn("driver 0.0", r.stdout)  # no driver installed: said in words

    def test_small_cpu_runs(self):
        r = self.demo_ok(256, 256, "--cpu")
        self.assertIn("--cpu: running the CPU reference only", r.stdout)
        self.assertIn("Spot check of the reference", r.stdout)
        r = self.demo_ok(512, 256, "--cpu", "--groups", "3")
        self.assertIn("offs = [", r.stdout)
        self.assertIn("3 groups", r.stdout)
        self.demo_ok(2880, 96, "--cpu", "--groups", "4", "--rule", "floor")

    def offs_of(self, r, M):
        offs = [int(v) for v in re.search(r"offs = \[([\d, ]*)\]", r.stdout).group(1).split(", ")]
        for prev, end in zip([0, *offs], offs):
            self.assertTrue(prev <= end <= M, f"offs {offs} not non-decreasing within M={M}")
        return offs

    def test_grouped_32_multiples(self):
        # Groups whose sizes are multiples of 32 but not of 128: the M-groups s_row allocation is
        # (roundup(M,128) + 128G, roundup(K/32,4)) and the demo sizes and checks it that way.
        M, K, G = 320, 64, 7
        for extra in (["--cpu"], []):
            r = self.demo_ok(M, K, *extra, "--groups", str(G), "--seed", "3")
            offs = self.offs_of(r, M)
            self.assertEqual(len(offs), G)
            self.assertTrue(all(o % 32 == 0 for o in offs), offs)
            self.assertTrue(any(o % 128 for o in offs), f"no group boundary off the 128 grid: {offs}")
            self.assertLess(offs[-1], M, "no uncovered tail")
            self.assertRegex(r.stdout, rf"\ns_row +{384 + 128 * G} x 4 ", "s_row is not the M-groups allocation")
            self.assertRegex(r.stdout, rf"\ns_col +128 x {M // 32 + 4 * G} ", "s_col is not the K-groups allocation")

    def test_dtypes(self):
        # Each input type at a small shape (the CPU reference, and the GPU paths where there is a GPU); the demo
        # says which dtype ran, and the special values are in the input.
        for dtype, size in (("bf16", "12.00 KiB"), ("fp16", "12.00 KiB"), ("fp32", "24.00 KiB")):
            for extra in (["--cpu"], []):
                r = self.demo_ok(96, 64, *extra, "--dtype", dtype)
                self.assertIn(f"mxq demo: x {dtype} 96x64 ({size})", r.stdout)
                self.assertIn(f"specials in x ({dtype}):", r.stdout)
                self.assertIn("NaN at x[", r.stdout)
        r = self.demo_ok(160, 96, "--cpu", "--dtype", "fp32", "--groups", "3")
        self.assertIn("x fp32 160x96", r.stdout)
        self.error("demo", "--dtype", "fp8", fragments=["--dtype"])

    # ---- the benchmark's plan (needs no GPU) ----
    def test_bench_plan(self):
        if self.cpu_build:
            self.error("bench", "--list", fragments=["no CUDA"], code=2, prefix="mxq bench:")
            return
        r = run("bench", "--list")
        where = self.check_clean(r, 0, prefix="mxq bench:")
        for fragment in (
            "main    fused      131072x7168   bf16 G=64",
            "main    dequantize 512x4096      bf16 dense",
            "ragged  fused      8160x2880     bf16 dense",
            "ragged  fused      8192x3072     bf16 dense",
            "ragged  composed   32736x5120    bf16 dense",
            "ragged  composed   32768x5120    bf16 dense",
            "grouped rowwise    32768x7168    bf16 G=8 ",
            "grouped fused      32768x7168    bf16 G=64",
            "grouped fused      32768x7168    bf16 G=8 even",
            "grouped dequantize 32768x7168    bf16 G=8 skew90",
            "dtypes  fused      32768x7168    fp16 dense",
            "dtypes  colwise    32768x7168    fp32 dense",
            "weights weight     8x4096x7168   bf16 1x32",
            "weights weight     1x7168x2048   bf16 32x32",
        ):
            self.assertIn(fragment, r.stdout, where)
        self.assertNotIn("swizzle", r.stdout, where)
        # The probe (the fused kernel's bytes, no math) and the copy (x's bytes by a plain copy kernel): main set,
        # dense bf16, once per shape, right after fused.
        for op in ("probe", "copy"):
            rows = [line for line in r.stdout.splitlines() if f" {op} " in line]
            self.assertEqual(len(rows), 7, where)
            for line in rows:
                self.assertRegex(line, rf"\] main    {op} +\d+x\d+ +bf16 dense ", where)
        r = run("bench", "--sets", "main", "--ops", "fused,probe,copy", "--groups", "8", "--list")
        where = self.check_clean(r, 0, prefix="mxq bench:")
        lines = r.stdout.splitlines()
        self.assertIn("main    fused      8192x2048     bf16 dense          65.00 MiB", lines[0], where)
        self.assertIn("main    probe      8192x2048     bf16 dense          65.00 MiB", lines[1], where)
        # x (32 MiB of bf16) read and written once: traffic.h's copy row.
        self.assertIn("main    copy       8192x2048     bf16 dense          64.00 MiB", lines[2], where)
        self.assertIn("main    fused      8192x2048     bf16 G=8 ", lines[3], where)
        self.assertTrue(r.stdout.endswith("\n28 cases\n"), where)
        r = run("bench", "--list")
        cases = int(re.search(r"(\d+) cases\n$", r.stdout).group(1))
        quick = run("bench", "--quick", "--list")
        self.check_clean(quick, 0, prefix="mxq bench:")
        self.assertLess(int(re.search(r"(\d+) cases\n$", quick.stdout).group(1)), cases // 4)
        self.assertIn("ragged  fused      8160x2880", quick.stdout)
        # --shapes alone: the main set only, at the dtype asked for.
        r = run("bench", "--shapes", "96x2880", "--groups", "2", "--dtype", "fp32", "--list")
        where = self.check_clean(r, 0, prefix="mxq bench:")
        self.assertIn("main    fused      96x2880       fp32 G=2", r.stdout, where)
        self.assertNotIn("probe", r.stdout, where)  # bf16 only
        self.assertNotIn("copy", r.stdout, where)
        self.assertTrue(r.stdout.endswith("\n10 cases\n"), where)

    # ---- option parsing and the other subcommands ----
    def test_usage_errors(self):
        self.error("demo", "--rule", "nearest", fragments=["--rule"])
        self.error("demo", "--frobnicate", fragments=["--frobnicate"])
        self.error(fragments=["subcommand"], prefix="mxq:")
        if self.cpu_build:
            # Unavailable, not failed: this build has no bench, whatever the options.
            self.error("bench", fragments=["no CUDA"], code=2, prefix="mxq bench:")
            return
        self.error(
            "bench",
            "--shapes",
            "100x128",
            fragments=["--shapes 100x128: M must be a multiple of 32, got 100"],
            prefix="mxq bench:",
        )
        self.error(
            "bench", "--shapes", "0x128", fragments=["M must be a positive multiple of 32, got 0"], prefix="mxq bench:"
        )
        self.error("bench", "--ops", "swizzle", fragments=["--ops"], prefix="mxq bench:")
        self.error("bench", "--sets", "everything", fragments=["--sets"], prefix="mxq bench:")
        self.error("bench", "--dtype", "fp8", fragments=["--dtype"], prefix="mxq bench:")
        self.error("bench", "--sets", "weights", "--ops", "fused", fragments=["nothing to run"], prefix="mxq bench:")
        self.error(
            "bench",
            "--ops",
            "probe",
            "--dtype",
            "fp16",
            fragments=["nothing to run", "probe and copy run in the main set only, dense, bf16"],
            prefix="mxq bench:",
        )
        if not self.gpu:
            # Unavailable, not failed: the machine lacks what bench needs. A 32-multiple shape passes the checks.
            self.error("bench", fragments=["no usable GPU"], code=2, prefix="mxq bench:")
            self.error(
                "bench",
                "--shapes",
                "96x2880",
                "--dtype",
                "fp32",
                fragments=["no usable GPU"],
                code=2,
                prefix="mxq bench:",
            )
            self.error(
                "bench",
                "--sets",
                "ragged,grouped,dtypes,weights",
                fragments=["no usable GPU"],
                code=2,
                prefix="mxq bench:",
            )


def main():
    global MXQ
    if len(sys.argv) != 2:
        sys.exit("usage: test_cli.py /path/to/mxq")
    MXQ = sys.argv[1]
    unittest.main(argv=[sys.argv[0], "-v"])


if __name__ == "__main__":
    main()
