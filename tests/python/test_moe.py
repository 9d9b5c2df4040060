"""mxq.grouped_mm and MXFP8GroupedExperts (docs/training.md): the numerics bars against a bf16 grouped GEMM with the
same weights at G = 8 with uneven 32-multiple groups, an empty group and a padding tail; bitwise-identical outputs
and gradients between the "fused" and "composed" backends; the operands and layouts of each GEMM (byte-exact against
explicit op calls); the tail (output 0, gradient 0, NaN there changes nothing else) and empty groups (dW 0); the
per-group fallback; torch.compile(fullgraph=True); a CUDA-graph-captured training step; the error cases. CPU dispatch
(the C++ reference ops, the emulated grouped GEMM) everywhere, CUDA where present."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import copy
import math
import subprocess
import sys

import mxq
import mxq._gemm
import mxq.linear
import mxq.moe
import torch
from helpers import (
    DEVICES,
    WEIGHT_SCALINGS,
    assert_graph_replay_matches_eager,
    assert_outputs_equal,
    check_backends_and_bars,
    check_scaling_mode_explicit,
    record_ops,
    requires_cuda,
    sqnr,
)
from mxq import GroupedExperts, MXFP8Config, MXFP8GroupedExperts, bf16_grouped_mm, grouped_mm

# G = 8: uneven 32-multiple groups, an empty one (index 2), and a 128-row tail past offs[-1].
SIZES = [96, 160, 0, 64, 224, 32, 128, 192]
TAIL = 128
# G = 8 as a token-choice dispatcher hands them over: sizes of any kind (1, 31, 33, 100), an empty group.
ANY_SIZES = [37, 100, 0, 1, 31, 33, 64, 70]


def _offs(sizes, device):
    return torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)


def _data(device, K, N, sizes=SIZES, tail=TAIL, seed=0):
    g = torch.Generator().manual_seed(seed)
    M = sum(sizes) + tail
    x = torch.randn(M, K, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(len(sizes), N, K, generator=g) / math.sqrt(K)).to(device, torch.bfloat16)
    dy = torch.randn(M, N, generator=g).to(device, torch.bfloat16)
    return x, w, dy, _offs(sizes, device)


def _run(fn, x, w, dy):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    y = fn(x, w)
    y.backward(dy)
    return y.detach(), x.grad, w.grad


def _check(device, K, N, weight_scaling):
    x, w, dy, offs = _data(device, K, N)
    return check_backends_and_bars(
        lambda config: _run(lambda a, b: grouped_mm(a, b, offs, config=config), x, w, dy),
        _run(lambda a, b: bf16_grouped_mm(a, b, offs), x, w, dy),
        MXFP8Config,
        weight_scaling,
        device,
    )


@pytest.mark.parametrize("weight_scaling", WEIGHT_SCALINGS)
@pytest.mark.parametrize("device", DEVICES)
def test_numerics_bars_and_backends(device, weight_scaling):
    # M = 1024 tokens (896 in groups + a 128-row tail), K = 1024, N = 2048 experts, G = 8.
    figures = _check(device, 1024, 2048, weight_scaling)
    print(f"grouped_mm {device} {weight_scaling}: SQNR y/dx/dW = " + " / ".join(f"{s:.2f}" for s in figures))


@pytest.mark.parametrize("weight_scaling", WEIGHT_SCALINGS)
def test_numerics_bars_small_cpu(weight_scaling):
    # The same bars at a small shape (quick on the CPU dispatch): K = 256, N = 128.
    figures = _check("cpu", 256, 128, weight_scaling)
    print(f"grouped_mm cpu small {weight_scaling}: SQNR y/dx/dW = " + " / ".join(f"{s:.2f}" for s in figures))


def _dequantize_experts_one_by_one(q, s):
    """bf16 (G, R, C) from per-expert data and per-expert blocked scales, one 2-D blocked dequantize per expert."""
    G, R, C = q.shape
    rows, cols = -(-R // 128) * 128, -(-(C // 32) // 4) * 4
    return torch.stack([torch.ops.mxq.dequantize(q[g], s[g].view(rows, cols), None, "blocked") for g in range(G)])


@pytest.mark.parametrize("scaling_mode", ["rceil", "floor"])
@pytest.mark.parametrize("weight_scaling", WEIGHT_SCALINGS)
@pytest.mark.parametrize("device", DEVICES)
def test_gemm_operands_bytes(device, weight_scaling, scaling_mode):
    """Each grouped GEMM consumes exactly the operands and layouts of the table in mxq/moe.py: y, dx, dW equal
    bf16 grouped GEMMs of explicitly quantized and dequantized operands (M-groups, K-groups, per-expert blocked), bit
    for bit. N = 96 is not a multiple of 128, so the per-expert scale regions have padding."""
    ops = torch.ops.mxq
    x, w, dy, offs = _data(device, 64, 96, seed=2)
    config = MXFP8Config(weight_scaling=weight_scaling, scaling_mode=scaling_mode, gemm="emulated")
    got = _run(
        lambda a, b: grouped_mm(a, b, offs, config=config),
        x,
        w,
        dy,
    )
    q_x, s_x = ops.quantize_rowwise(x, 32, scaling_mode, offs)  # M-groups s_row
    q_w, s_w, q_w_col, s_w_col = ops.quantize_weight(
        w, scaling_mode=scaling_mode, weight_scaling=weight_scaling, rowwise=True, colwise=True
    )
    q_dy, s_dy, q_dy_col, s_dy_col = ops.quantize(dy, 32, scaling_mode, offs)  # M-groups s_row, K-groups s_col
    q_x_col, s_x_col = ops.quantize_colwise(x, 32, scaling_mode, offs)  # K-groups s_col
    w_row = _dequantize_experts_one_by_one(q_w, s_w)  # (G, N, K), along K
    w_col = _dequantize_experts_one_by_one(q_w_col.transpose(-2, -1), s_w_col)  # (G, K, N), along N
    covered = (torch.arange(x.shape[0], device=device) < offs[-1]).unsqueeze(1)
    nonempty = (torch.diff(offs, prepend=offs.new_zeros(1)) > 0).view(-1, 1, 1)
    zero = torch.zeros((), dtype=torch.bfloat16, device=device)
    gmm = torch._grouped_mm
    y = gmm(ops.dequantize(q_x, s_x, offs, "m_groups"), w_row.transpose(-2, -1), offs=offs)
    dx = gmm(ops.dequantize(q_dy, s_dy, offs, "m_groups"), w_col.transpose(-2, -1), offs=offs)
    dw = gmm(
        ops.dequantize(q_dy_col.t(), s_dy_col, offs, "k_groups"),
        ops.dequantize(q_x_col.t(), s_x_col, offs, "k_groups").t(),
        offs=offs,
    )
    expected = (torch.where(covered, y, zero), torch.where(covered, dx, zero), torch.where(nonempty, dw, zero))
    assert_outputs_equal(got, expected, ("y", "dx", "dW"), f"{weight_scaling} {scaling_mode}: ", strides=False)
    if weight_scaling == "32x32":  # one byte set serves the forward and dgrad operands
        assert torch.equal(w_row.view(torch.int16), w_col.transpose(-2, -1).view(torch.int16))


@pytest.mark.parametrize("scaling_mode", ["rceil", "floor"])
def test_scaling_mode_passed_explicitly_to_every_op(monkeypatch, scaling_mode):
    calls = record_ops(monkeypatch)
    x, w, dy, offs = _data("cpu", 64, 64)
    _run(lambda a, b: grouped_mm(a, b, offs, config=MXFP8Config(scaling_mode=scaling_mode)), x, w, dy)
    names = [c[0] for c in calls]
    assert names.count("quantize_weight") == 1 and "quantize" in names and "quantize_colwise" in names, names
    assert {c[3] for c in (call[1] for call in calls if call[0] == "dequantize")} == {"m_groups", "k_groups"}
    check_scaling_mode_explicit(calls, scaling_mode)


@pytest.mark.parametrize("device", DEVICES)
def test_tail_and_empty_groups(device):
    """Tail rows: output 0 and input gradient 0; NaN/Inf in the tail rows of x and dy change nothing else, bit for
    bit (the tail's tokens are in no GEMM). Empty groups: dW 0."""
    x, w, dy, offs = _data(device, 128, 64)
    clean = _run(lambda a, b: grouped_mm(a, b, offs), x, w, dy)
    start = sum(SIZES)
    x_bad, dy_bad = x.clone(), dy.clone()
    x_bad[start:, ::3] = float("nan")
    x_bad[start:, 1::3] = float("inf")
    dy_bad[start:] = float("nan")
    dirty = _run(lambda a, b: grouped_mm(a, b, offs), x_bad, w, dy_bad)
    assert_outputs_equal(dirty, clean, ("y", "dx", "dW"), "NaN tail vs clean: ", strides=False)
    y, dx, dw = clean
    assert torch.count_nonzero(y[start:]) == 0 and torch.count_nonzero(dx[start:]) == 0
    assert torch.count_nonzero(dw[2]) == 0  # the empty group
    assert torch.isfinite(y).all() and torch.isfinite(dx).all() and torch.isfinite(dw).all()
    assert torch.count_nonzero(y[:start]) > 0.99 * y[:start].numel()


@pytest.mark.parametrize("device", DEVICES)
def test_no_tail_all_groups_empty_but_one(device):
    x, w, dy, offs = _data(device, 64, 64, sizes=[0, 0, 256, 0], tail=0)
    got = _run(lambda a, b: grouped_mm(a, b, offs), x, w, dy)
    want = _run(lambda a, b: bf16_grouped_mm(a, b, offs), x, w, dy)
    for a, b in zip(got, want):
        assert sqnr(b, a) >= 24
    assert torch.count_nonzero(got[2][[0, 1, 3]]) == 0


def test_per_group_fallback_matches_grouped_mm(monkeypatch):
    x, w, dy, offs = _data("cpu", 64, 96)
    fast = _run(lambda a, b: grouped_mm(a, b, offs), x, w, dy)
    assert mxq.moe.grouped_gemm_path(torch.device("cpu")) == "emulated_grouped_mm"
    monkeypatch.setattr(mxq._gemm, "bf16_grouped_mm_available", lambda device: False)
    assert mxq.moe.grouped_gemm_path(torch.device("cpu")) == "emulated_per_group"
    slow = _run(lambda a, b: grouped_mm(a, b, offs), x, w, dy)
    ref_slow = _run(lambda a, b: bf16_grouped_mm(a, b, offs), x, w, dy)
    monkeypatch.undo()
    ref_fast = _run(lambda a, b: bf16_grouped_mm(a, b, offs), x, w, dy)
    for a, b in zip(slow + ref_slow, fast + ref_fast):
        torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-2)


def test_gemm_path_capability_check():
    cpu = torch.device("cpu")
    assert mxq.moe.grouped_gemm_path(cpu) == "emulated_grouped_mm"
    assert mxq.moe.grouped_gemm_path(cpu, native=True) == "scaled_grouped_mm"  # forced: no silent switch
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        major = torch.cuda.get_device_capability(dev)[0]
        want = "scaled_grouped_mm" if major >= 10 else "emulated_grouped_mm" if major >= 9 else "emulated_per_group"
        assert mxq.moe.grouped_gemm_path(dev, mxq.linear.native_mx_gemm(dev)) == want


@pytest.mark.parametrize("kind", ["swiglu", "linear"])
@pytest.mark.parametrize("device", DEVICES)
def test_experts_module_matches_bf16_experts(device, kind):
    torch.manual_seed(0)
    ref = GroupedExperts(4, 128, 256, kind=kind, device=device, dtype=torch.float32)  # fp32 master weights
    m = MXFP8GroupedExperts.from_experts(ref)
    sizes = [64, 0, 96, 32]
    offs = _offs(sizes, device)
    x = torch.randn(sum(sizes) + 32, 128, device=device, dtype=torch.bfloat16)
    outs = []
    for mod in (ref, m):
        xi = x.clone().requires_grad_(True)
        y = mod(xi, offs)
        y.float().square().sum().backward()
        outs.append((y.detach(), xi.grad, *[p.grad for p in mod.parameters()]))
    (ref_out, mx_out) = outs
    assert mx_out[0].shape == (x.shape[0], 128 if kind == "swiglu" else 256) and mx_out[0].dtype == torch.bfloat16
    assert all(p.grad.dtype == torch.float32 for p in m.parameters())
    bar = 24 if kind == "linear" else 20  # swiglu: three GEMMs and two activation casts in a row
    for a, b in zip(mx_out, ref_out):
        assert sqnr(b, a) >= bar
    assert torch.count_nonzero(mx_out[0][sum(sizes) :]) == 0 and torch.count_nonzero(mx_out[1][sum(sizes) :]) == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", [SIZES, ANY_SIZES], ids=["aligned", "any_size"])
def test_compiled_fullgraph_forward_backward_matches_eager(device, sizes):
    x, w, dy, offs = _data(device, 64, 96, sizes=sizes)
    m = MXFP8GroupedExperts(8, 64, 96, kind="linear", device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        m.weight.copy_(w)

    def run(mod):
        xi = x.clone().requires_grad_(True)
        mod(xi, offs).backward(dy)
        out = (xi.grad, m.weight.grad.clone())
        m.weight.grad = None
        return out

    eager = run(m)
    compiled_mod = torch.compile(m, fullgraph=True)
    compiled = run(compiled_mod)
    y_eager, y_compiled = m(x, offs), compiled_mod(x, offs)
    if device == "cpu":
        assert_outputs_equal(
            (y_compiled, *compiled), (y_eager, *eager), ("y", "dx", "dW"), "compiled vs eager: ", strides=False
        )
    else:
        for a, b in zip((y_compiled, *compiled), (y_eager, *eager)):
            torch.testing.assert_close(a, b, rtol=2**-7, atol=1e-3)


@requires_cuda
@pytest.mark.parametrize("sizes", [SIZES, ANY_SIZES], ids=["aligned", "any_size"])
def test_cuda_graph_training_step(sizes):
    """A MoE training step (grouped_mm forward and backward, SGD update) captured in a CUDA graph and replayed equals
    the same steps run eagerly; offs is a device tensor read by the kernels (no host sync on the graphed path)."""
    if mxq.moe.grouped_gemm_path(torch.device("cuda")) == "emulated_per_group":
        pytest.skip("this device has no torch._grouped_mm kernel: the per-group fallback reads offs on the host")
    torch.manual_seed(0)
    base = GroupedExperts(8, 128, 256, kind="swiglu", device="cuda")
    eager = MXFP8GroupedExperts.from_experts(base)
    graphed = MXFP8GroupedExperts.from_experts(base)
    offs = _offs(sizes, "cuda")
    M = sum(sizes) + TAIL
    data = [(torch.randn(M, 128, device="cuda"), torch.randn(M, 128, device="cuda")) for _ in range(4)]

    assert_graph_replay_matches_eager(
        lambda model, x, t: (model(x, offs).float() - t).square().mean(), eager, graphed, data, 0.5
    )


def test_errors():
    x = torch.randn(128, 64, dtype=torch.bfloat16)
    w = torch.randn(4, 96, 64, dtype=torch.bfloat16)
    offs = torch.tensor([32, 64, 64, 96], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"mxq.grouped_mm: x must be 2-D \(M, K\)"):
        grouped_mm(x.view(2, 64, 64), w, offs)
    with pytest.raises(ValueError, match=r"mxq.grouped_mm: w must be 3-D \(G, N, K\)"):
        grouped_mm(x, w[0], offs)
    with pytest.raises(TypeError, match="^mxq.grouped_mm: offs must be torch.int32, got torch.int64$"):
        grouped_mm(x, w, offs.long())
    with pytest.raises(TypeError, match="^mxq.grouped_mm: offs must be a torch.Tensor, got list$"):
        grouped_mm(x, w, [32, 64, 64, 96])
    with pytest.raises(TypeError, match="^mxq.grouped_mm: x must be a floating-point tensor, got torch.int32$"):
        grouped_mm(x.int(), w, offs)
    with pytest.raises(TypeError, match="^mxq.bf16_grouped_mm: w must be a floating-point tensor, got torch.bool$"):
        mxq.bf16_grouped_mm(x, w > 0, offs)
    with pytest.raises(TypeError, match="^mxq.grouped_mm: config must be a mxq.MXFP8Config or None, got str$"):
        grouped_mm(x, w, offs, config="rceil")
    with pytest.raises(RuntimeError, match='^mxq.grouped_mm: gemm="native" needs a CUDA device of'):
        grouped_mm(x, w, offs, config=MXFP8Config(gemm="native"))
    with pytest.raises(ValueError, match=r"offs must hold one end offset per expert \(G = 4\), got 3"):
        grouped_mm(x, w, offs[:3])
    with pytest.raises(ValueError, match="must share K"):
        grouped_mm(x, torch.randn(4, 96, 32, dtype=torch.bfloat16), offs)
    with pytest.raises(ValueError, match="N must be a multiple of 32, got 80"):
        grouped_mm(x, torch.randn(4, 80, 64, dtype=torch.bfloat16), offs)
    # A malformed offs on the CPU: a ValueError under the op the user called, before anything runs; the bf16
    # reference checks it too. (Group sizes need not be multiples of 32.)
    for bad, rule in (
        ([-32, 48, 64, 96], r"offs\[0\]=-32 is negative"),
        ([32, 64, 64, 160], r"offs\[3\]=160 exceeds M=128"),
        ([64, 32, 64, 96], r"offs\[1\]=32 is less than offs\[0\]=64 \(offs must be non-decreasing\)"),
    ):
        for fn, name in ((grouped_mm, "grouped_mm"), (mxq.bf16_grouped_mm, "bf16_grouped_mm")):
            with pytest.raises(ValueError, match=f"^mxq.{name}: {rule}"):
                fn(x, w, torch.tensor(bad, dtype=torch.int32))
    with pytest.raises(ValueError, match="MXFP8GroupedExperts: dim must be a multiple of 32, got 100"):
        MXFP8GroupedExperts(4, 100, 64)
    with pytest.raises(ValueError, match="MXFP8GroupedExperts: hidden_dim must be a multiple of 32, got 40"):
        MXFP8GroupedExperts(4, 64, 40)
    with pytest.raises(ValueError, match='kind must be "swiglu" or "linear"'):
        GroupedExperts(4, 64, 64, kind="gelu")
    with pytest.raises(ValueError, match="must declare mxq_experts"):
        MXFP8GroupedExperts.from_experts(torch.nn.Linear(64, 64))


def test_deepcopy_and_state_dict_roundtrip():
    m = MXFP8GroupedExperts(2, 64, 64)
    m2 = copy.deepcopy(m)
    m2.load_state_dict(m.state_dict())
    assert set(m.state_dict()) == {"w1", "w2", "w3"} and m2.mxfp8_config == m.mxfp8_config


def _pad_by_hand(t, sizes, tail):
    """What a user writes without mxq's padding: each group's rows, then zero rows up to a multiple of 32, then the
    tail rows; and the rows of the padded tensor that hold the caller's rows, in order."""
    parts, keep, start, row = [], [], 0, 0
    for n in sizes:
        pad = -n % 32
        parts += [t[start : start + n], t.new_zeros(pad, t.shape[1])]
        keep += range(row, row + n)
        start, row = start + n, row + n + pad
    parts.append(t[start : start + tail])
    keep += range(row, row + tail)
    return torch.cat(parts), torch.tensor(keep, device=t.device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "config",
    [
        MXFP8Config(),
        MXFP8Config(activation_quantization_backend="composed", x_colwise="quantized"),
        MXFP8Config(scaling_mode="floor", weight_scaling="1x32"),
    ],
    ids=["default", "composed_quantized", "floor_1x32"],
)
@pytest.mark.parametrize("sizes", [ANY_SIZES, [5, 0, 0, 3], SIZES], ids=["any", "tiny", "aligned"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_groups_of_any_size_equal_padding_by_hand(device, config, sizes, dtype):
    """grouped_mm with group sizes that are not multiples of 32 (an empty group, a 1-row group, 3 tail rows) equals
    padding every group to 32 by hand, calling grouped_mm on the padded rows and taking the caller's rows back:
    y, dx and dW bitwise, on every recipe and input dtype. Aligned sizes go the same way (identity padding)."""
    tail = 3
    x, w, dy, offs = _data(device, 64, 96, sizes=sizes, tail=tail, seed=len(sizes) + sum(sizes))
    x, w = x.to(dtype), w.to(dtype)
    got = _run(lambda a, b: grouped_mm(a, b, offs, config=config), x, w, dy)

    x_p, keep = _pad_by_hand(x, sizes, tail)
    dy_p, _ = _pad_by_hand(dy, sizes, tail)
    offs_p = _offs([n + (-n % 32) for n in sizes], device)
    y_p, dx_p, dw = _run(lambda a, b: grouped_mm(a, b, offs_p, config=config), x_p, w, dy_p)
    assert_outputs_equal(
        got, (y_p[keep], dx_p[keep], dw), ("y", "dx", "dW"), f"{sizes} {dtype} {config}: ", strides=False
    )
    assert torch.count_nonzero(got[0][-tail:]) == 0 and torch.count_nonzero(got[1][-tail:]) == 0
    empty = [g for g, n in enumerate(sizes) if n == 0]
    assert all(torch.count_nonzero(got[2][g]) == 0 for g in empty)


def test_padded_row_space_layout():
    """docs/numerics.md §12: group g starts at P_g = Σ roundup(n_j, 32); the tail follows the last padded end; the
    buffer has roundup(M + 31·G, 32) rows."""
    offs = torch.tensor([37, 37, 38, 70], dtype=torch.int32)  # sizes 37, 0, 1, 32; M = 75: a 5-row tail
    offs_p, dest, Mp = mxq.moe.padded_row_space(offs, 75)
    assert offs_p.tolist() == [64, 64, 96, 128] and offs_p.dtype == torch.int32
    assert dest.tolist() == [*range(37), 64, *range(96, 128), *range(128, 133)]
    assert Mp == 224  # roundup(75 + 31·4, 32)
    with pytest.raises(AttributeError, match="^mxq.moe.padded_rows was renamed mxq.moe.padded_row_space"):
        mxq.moe.padded_rows  # noqa: B018


@requires_cuda
def test_malformed_offs_on_cuda_is_a_device_assertion(tmp_path):
    """No host sync on CUDA, so a malformed offs cannot be a Python exception at the call: it fails a device-side
    assertion (the process's CUDA context is lost, so this runs in a subprocess) instead of returning numbers."""
    code = (
        "import torch, mxq\n"
        "x = torch.randn(128, 64, device='cuda'); w = torch.randn(4, 96, 64, device='cuda')\n"
        "offs = torch.tensor([64, 32, 96, 128], dtype=torch.int32, device='cuda')\n"
        "y = mxq.grouped_mm(x, w, offs)\n"
        "torch.cuda.synchronize()\n"
        "print('NO ERROR')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "NO ERROR" not in proc.stdout
    assert "device-side assert" in proc.stderr or "offs must be non-decreasing" in proc.stderr, proc.stderr[-2000:]
