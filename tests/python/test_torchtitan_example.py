"""examples/train_torchtitan.py with torchtitan 0.3.x on the CPU: its arguments are checked before any work (the token
count the MXFP8 run needs), it imports torchtitan 0.3 on a torch without ``DataParallelMeshDims`` (torch 2.11,
simulated by removing the name), its causal-SDPA inner attention computes what TorchTitan's flex attention does on
this data, and the --tiny smoke run trains both runs end to end. CI installs torchtitan 0.3.0 (scripts/test.sh);
these tests skip, saying so, where it is missing."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")
pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/test.sh installs torchtitan 0.3.0)")

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import mxq
import torch

if not importlib.metadata.version("torchtitan").startswith("0.3."):
    pytest.skip("examples/train_torchtitan.py targets torchtitan 0.3.x", allow_module_level=True)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "train_torchtitan.py")


def _run(args, cwd, code=None, timeout=600):
    """The example (or ``code``, a Python snippet with the example importable) in a fresh process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(mxq.__file__)), os.path.dirname(SCRIPT), env.get("PYTHONPATH")) if p
    )
    cmd = [sys.executable, SCRIPT, *args] if code is None else [sys.executable, "-c", code]
    return subprocess.run(cmd, check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--tiny", "--seq-len", "33"],
            (
                "--batch x --seq-len (the token count each converted Linear sees) must be a multiple of 32 for the "
                "mxfp8_rceil run, got 1x33 = 33 (or pass --bf16-only)"
            ),
        ),
        (
            ["--batch", "3", "--seq-len", "50"],
            "must be a multiple of 32 for the mxfp8_rceil run, got 3x50 = 150",
        ),
        (["--tiny", "--recipe", "fp8_blockwise"], "must be a multiple of 128 for the fp8_blockwise run, got 1x64 = 64"),
        (["--tiny", "--recipe", "fp16"], "--recipe must be one of mxfp8_rceil, mxfp8_floor, mxfp8_rceil_1x32, fp8_"),
        (["--seq-len", "20000"], "--seq-len must be at most 16384 (the flavors' RoPE length), got 20000"),
        (["--flavor", "16B", "--layers", "1"], "--layers must be at least 2 (the first layer is dense"),
        (["--flavor", "16B", "--recipe", "fp8_blockwise", "--seq-len", "100"], "got 4x100 = 400"),  # 16B's batch 4
        (["--flavor", "236B"], "argument --flavor: invalid choice: '236B'"),
        (["--tiny", "--profile", "5"], "--profile tables GPU kernels: it needs --device cuda"),
        (["--steps", "2", "--profile", "5"], "--profile needs more than 2 --steps"),
    ],
)
def test_arguments_checked_before_any_work(tmp_path, args, message):
    proc = _run([*args, "--device", "cpu", "--out-dir", str(tmp_path / "out")], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # nothing ran: no model, no training
    assert not (tmp_path / "out").exists()


def test_bf16_only_takes_any_token_count(tmp_path):
    """--bf16-only converts nothing, so the token count is not checked: it gets past the arguments (shown with an
    --out-dir that cannot be made, the last argument check)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _run(["--bf16-only", "--seq-len", "33", "--device", "cpu", "--out-dir", str(blocker)], cwd=tmp_path)
    assert proc.returncode == 2 and "--out-dir" in proc.stderr and "multiple of 32" not in proc.stderr, proc.stderr


def test_help_says_which_versions_run_where(tmp_path):
    proc = _run(["--help"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "torchtitan 0.3.x only" in proc.stdout and "torch >= 2.11" in proc.stdout
    assert "DataParallelMeshDims" in proc.stdout and "causal-SDPA" in proc.stdout and "on a CPU" in proc.stdout


def test_imports_torchtitan_without_data_parallel_mesh_dims(tmp_path):
    """torch 2.11 lacks torch.distributed.fsdp.DataParallelMeshDims (2.12+), which torchtitan 0.3.0's DeepSeek-V3
    code imports: with the name removed before torchtitan is imported, the example puts a placeholder there and the
    model builds (on a torch that has the name, nothing is replaced)."""
    code = """
import sys
import torch.distributed.fsdp as fsdp
real = getattr(fsdp, "DataParallelMeshDims", None)
if real is not None:
    del fsdp.DataParallelMeshDims
assert "torchtitan.models.deepseek_v3" not in sys.modules
try:
    from torchtitan.models import deepseek_v3  # noqa: F401
except ImportError as e:
    print("without the placeholder:", e)
for name in [m for m in sys.modules if m.startswith("torchtitan")]:
    del sys.modules[name]
import train_torchtitan as ex
tt = ex.load_torchtitan()
assert tt.mesh_dims_placeholder and fsdp.DataParallelMeshDims.__name__ == "DataParallelMeshDims"
import types
import torch
spec = ex.model_spec(tt, types.SimpleNamespace(flavor="debugmodel", layers=None), [])
with torch.device("meta"):
    spec.model.build()
cut = ex.model_spec(tt, types.SimpleNamespace(flavor="16B", layers=4), [])  # 16B's widths, its first 4 layers
assert len(cut.model.layers) == 4 and cut.model.dim == 2048 and cut.model.vocab_size == 102400
assert ex.install_mesh_dims_placeholder() is False  # the name is there now: nothing replaced
print("ok")
"""
    proc = _run([], cwd=tmp_path, code=code, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "without the placeholder: cannot import name 'DataParallelMeshDims'" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok")


def _example(monkeypatch):
    spec = importlib.util.spec_from_file_location("train_torchtitan", SCRIPT)
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_torchtitan", example)  # its dataclasses look their module up there
    spec.loader.exec_module(example)
    return example


def test_language_of_a_large_vocabulary_uses_its_first_ids(monkeypatch):
    """16B's vocabulary (102400): the language draws over its first max_vocab ids (its (topics, V, V) draw would not
    fit), the same language as a vocabulary of max_vocab ids; a small vocabulary (the debug model's) keeps its own."""
    ex = _example(monkeypatch)
    spec = ex.LanguageSpec()
    big, floor = ex.make_batches(102400, spec, 2, 3, 64, seed=0)
    same, same_floor = ex.make_batches(spec.max_vocab, spec, 2, 3, 64, seed=0)
    assert torch.equal(big, same) and floor == same_floor and int(big.max()) < spec.max_vocab
    small, _ = ex.make_batches(2048, spec, 2, 3, 64, seed=0)
    assert int(small.max()) < 2048 and int(small.max()) > 1024


@pytest.mark.skipif(
    torch.torch_version.TorchVersion(torch.__version__) < "2.12",
    reason="TorchTitan 0.3's flex attention needs torch >= 2.12 (create_block_mask(separate_full_blocks=...))",
)
def test_causal_sdpa_equals_torchtitan_flex_attention_on_one_document(monkeypatch):
    """The DeepSeek-V3 debug model with the example's causal SDPA and no masks computes what TorchTitan's flex
    attention computes with its block-causal masks for sequences of one document each (forward; flex attention has
    no CPU backward)."""
    example = _example(monkeypatch)
    tt = example.load_torchtitan()
    torch.manual_seed(0)
    model = tt.deepseek_v3.model_registry("debugmodel", attn_backend="flex").model.build()
    model.init_weights(buffer_device=None)
    tokens = torch.randint(0, 2048, (2, 64), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(64).repeat(2, 1)
    with torch.no_grad():
        ref = model(tokens, positions=positions, attention_masks=model.get_attention_masks(positions))
        assert example.use_causal_sdpa(model) == 6
        out = model(tokens)
    assert all(type(m.inner_attention) is example.CausalSDPA for m in model.modules() if hasattr(m, "inner_attention"))
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_tiny_cpu_run_trains_both_runs(tmp_path):
    """The CPU smoke run, as --help shows it but 2 steps: the fp32 baseline and the converted model (53 converted,
    the 5 router gates skipped by the converter's default pattern), results.json, exit status 0."""
    out = tmp_path / "out"
    proc = _run(["--tiny", "--steps", "2", "--device", "cpu", "--out-dir", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[ fp32] step     2/2" in proc.stdout and "[mxfp8] step     2/2" in proc.stdout
    assert "excluded by pattern '*router.gate'" in proc.stdout
    result = json.loads((out / "results.json").read_text())
    assert [len(run["losses"]) for run in result["runs"].values()] == [2, 2]
    assert result["conversion_counts"] == {"converted": 53, "skipped": 5}
    assert result["within_tolerance"] and result["versions"]["torchtitan"].startswith("0.3.")
    assert not any(p.name.endswith("_out") for p in tmp_path.iterdir() if p != out)  # nothing else written
