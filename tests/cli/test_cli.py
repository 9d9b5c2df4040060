#!/usr/bin/env python3
"""Drives the built `mxq` binary with bad and good inputs: exit codes, messages, no crashes.

Usage: test_cli.py /path/to/mxq   (CTest passes $<TARGET_FILE:mxq_cli>; Python 3 standard library only)

Each case asserts the exit code (0 ok, 1 error, 2 unavailable), that no signal killed the process
(returncode >= 0: SIGFPE or an uncaught exception's abort would show up as a negative code), that an
error is one line starting with the subcommand's prefix exactly once with no C++ exception names or
file paths, and that every element coordinate the demo prints lies inside the tensor. Cases whose
outcome depends on the machine (the GPU needs 128-multiples; without one the demo runs the CPU
reference) ask `mxq info` whether the GPU path is usable and expect the matching behaviour.
"""

import re
import subprocess
import sys
import unittest

MXQ = None  # set from argv in main
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
        """A successful demo: exit 0, an OK verdict, every printed x[m, k] inside (M, K)."""
        r = run("demo", "--shape", f"{M}x{K}", *args)
        where = self.check_clean(r, 0)
        self.assertIn("\nOK: ", r.stdout, where)
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
        if self.gpu:
            self.error(
                "demo", "--shape", "32x32", fragments=["M must be a multiple of 128 on the GPU, got 32", "--cpu"]
            )
        else:
            r = self.demo_ok(32, 32)
            self.assertIn("running the CPU reference only", r.stdout)

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
        for shape, bad in (("31x64", "31"), ("100x64", "100")):
            self.error(
                "demo",
                "--shape",
                shape,
                "--cpu",
                fragments=[f"M must be a multiple of 32 on the CPU reference, got {bad}"],
            )
            if self.gpu:
                self.error("demo", "--shape", shape, fragments=[f"M must be a multiple of 128 on the GPU, got {bad}"])
            else:
                self.error(
                    "demo", "--shape", shape, fragments=[f"M must be a multiple of 32 on the CPU reference, got {bad}"]
                )
        self.error("demo", "--shape", "64x31", "--cpu", fragments=["K must be a multiple of 32"])
        self.error("demo", "--shape", "64", fragments=['--shape: expected MxK such as 4096x4096, got "64"'])
        self.error("demo", "--shape", "-5x64", fragments=["--shape: expected MxK"])

    def test_32_multiple_not_128(self):
        # 2880 = 22.5 x 128: the CPU reference takes it; the GPU path never silently falls back.
        self.demo_ok(2880, 64, "--cpu")
        if self.gpu:
            self.error(
                "demo", "--shape", "2880x64", fragments=["M must be a multiple of 128 on the GPU, got 2880", "--cpu"]
            )
        else:
            r = self.demo_ok(2880, 64)
            self.assertIn("no usable GPU", r.stdout)
            self.assertIn("on a GPU this shape would be refused", r.stdout)

    def test_negative_seed(self):
        # CLI11 used to wrap -1 to 18446744073709551615.
        self.error("demo", "--shape", "256x256", "--cpu", "--seed", "-1", fragments=["--seed", "non-negative", "-1"])
        self.error("demo", "--seed", "18446744073709551616", fragments=["--seed"])
        r = self.demo_ok(256, 256, "--cpu", "--seed", "18446744073709551615")
        self.assertIn("seed 18446744073709551615", r.stdout)

    def test_too_many_groups(self):
        self.error(
            "demo",
            "--shape",
            "256x256",
            "--cpu",
            "--groups",
            "5",
            fragments=["--groups 5", "M=256", "at most 2", "multiples of 128"],
        )
        self.error(
            "demo", "--shape", "64x256", "--cpu", "--groups", "1", fragments=["--groups needs M of at least 128"]
        )
        self.error("demo", "--shape", "256x256", "--cpu", "--groups", "5000", fragments=["--groups", "1024"])

    # ---- what works ----
    def test_version(self):
        for args in (["--version"], ["version"]):
            r = run(*args)
            self.check_clean(r, 0)
            self.assertRegex(r.stdout, r"^mxq \d+\.\d+\.\d+")
        r = run("info")
        self.check_clean(r, 0)
        self.assertIn("mxq ", r.stdout)

    def test_small_cpu_runs(self):
        r = self.demo_ok(256, 256, "--cpu")
        self.assertIn("--cpu: running the CPU reference only", r.stdout)
        self.assertIn("Spot check of the reference", r.stdout)
        r = self.demo_ok(512, 256, "--cpu", "--groups", "3")
        self.assertIn("offs = [", r.stdout)
        self.assertIn("3 groups", r.stdout)
        self.demo_ok(2880, 96, "--cpu", "--groups", "4", "--rule", "floor")

    # ---- option parsing and the other subcommands ----
    def test_usage_errors(self):
        self.error("demo", "--rule", "nearest", fragments=["--rule"])
        self.error("demo", "--frobnicate", fragments=["--frobnicate"])
        self.error(fragments=["subcommand"], prefix="mxq:")
        if self.cpu_build:
            # Unavailable, not failed: this build has no bench, whatever the options.
            self.error("bench", fragments=["no CUDA"], code=2, prefix="mxq bench:")
            return
        self.error("bench", "--shapes", "96x128", fragments=["M must be a multiple of 128"], prefix="mxq bench:")
        self.error("bench", "--ops", "swizzle", fragments=["--ops"], prefix="mxq bench:")
        if not self.gpu:
            # Unavailable, not failed: the machine lacks what bench needs.
            self.error("bench", fragments=["no usable GPU"], code=2, prefix="mxq bench:")


def main():
    global MXQ
    if len(sys.argv) != 2:
        sys.exit("usage: test_cli.py /path/to/mxq")
    MXQ = sys.argv[1]
    unittest.main(argv=[sys.argv[0], "-v"])


if __name__ == "__main__":
    main()
