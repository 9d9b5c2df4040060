"""mxq.nn.convert (docs/training.md, "The converter"): which modules it converts (nn.Linear and subclasses that keep its
forward; expert modules by marker, by the _grouped_mm seam, by 3-D w1/w2/w3 in either orientation), the reason for
every skip, conversion in place (module objects, parameters and the old class kept), the recipe carried, converted
experts equal to calling mxq.grouped_mm directly (bitwise, groups of any size); and a CPU smoke run of
examples/train_moe.py."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import copy
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import mxq
import torch
import torch.nn.functional as F
from helpers import DEVICES, assert_outputs_equal, sqnr
from mxq import GroupedExperts, MXFP8Config, MXFP8GroupedExperts, MXFP8Linear
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Plain(nn.Linear):
    """A subclass that keeps nn.Linear's forward (TorchTitan's Linear is one): converted."""

    def describe(self):
        return "mine"


class _OwnForward(nn.Linear):
    """A subclass with a forward of its own: skipped."""

    def forward(self, x):
        return super().forward(x) * 2


class _MyExperts(nn.Module):
    """A user's expert module with mxq's interface: the marker, w1/w2/w3, forward(x, offs)."""

    mxq_experts = "swiglu"

    def __init__(self, G, D, H):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(G, H, D) / D**0.5)
        self.w2 = nn.Parameter(torch.randn(G, D, H) / H**0.5)
        self.w3 = nn.Parameter(torch.randn(G, H, D) / D**0.5)

    def forward(self, x, offs):
        mm = mxq.bf16_grouped_mm
        return mm(F.silu(mm(x, self.w1, offs)) * mm(x, self.w3, offs), self.w2, offs)


class _SeamExperts(nn.Module):
    """TorchTitan 0.3's GroupedExperts in miniature: w*_EFD parameters, token counts in, the _grouped_mm seam."""

    def __init__(self, E, D, F_):
        super().__init__()
        self.w1_EFD = nn.Parameter(torch.randn(E, F_, D) / D**0.5)
        self.w2_EDF = nn.Parameter(torch.randn(E, D, F_) / F_**0.5)
        self.w3_EFD = nn.Parameter(torch.randn(E, F_, D) / D**0.5)

    def forward(self, x, num_tokens_per_expert):
        offs = torch.cumsum(num_tokens_per_expert, dim=0, dtype=torch.int32)
        h = F.silu(self._grouped_mm(A=x.bfloat16(), B_t=self.w1_EFD.bfloat16().transpose(-2, -1), offs=offs))
        h = h * self._grouped_mm(A=x.bfloat16(), B_t=self.w3_EFD.bfloat16().transpose(-2, -1), offs=offs)
        return self._grouped_mm(A=h, B_t=self.w2_EDF.bfloat16().transpose(-2, -1), offs=offs).type_as(x)

    def _grouped_mm(self, *, A, B_t, offs):
        return mxq.bf16_grouped_mm(A, B_t.transpose(-2, -1), offs)

    def init_weights(self):  # a method of the module's own, which conversion keeps
        return "initialized"


class _W123Experts(nn.Module):
    """TorchTitan 0.2's GroupedExperts in miniature: 3-D w1/w2/w3, forward(x, num_tokens_per_expert); or, with
    ``transposed``, the (in, out) layout and forward(x, offs)."""

    def __init__(self, E, D, H, transposed=False):
        super().__init__()
        shape1, shape2 = ((E, D, H), (E, H, D)) if transposed else ((E, H, D), (E, D, H))
        self.w1 = nn.Parameter(torch.randn(shape1) / D**0.5)
        self.w2 = nn.Parameter(torch.randn(shape2) / H**0.5)
        self.w3 = nn.Parameter(torch.randn(shape1) / D**0.5)

    def forward(self, x, num_tokens_per_expert):
        raise AssertionError("replaced by the conversion")


class _W123Offs(_W123Experts):
    def forward(self, x, offs):
        raise AssertionError("replaced by the conversion")


class _W123Unknown(_W123Experts):
    def forward(self, x, groups):
        return x


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 64)
        self.proj = nn.Linear(64, 128)
        self.block = nn.ModuleDict(
            {
                "fc1": _Plain(128, 96, bias=False),
                "odd": nn.Linear(96, 100),  # out_features not a multiple of 32
                "own": _OwnForward(100, 64),
                "experts": _MyExperts(4, 64, 96),
            }
        )
        self.router = nn.Linear(64, 4)
        self.head = nn.Linear(64, 64)

    def forward(self, x, offs):
        h = self.block["fc1"](self.proj(x))
        h = self.block["own"](self.block["odd"](h))
        return self.head(h + self.block["experts"](h, offs)) + self.router(h).sum(-1, keepdim=True)


def _names(entries):
    return [e.name for e in entries]


def test_convert_in_place_keeps_modules_parameters_and_classes():
    torch.manual_seed(0)
    net = _Net()
    modules_before = dict(net.named_modules())
    params_before = dict(net.named_parameters())
    x = torch.randn(128, 64)
    offs = torch.tensor([32, 32, 64, 96], dtype=torch.int32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = net(x, offs)
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["proj", "block.fc1", "block.experts", "head"]
    skipped = {s.name: s.reason for s in summary.skipped}
    assert skipped == {
        "block.odd": "out_features=100 not a multiple of 32",
        "block.own": "overrides forward (_OwnForward.forward); only nn.Linear's own forward is converted",
        "router": "out_features=4 not a multiple of 32",
    }
    assert {o.name for o in summary.others} == {"", "embed", "block"}
    # In place: the same module objects under the same names, the same Parameter objects.
    assert dict(net.named_modules()) == modules_before
    assert dict(net.named_parameters()) == params_before
    assert all(a is b for a, b in zip(net.parameters(), params_before.values()))
    # nn.Linear becomes MXFP8Linear; a subclass becomes an MXFP8 subclass of itself, its methods kept.
    assert type(net.proj) is MXFP8Linear and type(net.head) is MXFP8Linear
    fc1 = net.block["fc1"]
    assert type(fc1).__name__ == "MXFP8_Plain" and isinstance(fc1, _Plain) and fc1.describe() == "mine"
    assert type(net.block["experts"]).__name__ == "MXFP8_MyExperts" and isinstance(net.block["experts"], _MyExperts)
    assert type(net.block["odd"]) is nn.Linear and type(net.block["own"]) is _OwnForward
    # The default recipe on every converted module, and in its repr.
    assert all(net.get_submodule(c.name).mxfp8_config == MXFP8Config() for c in summary.converted)
    assert repr(net.proj).endswith(f"bias=True, config={MXFP8Config()})")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(x, offs)
    assert sqnr(ref, out) >= 20
    text = str(summary)
    assert "4 converted, 3 skipped, 3 other modules" in text and "block.own" in text
    assert (
        "test_convert._Plain -> MXFP8_Plain" in text and "1 nn.Embedding, 1 nn.ModuleDict, 1 test_convert._Net" in text
    )


@pytest.mark.parametrize("autocast", [False, True], ids=["plain", "autocast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_converted_module_returns_what_the_module_it_replaced_would(dtype, autocast):
    """A converted Linear feeding one the converter skips (it overrides forward): the converted model runs in any
    precision, with and without autocast, and returns the dtypes the unconverted model returns (issue 48): the
    input's dtype without autocast, autocast's with it. Gradients reach every parameter in its own dtype."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 96), _OwnForward(96, 64)).to(dtype)
    net = copy.deepcopy(ref)
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["0"] and _names(summary.skipped) == ["1"]
    x = torch.randn(64, 64, dtype=dtype)
    results = []
    for model in (ref, net):
        xi = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            hidden = model[0](xi)
            y = model[1](hidden)
        y.float().square().sum().backward()
        results.append((hidden, y, xi.grad, [p.grad for p in model.parameters()]))
    (h_ref, y_ref, dx_ref, g_ref), (h, y, dx, g) = results
    assert h.dtype == h_ref.dtype == (torch.bfloat16 if autocast else dtype)
    assert y.dtype == y_ref.dtype and dx.dtype == dx_ref.dtype == dtype
    assert [t.dtype for t in g] == [t.dtype for t in g_ref] == [dtype] * 4
    assert sqnr(y_ref, y) >= 20 and sqnr(dx_ref, dx) >= 20
    assert all(sqnr(a, b) >= 20 for a, b in zip(g_ref, g))


def test_grouped_experts_and_dispatcher_return_the_input_or_autocast_dtype():
    """mxq.grouped_mm, the bf16 reference and the token dispatcher's combined output follow the same rule."""
    torch.manual_seed(0)
    x, w = torch.randn(96, 64), torch.randn(4, 32, 64) / 8
    offs = torch.tensor([32, 40, 40, 90], dtype=torch.int32)
    scores, ids = torch.rand(96, 2), torch.randint(0, 4, (96, 2))
    ws = [torch.randn(4, 64, 64) / 8 for _ in range(3)]
    d = mxq.TokenDispatcher(4)
    for dtype in (torch.float32, torch.bfloat16):
        for autocast in (False, True):
            want = torch.bfloat16 if autocast else dtype
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                xi = x.to(dtype)
                assert mxq.grouped_mm(xi, w, offs).dtype == want
                assert mxq.bf16_grouped_mm(xi, w, offs).dtype == want
                assert d.swiglu(d.dispatch(xi, scores, ids), *ws).dtype == want


def test_include_exclude_patterns_and_config():
    net = _Net()
    config = MXFP8Config.recipe("mxfp8_floor", weight_scaling="1x32")
    summary = mxq.nn.convert(net, config=config, include=["block.*", "head"], exclude="*.experts")
    assert _names(summary.converted) == ["block.fc1", "head"]
    reasons = {s.name: s.reason for s in summary.skipped}
    assert reasons["proj"] == "not matched by include ['block.*', 'head']"
    assert reasons["block.experts"] == "excluded by pattern '*.experts'"
    assert net.head.mxfp8_config is config and config.scaling_mode == "floor" and config.weight_scaling == "1x32"
    # Converting again: the MXFP8 modules are reported, not converted twice.
    again = mxq.nn.convert(net)
    assert {s.name: s.reason for s in again.skipped}["head"] == "already MXFP8"
    assert net.head.mxfp8_config is config
    assert "proj" in _names(again.converted) and "block.experts" in _names(again.converted)


def test_shared_module_converted_once_and_root_in_place():
    lin = nn.Linear(64, 64)
    net = nn.Sequential(lin, nn.ReLU(), lin)
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["0"]
    assert net[0] is lin and net[2] is lin and type(lin) is MXFP8Linear
    root = nn.Linear(64, 32)
    summary = mxq.nn.convert(root)
    assert _names(summary.converted) == [""] and type(root) is MXFP8Linear


def test_bad_arguments():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        mxq.nn.convert("model")
    with pytest.raises(TypeError, match="^mxq.nn.convert: config must be a mxq.MXFP8Config or None, got dict$"):
        mxq.nn.convert(nn.Sequential(), config={"weight_scaling": "32x32"})
    for field in ("include", "exclude"):
        for bad in (3, [3], ["a", None], {"a"}, b"head"):
            with pytest.raises(TypeError, match=f"^mxq.nn.convert: {field} must be a pattern string or a list of them"):
                mxq.nn.convert(nn.Sequential(), **{field: bad})


def test_a_pattern_string_is_one_pattern():
    """A string is one pattern, never a sequence of one-character patterns (which would match nothing with include,
    and everything with exclude through '*')."""
    summary = mxq.nn.convert(_Net(), include="head")
    assert _names(summary.converted) == ["head"]
    assert {s.name: s.reason for s in summary.skipped}["proj"] == "not matched by include ['head']"
    summary = mxq.nn.convert(_Net(), exclude="*.experts")
    assert "block.experts" not in _names(summary.converted) and "head" in _names(summary.converted)
    assert _names(mxq.nn.convert(_Net(), include=("head", "proj")).converted) == ["proj", "head"]


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

    class OnlyW1(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.zeros(2, 64, 32))

    net = nn.ModuleDict(
        {
            "bad": Bad(),
            "odd": Odd(),
            "plain": OnlyW1(),
            "unknown": _W123Unknown(2, 64, 96),
            "w123_odd": _W123Experts(2, 64, 48),
            "w123_shapes": _W123Experts(2, 64, 96),
        }
    )
    net["w123_shapes"].w2 = nn.Parameter(torch.zeros(2, 64, 64))
    summary = mxq.nn.convert(net)
    reasons = {s.name: s.reason for s in summary.skipped}
    assert summary.converted == []
    assert "w1 (G, H, D), w2 (G, D, H) and w3 (G, H, D) must agree" in reasons["bad"]
    assert reasons["odd"] == "hidden_dim=48 not a multiple of 32"
    assert reasons["unknown"] == (
        "forward's second argument 'groups' is neither token counts (num_tokens*, counts*) nor offsets (offs*)"
    )
    assert reasons["w123_odd"] == "w1.shape[1]=48 not a multiple of 32"
    assert reasons["w123_shapes"].startswith("w1 (2, 96, 64), w2 (2, 64, 64) and w3 (2, 96, 64) are not SwiGLU")
    assert "plain" not in reasons and "plain" in {o.name for o in summary.others}


def _counts(sizes, device):
    return torch.tensor(sizes, dtype=torch.int64, device=device)


def _swiglu(x, w1, w2, w3, offs, config=None, bf16=False):
    """The experts' function on mxq.grouped_mm, called directly: what a converted module must equal bitwise. With
    ``bf16``, each GEMM gets bf16 operands and the result comes back in x's dtype, as TorchTitan's seam experts do."""

    def mm(a, w):
        return mxq.grouped_mm(a.bfloat16() if bf16 else a, w, offs, config=config)

    return mm(F.silu(mm(x, w1)) * mm(x, w3), w2).type_as(x)


def _forward_backward(fn, x, params, seed):
    x = x.clone().requires_grad_(True)
    for p in params:
        p.grad = None
    y = fn(x)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y)
    y.backward(dy)
    return (y.detach(), x.grad, *(p.grad.clone() for p in params))


# Group sizes as a token-choice dispatcher hands them over: none a multiple of 32, an empty group.
SIZES = [37, 0, 70, 5]


@pytest.mark.parametrize("device", DEVICES)
def test_seam_experts_equal_direct_grouped_mm(device):
    """TorchTitan 0.3-style experts: only the seam is replaced; forward and backward equal mxq.grouped_mm called
    with the same weights and offsets, bitwise, for groups of any size."""
    torch.manual_seed(1)
    e = _SeamExperts(4, 64, 96).to(device)
    holder = nn.ModuleDict({"experts": e})
    config = MXFP8Config(activation_quantization_backend="composed")
    summary = mxq.nn.convert(holder, config=config)
    assert summary.converted[0].detail.startswith("the _grouped_mm seam: w1_EFD (4, 96, 64)")
    assert holder["experts"] is e and type(e).__name__ == "MXFP8_SeamExperts" and e.init_weights() == "initialized"
    x = torch.randn(sum(SIZES) + 3, 64, device=device)  # 3 tail rows past the groups
    counts = _counts(SIZES, device)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    params = [e.w1_EFD, e.w2_EDF, e.w3_EFD]
    got = _forward_backward(lambda t: e(t, counts), x, params, 0)
    want = _forward_backward(lambda t: _swiglu(t, e.w1_EFD, e.w2_EDF, e.w3_EFD, offs, config, bf16=True), x, params, 0)
    assert_outputs_equal(got, want, strides=False)
    assert got[0][-3:].abs().max() == 0 and got[1][-3:].abs().max() == 0  # the tail


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [_W123Experts, _W123Offs], ids=["counts", "offs"])
@pytest.mark.parametrize("transposed", [False, True], ids=["out_in", "in_out"])
def test_w123_experts_equal_direct_grouped_mm(device, cls, transposed):
    """TorchTitan 0.2-style experts (3-D w1/w2/w3): the forward replaced by SwiGLU on mxq.grouped_mm; counts or
    offsets, either weight orientation (read from x's width), bitwise what direct calls give."""
    torch.manual_seed(2)
    e = cls(4, 64, 96, transposed=transposed).to(device)
    summary = mxq.nn.convert(nn.ModuleDict({"e": e}))
    assert _names(summary.converted) == ["e"] and "(out, in) or transposed" in summary.converted[0].detail
    x = torch.randn(sum(SIZES), 64, device=device)
    counts = _counts(SIZES, device)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    params = [e.w1, e.w2, e.w3]
    got = _forward_backward(lambda t: e(t, counts if cls is _W123Experts else offs), x, params, 3)

    def direct(t):
        w1, w2, w3 = (w.transpose(-2, -1) if transposed else w for w in (e.w1, e.w2, e.w3))
        return _swiglu(t, w1, w2, w3, offs)

    assert_outputs_equal(got, _forward_backward(direct, x, params, 3), strides=False)


def test_w123_square_experts_assume_out_in():
    e = _W123Experts(2, 64, 64)
    summary = mxq.nn.convert(nn.ModuleDict({"e": e}))
    assert "(out, in) assumed: dim == hidden_dim" in summary.converted[0].detail


@pytest.mark.parametrize("device", DEVICES)
def test_marker_experts_equal_mxfp8_grouped_experts(device):
    """A user's marker module and mxq's own GroupedExperts, converted, compute what MXFP8GroupedExperts does with the
    same parameters."""
    torch.manual_seed(3)
    mine = _MyExperts(4, 64, 96).to(device)
    ours = GroupedExperts(4, 64, 96, device=device)
    with torch.no_grad():
        for n in ("w1", "w2", "w3"):
            getattr(ours, n).copy_(getattr(mine, n))
    holder = nn.ModuleDict({"mine": mine, "ours": ours})
    mxq.nn.convert(holder)
    assert type(ours) is MXFP8GroupedExperts and type(mine).__name__ == "MXFP8_MyExperts"
    x = torch.randn(sum(SIZES), 64, device=device)
    offs = torch.cumsum(_counts(SIZES, device), 0, dtype=torch.int32)
    got = _forward_backward(lambda t: mine(t, offs), x, [mine.w1, mine.w2, mine.w3], 4)
    want = _forward_backward(lambda t: ours(t, offs), x, [ours.w1, ours.w2, ours.w3], 4)
    assert_outputs_equal(got, want, strides=False)


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


def _train_moe_module(monkeypatch):
    """examples/train_moe.py imported as a module (its main not run)."""
    spec = importlib.util.spec_from_file_location("train_moe", os.path.join(REPO, "examples", "train_moe.py"))
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_moe", example)  # its dataclasses look their module up there
    spec.loader.exec_module(example)
    return example


def test_train_moe_example_language_is_a_function_of_the_seed(monkeypatch):
    """The example's synthetic language (hence its batches and the entropy floor it prints) depends on --seed alone,
    not on the global RNG: two calls with one seed agree whatever the global state, and another seed differs."""
    example = _train_moe_module(monkeypatch)
    cfg = example.TINY
    torch.manual_seed(1)
    a, _ = example.make_language(cfg, 0)
    torch.manual_seed(2)
    b, _ = example.make_language(cfg, 0)
    c, _ = example.make_language(cfg, 1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    torch.testing.assert_close(a[..., -1], torch.ones_like(a[..., -1]))  # each row a distribution


@pytest.mark.parametrize(("recipe", "label"), [("mxfp8_rceil", "mxfp8"), ("fp8_blockwise", "fp8bw")])
def test_train_moe_example_cpu_smoke(tmp_path, recipe, label):
    """examples/train_moe.py, tiny config, 5 steps per run on the CPU in each format: both runs (the converted one
    labelled by its format), the JSON, exit status 0."""
    script = os.path.join(REPO, "examples", "train_moe.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.dirname(os.path.dirname(mxq.__file__)), env.get("PYTHONPATH")) if p
    )
    cmd = [sys.executable, script, "--tiny", "--steps", "5", "--device", "cpu", "--out-dir", str(tmp_path)]
    cmd += ["--log-every", "1", "--tolerance", "0.05", "--recipe", recipe]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[bf16] step     5/5" in proc.stdout and f"[{label}] step     5/5" in proc.stdout
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["recipe"] == recipe and result["label"] == label
    assert len(result["bf16"]["losses"]) == len(result[label]["losses"]) == 5
    assert result["within_tolerance"] and abs(result[f"ratio_{label}_over_bf16"] - 1) <= 0.05
    assert result[f"tokens_per_s_{label}_over_bf16"] > 0
    assert {c["name"] for c in result["conversion"]["converted"]} >= {"head", "blocks.1.ffn.experts"}
    assert {s["name"] for s in result["conversion"]["skipped"]} == {"blocks.1.ffn.router"}


def test_train_moe_example_checks_the_recipe_block(monkeypatch, capsys, tmp_path):
    """A width that is not a multiple of the recipe's block is an argument error (exit 2) naming it, before any
    training: 64 fits MXFP8's 32 but not FP8 blockwise's 128."""
    example = _train_moe_module(monkeypatch)
    monkeypatch.setattr(example, "TINY", dataclasses.replace(example.TINY, dim=64))
    with pytest.raises(SystemExit) as e:
        example.main(
            ["--tiny", "--steps", "1", "--device", "cpu", "--recipe", "fp8_blockwise", "--out-dir", str(tmp_path)]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "multiples of 128" in err and "dim = 64" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_multihead_attention_out_proj_is_skipped():
    """nn.MultiheadAttention reads out_proj's weight itself (F.multi_head_attention_forward) and never calls its
    forward: converting it would change nothing, so the summary says so instead of claiming it."""
    net = nn.ModuleDict({"attn": nn.MultiheadAttention(64, 4), "fc": nn.Linear(64, 64)})
    summary = mxq.nn.convert(net)
    assert _names(summary.converted) == ["fc"]
    assert {s.name: s.reason for s in summary.skipped} == {
        "attn.out_proj": "nn.MultiheadAttention's out_proj: its parent reads the weight itself, never calls its forward"
    }
