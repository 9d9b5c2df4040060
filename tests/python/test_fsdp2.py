"""Two-rank FSDP2 training checks (docs/training.md, "FSDP2"): launches tests/distributed/fsdp2_checks.py with
torchrun (``python -m torch.distributed.run --standalone --nproc_per_node=2``) once per device — gloo on the CPU,
NCCL on CUDA when there are two GPUs — and turns each of its ``STATUS check[backend]: figures`` lines into a test:
FSDP2 vs single-rank parity (bitwise), reshard_after_forward=True under torch.compile, two microbatches with the
weights kept unsharded, weight quantization once per unshard (mxq.nn.reuse_quantized_weights), a CUDA-graph-captured step
(CUDA only). The script's own docstring says what each check proves."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import os
import re
import subprocess
import sys
import time

import mxq
import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "distributed", "fsdp2_checks.py")
BACKENDS = ["fused", "composed"]
LINE = re.compile(r"^(PASS|FAIL|SKIP|XFAIL|XPASS) (\w+)\[(\w+)\]: (.*)$", re.MULTILINE)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float):
        self.returncode = proc.returncode
        self.log = proc.stdout + proc.stderr
        self.seconds = seconds
        self.lines = {(m[1], m[2]): (m[0], m[3]) for m in LINE.findall(proc.stdout)}

    def line(self, check: str, backend: str) -> tuple[str, str]:
        assert (check, backend) in self.lines, f"no line for {check}[{backend}]; output:\n{self.log}"
        return self.lines[check, backend]


def _launch(device: str) -> Run:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(mxq.__file__)), env.get("PYTHONPATH")) if p
    )
    env["MXQ_TORCH_LIBRARY"] = mxq._library_path  # the ranks load the very extension this session loaded
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", SCRIPT]
    cmd += ["--device", device]
    start = time.monotonic()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=900)
    run = Run(proc, time.monotonic() - start)
    print(f"fsdp2_checks.py --device {device} ({run.seconds:.0f} s):\n" + proc.stdout)
    return run


@pytest.fixture(scope="module")
def cpu_run():
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo backend (torch.distributed on the CPU)")
    return _launch("cpu")


@pytest.fixture(scope="module")
def cuda_run():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs (this machine has {torch.cuda.device_count()})")
    if not mxq.has_cuda_kernels():
        pytest.skip("the loaded mxq extension has no CUDA kernels")
    return _launch("cuda")


DEVICES = ["cpu", "cuda"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("check", ["parity", "compile", "microbatch", "quantize_once", "cuda_graph"])
@pytest.mark.parametrize("device", DEVICES)
def test_check(request, device, check, backend):
    status, figures = request.getfixturevalue(f"{device}_run").line(check, backend)
    if status == "SKIP":
        pytest.skip(f"{check}[{backend}] on {device}: {figures}")
    assert status == "PASS", f"{status} {check}[{backend}] on {device}: {figures}"


@pytest.mark.parametrize("device", DEVICES)
def test_script_exit_status(request, device):
    """Exit status 0: no FAIL, no XPASS, no crash outside the checks."""
    run = request.getfixturevalue(f"{device}_run")
    assert run.returncode == 0, run.log
    assert re.search(r"^fsdp2_checks: .*\(device " + device, run.log, re.MULTILINE), run.log
