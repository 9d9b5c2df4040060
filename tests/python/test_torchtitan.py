"""mxq with TorchTitan's own models (docs/training.md, "With TorchTitan"), on the CPU: the conversion summaries of the
DeepSeek-V3, Qwen3-MoE and Llama3 debug models (everything converted but the router gates), through mxq.nn.convert and
through the converter TorchTitan's model registries take (MXQConverter.Config in `converters`); the converted model's
forward; and a converted MoE block's forward and backward bitwise equal to the same block computed by calling mxq's
layers directly. CI installs torchtitan 0.3.0 (scripts/test.sh); these tests skip, saying so, where it is missing."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")
pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/test.sh installs torchtitan 0.3.0)")

import mxq
import torch
import torch.nn.functional as F
from mxq import MXFP8Config
from test_linear import sqnr

titan = pytest.importorskip(
    "mxq.integrations.torchtitan", reason="this torchtitan has no model-config converters (torchtitan >= 0.3)"
)
if not hasattr(titan.MXQConverter.Config, "model_compile_enabled"):
    pytest.skip("torchtitan < 0.3: the device's training run covers 0.2", allow_module_level=True)

from torchtitan.models import deepseek_v3, llama3, qwen3
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.moe import GroupedExperts

MODELS = {
    "deepseek_v3": (deepseek_v3, "debugmodel"),
    "qwen3_moe": (qwen3, "debugmodel_moe"),
    "llama3": (llama3, "debugmodel"),
}
# (converted, skipped) by mxq.nn.convert alone: DeepSeek-V3's router gates have 8 outputs (not a multiple of 32);
# Qwen3-MoE's have 64 and are converted.
PLAIN = {"deepseek_v3": (48, 5), "qwen3_moe": (33, 0), "llama3": (31, 0)}
# Through the converter, whose default also excludes the router gates (TorchTitan computes router scores in fp32).
CONVERTER = {"deepseek_v3": (48, 5), "qwen3_moe": (25, 8), "llama3": (31, 0)}


def _build(name, converters=None, device="meta"):
    module, flavor = MODELS[name]
    spec = module.model_registry(flavor, attn_backend="flex", converters=converters)
    with torch.device(device):
        return spec.model.build()


@pytest.mark.parametrize("name", MODELS)
def test_convert_summary_of_torchtitan_debug_models(name):
    model = _build(name)
    candidates = {n for n, m in model.named_modules() if isinstance(m, (Linear, GroupedExperts))}
    summary = mxq.nn.convert(model)
    print(f"\n{name}:\n{summary}")
    assert (len(summary.converted), len(summary.skipped)) == PLAIN[name]
    assert {c.name for c in summary.converted} | {s.name for s in summary.skipped} == candidates
    for s in summary.skipped:  # only router gates, and only for their dimension
        assert s.name.endswith("router.gate") and s.reason == "out_features=8 not a multiple of 32", s
    experts = [c for c in summary.converted if c.target == "MXFP8GroupedExperts"]
    assert experts and all(c.detail.startswith("the _grouped_mm seam: w1_EFD") for c in experts) or name == "llama3"
    # Converted in place: TorchTitan's Module protocol still holds, its classes still match.
    model.verify_module_protocol()
    assert all(isinstance(model.get_submodule(c.name), (Linear, GroupedExperts)) for c in summary.converted)


@pytest.mark.parametrize("name", MODELS)
def test_converter_in_the_model_registry(name):
    model = _build(name, converters=[titan.MXQConverter.Config()])
    summary = titan.last_summary
    assert (len(summary.converted), len(summary.skipped)) == CONVERTER[name]
    assert all(s.name.endswith("router.gate") for s in summary.skipped)
    assert all(model.get_submodule(c.name).mxfp8_config == MXFP8Config() for c in summary.converted)
    # Another recipe and no exclusions.
    _build(name, converters=[titan.MXQConverter.Config(recipe="mxfp8_floor", exclude=[])])
    assert len(titan.last_summary.converted) == PLAIN[name][0]
    assert titan.last_summary.converted[0] and all(
        model.get_submodule(c.name).mxfp8_config == MXFP8Config() for c in summary.converted
    )


def test_converter_rejects_a_bad_recipe_before_any_build():
    with pytest.raises(ValueError, match='^mxq.MXFP8Config.recipe: name must be "mxfp8_rceil", "mxfp8_floor" or'):
        deepseek_v3.model_registry("debugmodel", converters=[titan.MXQConverter.Config(recipe="fp8")])


def _tokens(B, L, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (B, L), generator=g), torch.arange(L).repeat(B, 1)


def test_converted_deepseek_forward():
    """The whole converted DeepSeek-V3 debug model runs forward on the CPU (FlexAttention has no CPU backward) and
    stays close to the same model unconverted."""
    torch.manual_seed(0)
    model = _build("deepseek_v3", device="cpu")
    model.init_states(buffer_device=None)
    tokens, positions = _tokens(1, 64, 0)
    masks = model.get_attention_masks(positions)
    with torch.no_grad():
        ref = model(tokens, positions=positions, attention_masks=masks)
        summary = mxq.nn.convert(model)
        out = model(tokens, positions=positions, attention_masks=masks)
    assert len(summary.converted) == 48
    assert out.shape == (1, 64, 2048) and torch.isfinite(out).all()
    assert sqnr(ref, out) >= 15


def _moe_reference(moe, x):
    """TorchTitan's MoE.forward (routing, local dispatch, experts, combine, shared experts) with the experts and the
    shared experts computed by calling mxq.grouped_mm and mxq.mxfp8_linear directly."""
    B, _, D = x.shape
    scores, ids, scores_full = moe.router(x, moe.expert_bias_E)
    counts = torch.zeros_like(scores_full, dtype=torch.bool).scatter_(-1, ids, True).sum(dim=(0, 1))
    dispatcher = moe.routed_experts.token_dispatcher
    K = scores.shape[-1]
    routed, counts_e, meta = dispatcher.dispatch(x.view(-1, D), scores.view(-1, K), ids.view(-1, K), counts)
    offs = torch.cumsum(counts_e, dim=0, dtype=torch.int32)
    e = moe.routed_experts.inner_experts
    w1, w2, w3 = (w.bfloat16() for w in (e.w1_EFD, e.w2_EDF, e.w3_EFD))
    h = F.silu(mxq.grouped_mm(routed.bfloat16(), w1, offs)) * mxq.grouped_mm(routed.bfloat16(), w3, offs)
    y = mxq.grouped_mm(h, w2, offs).type_as(routed)
    out = dispatcher.combine(y, meta, x.view(-1, D)).view(B, -1, D)
    s = moe.shared_experts
    lin = mxq.mxfp8_linear
    return out + lin(F.silu(lin(x, s.w1.weight)) * lin(x, s.w3.weight), s.w2.weight)


def test_converted_moe_block_equals_mxq_layers_called_directly():
    """One converted DeepSeek-V3 MoE block, forward and backward, bitwise equal to the reference on mxq's layers: the
    token groups TorchTitan's local dispatcher produces have any size, so the padding path is on."""
    torch.manual_seed(0)
    model = _build("deepseek_v3", converters=[titan.MXQConverter.Config()], device="cpu")
    model.init_states(buffer_device=None)
    moe = model.layers["1"].moe
    x = torch.randn(2, 48, 256)
    params = [p for p in moe.parameters() if p.requires_grad]
    dy = torch.randn(2, 48, 256)
    results = []
    for fn in (moe, lambda t: _moe_reference(moe, t)):
        xi = x.clone().requires_grad_(True)
        for p in params:
            p.grad = None
        y = fn(xi)
        y.backward(dy)
        results.append((y.detach(), xi.grad, [p.grad.clone() for p in params]))
    (y0, dx0, g0), (y1, dx1, g1) = results
    counts = torch.bincount(moe.router(x, moe.expert_bias_E)[1].flatten(), minlength=8)
    assert (counts % 32 != 0).any(), counts  # groups of any size reached the experts
    assert torch.equal(y0, y1) and torch.equal(dx0, dx1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    assert all(g.abs().sum() > 0 for g in g0)
