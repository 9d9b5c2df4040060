"""mxq.nn.convert (docs/training.md): which modules it swaps (nn.Linear with 32-multiple dims, expert modules with the
documented interface), include/exclude by fully qualified name, the summary with a reason for every skip, shared
Parameter objects (optimizers and tied modules keep working), outputs close to the original model's; and a CPU smoke
run of examples/train_moe.py."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import importlib.util
import json
import os
import subprocess
import sys

import mxq
import torch
from helpers import DEVICES
from mxq import GroupedExperts, MXFP8GroupedExperts, MXFP8Linear
from test_linear import sqnr
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Custom(nn.Linear):
    """A subclass of nn.Linear: convert leaves it alone (its forward may differ)."""


class _MyExperts(nn.Module):
    """A user's expert module with the interface: the marker, w1/w2/w3, forward(x, offs)."""

    mxq_experts = "swiglu"

    def __init__(self, G, D, H):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(G, H, D) / D**0.5)
        self.w2 = nn.Parameter(torch.randn(G, D, H) / H**0.5)
        self.w3 = nn.Parameter(torch.randn(G, H, D) / D**0.5)

    def forward(self, x, offs):
        mm = mxq.bf16_grouped_mm
        return mm(torch.nn.functional.silu(mm(x, self.w1, offs)) * mm(x, self.w3, offs), self.w2, offs)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 64)
        self.proj = nn.Linear(64, 128)
        self.block = nn.ModuleDict(
            {
                "fc1": nn.Linear(128, 96, bias=False),
                "odd": nn.Linear(96, 100),  # out_features not a multiple of 32
                "custom": _Custom(100, 64),
                "experts": _MyExperts(4, 64, 96),
            }
        )
        self.router = nn.Linear(64, 4)
        self.head = nn.Linear(64, 64)

    def forward(self, x, offs):
        h = self.block["fc1"](self.proj(x))
        h = self.block["custom"](self.block["odd"](h))
        return self.head(h + self.block["experts"](h, offs)) + self.router(h).sum(-1, keepdim=True)


def _names(entries):
    return [e.name for e in entries]


def test_convert_default_swaps_linear_and_experts_in_place():
    torch.manual_seed(0)
    net = _Net()
    params_before = {n: p for n, p in net.named_parameters()}
    x = torch.randn(128, 64)
    offs = torch.tensor([32, 32, 64, 96], dtype=torch.int32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = net(x, offs)
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["proj", "block.fc1", "block.experts", "head"]
    skipped = {s.name: s.reason for s in summary.skipped}
    assert skipped == {
        "block.odd": "out_features=100 not a multiple of 32",
        "block.custom": "a subclass of nn.Linear (its forward may differ); not converted",
        "router": "out_features=4 not a multiple of 32",
    }
    assert isinstance(net.proj, MXFP8Linear) and isinstance(net.head, MXFP8Linear)
    assert isinstance(net.block["experts"], MXFP8GroupedExperts) and type(net.block["odd"]) is nn.Linear
    # The same Parameter objects, under the same names: an optimizer built before keeps working.
    after = dict(net.named_parameters())
    assert after.keys() == params_before.keys()
    assert all(after[n] is params_before[n] for n in after)
    # Defaults: 32x32 weight tiles, fused activation casts, RCEIL.
    assert net.proj.weight_scaling == "32x32" and net.proj.activation_quantization_backend == "fused"
    assert net.proj.scaling_mode == "rceil"
    assert net.block["experts"].config()["activation_quantization_backend"] == "fused"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x, offs)
    assert sqnr(ref, out) >= 20
    text = str(summary)
    assert "4 converted, 3 skipped" in text and "block.odd" in text and "MXFP8GroupedExperts" in text


def test_include_exclude_patterns_and_options():
    net = _Net()
    summary = mxq.nn.convert(net, include=["block.*", "head"], exclude="*.experts", weight_scaling="1x32")
    assert _names(summary.converted) == ["block.fc1", "head"]
    reasons = {s.name: s.reason for s in summary.skipped}
    assert reasons["proj"] == "not matched by include ['block.*', 'head']"
    assert reasons["block.experts"] == "excluded by pattern '*.experts'"
    assert net.head.weight_scaling == "1x32"
    # Converting again: the MXFP8 modules are reported, not converted twice.
    again = mxq.nn.convert(net)
    assert {s.name: s.reason for s in again.skipped}["head"] == "already MXFP8"
    assert "proj" in _names(again.converted) and "block.experts" in _names(again.converted)


def test_converted_layers_carry_every_option():
    """Every option of convert reaches every new module: config() returns them (as constructor keywords that build
    an equal layer) and the repr shows them after the original module's own fields."""
    net = _Net()
    common = {
        "weight_scaling": "1x32",
        "activation_quantization_backend": "composed",
        "x_colwise": "quantized",
        "scaling_mode": "floor",
    }
    mxq.nn.convert(net, **common, gemm="emulated", grouped_gemm="emulated")
    lin, experts = net.head, net.block["experts"]
    assert lin.config() == {**common, "gemm": "emulated"} == experts.config()
    assert MXFP8Linear(64, 32, **lin.config()).config() == lin.config()
    assert MXFP8GroupedExperts(4, 64, 64, **experts.config()).config() == experts.config()
    options = ", ".join(f"{k}={v!r}" for k, v in lin.config().items())
    assert (
        repr(lin)
        == f"MXFP8Linear(in_features={lin.in_features}, out_features={lin.out_features}, bias=True, {options})"
    )
    assert repr(experts).startswith("MXFP8GroupedExperts(kind='swiglu', num_experts=") and repr(experts).endswith(
        f"{options})"
    )


def test_shared_module_is_replaced_under_every_name():
    lin = nn.Linear(64, 64)
    net = nn.Sequential(lin, nn.ReLU(), lin)
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["0"]
    assert net[0] is net[2] and isinstance(net[0], MXFP8Linear) and net[0].weight is lin.weight


def test_root_module_and_bad_arguments():
    summary = mxq.nn.convert(nn.Linear(64, 64))
    assert summary.converted == [] and summary.skipped[0].reason.startswith("the root module cannot be replaced")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        mxq.nn.convert("model")
    with pytest.raises(ValueError, match='weight_scaling must be "32x32" or "1x32"'):
        mxq.nn.convert(nn.Sequential(), weight_scaling="32")
    with pytest.raises(ValueError, match='activation_quantization_backend must be "fused" or "composed"'):
        mxq.nn.convert(nn.Sequential(), activation_quantization_backend="cutlass")
    with pytest.raises(ValueError, match="include must be None, a pattern string or a list of them"):
        mxq.nn.convert(nn.Sequential(), include=3)


def test_expert_interface_checks():
    class Bad(nn.Module):
        mxq_experts = "swiglu"

        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.zeros(2, 64, 32))
            self.w2 = nn.Parameter(torch.zeros(2, 64, 32))  # should be (G, D, H) = (2, 32, 64)
            self.w3 = nn.Parameter(torch.zeros(2, 64, 32))

    class Odd(nn.Module):
        mxq_experts = "linear"

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(2, 48, 64))

    class NotMarked(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.zeros(2, 64, 32))

    net = nn.ModuleDict({"bad": Bad(), "odd": Odd(), "plain": NotMarked()})
    summary = mxq.nn.convert(net)
    reasons = {s.name: s.reason for s in summary.skipped}
    assert summary.converted == []
    assert "w1 (G, H, D), w2 (G, D, H) and w3 (G, H, D) must agree" in reasons["bad"]
    assert reasons["odd"] == "hidden_dim=48 not a multiple of 32"
    assert "plain" not in reasons  # no marker: not an expert module, not a candidate


@pytest.mark.parametrize("device", DEVICES)
def test_converted_model_trains(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # built before the conversion
    mxq.nn.convert(model)
    x = torch.randn(256, 64, device=device)
    target = x @ torch.randn(64, 64, device=device) / 8
    losses = []
    for _ in range(30):
        loss = (model(x).float() - target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_experts_bf16_reference_and_convert_share_parameters():
    e = GroupedExperts(4, 64, 64, kind="linear")
    holder = nn.ModuleDict({"e": e})
    mxq.nn.convert(holder)
    assert isinstance(holder["e"], MXFP8GroupedExperts) and holder["e"].weight is e.weight


def test_train_moe_example_language_is_a_function_of_the_seed(monkeypatch):
    """The example's synthetic language (hence its batches and the entropy floor it prints) depends on --seed alone,
    not on the global RNG: two calls with one seed agree whatever the global state, and another seed differs."""
    spec = importlib.util.spec_from_file_location("train_moe", os.path.join(REPO, "examples", "train_moe.py"))
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_moe", example)  # its dataclasses look their module up there
    spec.loader.exec_module(example)
    cfg = example.TINY
    torch.manual_seed(1)
    a, _ = example.make_language(cfg, 0)
    torch.manual_seed(2)
    b, _ = example.make_language(cfg, 0)
    c, _ = example.make_language(cfg, 1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    torch.testing.assert_close(a[..., -1], torch.ones_like(a[..., -1]))  # each row a distribution


def test_train_moe_example_cpu_smoke(tmp_path):
    """examples/train_moe.py, tiny config, 5 steps per run on the CPU: both runs, the JSON, exit status 0."""
    script = os.path.join(REPO, "examples", "train_moe.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(mxq.__file__)), env.get("PYTHONPATH")) if p
    )
    cmd = [sys.executable, script, "--tiny", "--steps", "5", "--device", "cpu", "--out-dir", str(tmp_path)]
    cmd += ["--log-every", "1", "--tolerance", "0.05"]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[bf16] step     5/5" in proc.stdout and "[mxfp8] step     5/5" in proc.stdout
    result = json.loads((tmp_path / "results.json").read_text())
    assert len(result["bf16"]["losses"]) == len(result["mxfp8"]["losses"]) == 5
    assert result["within_tolerance"] and abs(result["ratio_mxfp8_over_bf16"] - 1) <= 0.05
    assert {c["name"] for c in result["conversion"]["converted"]} >= {"head", "blocks.1.ffn.experts"}
    assert {s["name"] for s in result["conversion"]["skipped"]} == {"blocks.1.ffn.router"}
