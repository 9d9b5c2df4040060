"""mxq with TorchTitan's own models (docs/training.md, "With TorchTitan"), on the CPU: the conversion summaries of the
DeepSeek-V3, Qwen3-MoE and Llama3 debug models (everything converted but the router gates), through mxq.nn.convert and
through the converter TorchTitan's model registries take (MXQConverter.Config in `converters`, which also swaps the MoE
blocks' token dispatcher for mxq.TokenDispatcher); the converted model's forward; and a converted MoE block's forward
and backward bitwise equal to the same block computed by calling mxq's pieces directly, with mxq's dispatcher
(DeepSeek-V3 and Qwen3) and without it (TorchTitan's dispatcher, mxq.grouped_mm). CI installs torchtitan 0.3.0 (scripts/test.sh); these tests skip, saying so, where it is missing."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")
pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/test.sh installs torchtitan 0.3.0)")

import mxq
import torch
import torch.nn.functional as F
from helpers import sqnr
from mxq import MXFP8Config

titan = pytest.importorskip(
    "mxq.integrations.torchtitan", reason="this torchtitan is not 0.3.x (the version mxq.integrations.torchtitan takes)"
)

if torch.torch_version.TorchVersion(torch.__version__) < "2.12":
    pytest.skip(
        "torchtitan 0.3's models need torch >= 2.12 (DataParallelMeshDims, flex attention's create_block_mask); "
        "examples/train_torchtitan.py runs them on torch 2.11 with a placeholder and causal SDPA",
        allow_module_level=True,
    )

from torchtitan.models import deepseek_v3, llama3, qwen3
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.moe import GroupedExperts, RoutedExperts
from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

MODELS = {
    "deepseek_v3": (deepseek_v3, "debugmodel"),
    "qwen3_moe": (qwen3, "debugmodel_moe"),
    "llama3": (llama3, "debugmodel"),
}
# (converted, skipped) by mxq.nn.convert alone: DeepSeek-V3's router gates have 8 outputs (not a multiple of 32);
# Qwen3-MoE's have 64 and are converted.
PLAIN = {"deepseek_v3": (48, 5), "qwen3_moe": (33, 0), "llama3": (31, 0)}
# Through the converter, whose default also excludes the router gates (TorchTitan computes router scores in fp32) and
# swaps the token dispatcher of every MoE block (DeepSeek-V3: 5, Qwen3-MoE: 8).
CONVERTER = {"deepseek_v3": (53, 5), "qwen3_moe": (33, 8), "llama3": (31, 0)}
MOE_BLOCKS = {"deepseek_v3": 5, "qwen3_moe": 8, "llama3": 0}
ROUTED = "fused"  # the converter's default routed quantization


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
    model = _build(name, converters=[titan.MXQConverter.Config(routed_quantization=ROUTED)])
    summary = titan.last_summary
    assert (len(summary.converted), len(summary.skipped)) == CONVERTER[name]
    assert all(s.name.endswith("router.gate") for s in summary.skipped)
    assert all(model.get_submodule(c.name).mxfp8_config == MXFP8Config() for c in summary.converted)
    blocks = [c for c in summary.converted if c.target == "MXFP8RoutedExperts"]
    assert len(blocks) == MOE_BLOCKS[name]
    for c in blocks:
        m = model.get_submodule(c.name)
        assert isinstance(m, RoutedExperts) and isinstance(m.token_dispatcher, mxq.TokenDispatcher)
        assert m.token_dispatcher.routed_quantization == ROUTED and m.token_dispatcher.config == MXFP8Config()
        assert c.detail.startswith("token_dispatcher AllToAllTokenDispatcher -> mxq.TokenDispatcher")
    assert not any(o.type.endswith("RoutedExperts") for o in summary.others)
    # Another recipe, no exclusions, TorchTitan's dispatcher kept.
    _build(name, converters=[titan.MXQConverter.Config(recipe="mxfp8_floor", exclude=[], token_dispatcher=False)])
    assert len(titan.last_summary.converted) == PLAIN[name][0]
    assert titan.last_summary.converted[0] and all(
        model.get_submodule(c.name).mxfp8_config == MXFP8Config() for c in summary.converted
    )


CONFIG = "^mxq.integrations.torchtitan.MXQConverter.Config: "


def test_converter_rejects_a_bad_recipe_before_any_build():
    with pytest.raises(
        ValueError, match=CONFIG + 'recipe must be "mxfp8_rceil", "mxfp8_floor", "mxfp8_rceil_1x32", "fp8_blockwise" or'
    ):
        deepseek_v3.model_registry("debugmodel", converters=[titan.MXQConverter.Config(recipe="fp8")])
    with pytest.raises(ValueError, match=CONFIG + 'routed_quantization must be "fused" or "composed", got "x"'):
        deepseek_v3.model_registry("debugmodel", converters=[titan.MXQConverter.Config(routed_quantization="x")])
    with pytest.raises(ValueError, match=CONFIG + 'routed_quantization "unfused" was renamed "composed"'):
        titan.MXQConverter.Config(routed_quantization="unfused")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("include", 5, "include must be a pattern string or a list of them, got 5"),
        ("exclude", 5, "exclude must be a pattern string or a list of them, got 5"),
        ("exclude", ["*gate", 5], r"exclude must be a pattern string or a list of them, got \['\*gate', 5\]"),
        ("token_dispatcher", "no", "token_dispatcher must be a bool, got str"),
        ("token_dispatcher", 1, "token_dispatcher must be a bool, got int"),
        ("model_compile_enabled", "yes", "model_compile_enabled must be a bool, got str"),
        ("recipe", 3, "recipe must be a str, got int"),
        ("routed_quantization", None, "routed_quantization must be a str, got NoneType"),
    ],
)
def test_converter_config_fields_are_checked_when_made(field, value, message):
    with pytest.raises(TypeError, match=CONFIG + message):
        titan.MXQConverter.Config(**{field: value})


def test_converter_config_takes_one_pattern_as_a_string():
    """A string is one pattern (it used to be iterated as characters: include="lm_head" converted nothing,
    exclude="*router.gate" everything away through '*')."""
    config = titan.MXQConverter.Config(include="layers.1.*", exclude="*router.gate")
    assert config.include == ["layers.1.*"] and config.exclude == ["*router.gate"]
    _build("deepseek_v3", converters=[titan.MXQConverter.Config(include="layers.1.*", routed_quantization=ROUTED)])
    converted = [c.name for c in titan.last_summary.converted]
    assert converted and all(n.startswith("layers.1.") for n in converted), converted
    skipped = {s.name: s.reason for s in titan.last_summary.skipped}
    assert skipped["layers.1.moe.router.gate"] == "excluded by pattern '*router.gate'"
    assert skipped["layers.2.attention.wkv_a"] == "not matched by include ['layers.1.*']"


def test_dispatcher_not_swapped_without_converted_experts():
    """A MoE block whose experts stay bf16 (excluded) keeps TorchTitan's dispatcher, and the summary says why."""
    model = _build(
        "deepseek_v3",
        converters=[titan.MXQConverter.Config(exclude=["*experts*", "*router.gate"], routed_quantization=ROUTED)],
    )
    skipped = {s.name: s.reason for s in titan.last_summary.skipped}
    assert (
        skipped["layers.1.moe.routed_experts"] == "token dispatcher not swapped: its inner experts were not converted"
    )
    assert type(model.layers["1"].moe.routed_experts) is RoutedExperts


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


def _shared(moe, x):
    s = moe.shared_experts
    if s is None:
        return 0
    lin = mxq.mxfp8_linear
    return lin(F.silu(lin(x, s.w1.weight)) * lin(x, s.w3.weight), s.w2.weight)


def _moe_with_titan_dispatcher(moe, x):
    """TorchTitan's MoE.forward (routing, its local dispatch, experts, its combine, shared experts) with the experts
    and the shared experts computed by calling mxq.grouped_mm and mxq.mxfp8_linear directly."""
    B, _, D = x.shape
    scores, ids, scores_full = moe.router(x, moe.expert_bias_E)
    counts = torch.zeros_like(scores_full, dtype=torch.bool).scatter_(-1, ids, True).sum(dim=(0, 1))
    dispatcher = moe.routed_experts.token_dispatcher
    K = scores.shape[-1]
    if isinstance(dispatcher, mxq.TokenDispatcher):  # the converter swapped it: TorchTitan's local one, built here
        dispatcher = LocalTokenDispatcher(LocalTokenDispatcher.Config(num_experts=dispatcher.num_experts, top_k=K))
    routed, counts_e, meta = dispatcher.dispatch(x.view(-1, D), scores.view(-1, K), ids.view(-1, K), counts)
    offs = torch.cumsum(counts_e, dim=0, dtype=torch.int32)
    e = moe.routed_experts.inner_experts
    w1, w2, w3 = (w.bfloat16() for w in (e.w1_EFD, e.w2_EDF, e.w3_EFD))
    h = F.silu(mxq.grouped_mm(routed.bfloat16(), w1, offs)) * mxq.grouped_mm(routed.bfloat16(), w3, offs)
    y = mxq.grouped_mm(h, w2, offs).type_as(routed)
    out = dispatcher.combine(y, meta, x.view(-1, D)).view(B, -1, D)
    return out + _shared(moe, x)


def _moe_with_mxq_dispatcher(moe, x):
    """TorchTitan's MoE.forward with mxq's pieces called directly: the router, mxq.TokenDispatcher's dispatch, SwiGLU
    experts on the dispatched operands and combine, the shared experts on mxq.mxfp8_linear."""
    B, L, D = x.shape
    scores, ids, _ = moe.router(x, moe.expert_bias_E)
    e = moe.routed_experts.inner_experts
    d = mxq.TokenDispatcher(e.num_experts, routed_quantization=ROUTED)
    K = scores.shape[-1]
    routed = d.dispatch(x.reshape(B * L, D), scores.reshape(B * L, K), ids.reshape(B * L, K))
    out = d.swiglu(routed, e.w1_EFD, e.w2_EDF, e.w3_EFD).view(B, L, D)
    return out + _shared(moe, x)


def _block_and_reference(moe, reference, x, dy):
    params = [p for p in moe.parameters() if p.requires_grad]
    results = []
    for fn in (moe, lambda t: reference(moe, t)):
        xi = x.clone().requires_grad_(True)
        for p in params:
            p.grad = None
        y = fn(xi)
        y.backward(dy)
        results.append((y.detach(), xi.grad, [p.grad.clone() for p in params]))
    return results


@pytest.mark.parametrize(
    "name, layer, dispatcher",
    [
        ("deepseek_v3", "1", "mxq"),
        ("qwen3_moe", "0", "mxq"),
        ("deepseek_v3", "1", "torchtitan"),
    ],
)
def test_converted_moe_block_equals_mxq_pieces_called_directly(name, layer, dispatcher):
    """One converted MoE block, forward and backward (output, input gradient, every parameter's gradient: router
    gate, experts, shared experts), bitwise equal to the same block computed by calling mxq's pieces directly: with
    the converter's mxq.TokenDispatcher (routed x quantized once, d(routed y) with the scores in one pass), and with
    TorchTitan's own dispatcher kept (token_dispatcher=False: mxq.grouped_mm pads the groups). The groups TorchTitan's
    router produces have any size."""
    torch.manual_seed(0)
    converter = titan.MXQConverter.Config(routed_quantization=ROUTED, token_dispatcher=dispatcher == "mxq")
    model = _build(name, converters=[converter], device="cpu")
    model.init_states(buffer_device=None)
    moe = model.layers[layer].moe
    assert isinstance(moe.routed_experts.token_dispatcher, mxq.TokenDispatcher) == (dispatcher == "mxq")
    D = moe.routed_experts.inner_experts.w1_EFD.shape[-1]
    x = torch.randn(2, 48, D)
    dy = torch.randn(2, 48, D)
    reference = _moe_with_mxq_dispatcher if dispatcher == "mxq" else _moe_with_titan_dispatcher
    (y0, dx0, g0), (y1, dx1, g1) = _block_and_reference(moe, reference, x, dy)
    E = moe.routed_experts.inner_experts.num_experts
    counts = torch.bincount(moe.router(x, moe.expert_bias_E)[1].flatten(), minlength=E)
    assert (counts % 32 != 0).any(), counts  # groups of any size reached the experts
    assert torch.equal(y0, y1) and torch.equal(dx0, dx1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    assert all(g.abs().sum() > 0 for g in g0)
    if dispatcher == "mxq":  # and it is mxq's math, not TorchTitan's dispatcher: close to that, not equal
        _, (y2, _, _) = _block_and_reference(moe, _moe_with_titan_dispatcher, x, dy)
        assert sqnr(y2, y0) >= 30
