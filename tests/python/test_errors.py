"""Every validation message (docs/numerics.md §9): rejected before any launch, naming the argument and the offending value.
Runs on the CPU dispatch everywhere and on CUDA where a device is present."""

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")

import re

import mxq
import torch
from helpers import DEVICES, QUANT_OPS, op, raises, requires_cuda


def _x(device, M=256, K=256, dtype=torch.bfloat16):
    return torch.randn(M, K, device=device).to(dtype)


def _offs(device, values=(128, 256)):
    return torch.tensor(values, dtype=torch.int32, device=device)


OUT_RULE = "mxq.quantize: out must be an MXTensors, or a tuple or list of 4 (q_row, s_row, q_col, s_col), "


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", QUANT_OPS)
class TestQuantizeArguments:
    def test_x_dtype(self, name, device):
        with raises(
            TypeError, f"mxq.{name}: x must be torch.bfloat16, torch.float16 or torch.float32, got torch.float64"
        ):
            op(name)(_x(device, dtype=torch.float64))

    def test_x_rank(self, name, device):
        with raises(ValueError, f"mxq.{name}: x must be 2-D (M, K), got a 3-D tensor of shape [2, 128, 128]"):
            op(name)(torch.zeros(2, 128, 128, dtype=torch.bfloat16, device=device))

    def test_x_contiguous(self, name, device):
        with raises(
            ValueError, f"mxq.{name}: x must be contiguous (row-major), got strides [1, 128] for shape [128, 256]"
        ):
            op(name)(_x(device, 256, 128).t())

    def test_block_size(self, name, device):
        with raises(ValueError, f"mxq.{name}: block_size must be 32, got 16"):
            op(name)(_x(device), 16)

    def test_scaling_mode(self, name, device):
        with raises(ValueError, f'mxq.{name}: scaling_mode must be "rceil" or "floor", got "ceil"'):
            op(name)(_x(device), 32, "ceil")
        with raises(ValueError, 'got "RCEIL"'):  # exact strings, no case folding
            op(name)(_x(device), 32, "RCEIL")

    def test_offs_dtype(self, name, device):
        with raises(TypeError, f"mxq.{name}: offs must be torch.int32, got torch.int64"):
            op(name)(_x(device), offs=_offs(device).long())

    def test_offs_rank(self, name, device):
        with raises(ValueError, f"mxq.{name}: offs must be 1-D (G,), got a 2-D tensor of shape [1, 2]"):
            op(name)(_x(device), offs=_offs(device).view(1, 2))

    def test_offs_empty(self, name, device):
        with raises(ValueError, f"mxq.{name}: offs must hold 1 to 1024 group end offsets, got G=0"):
            op(name)(_x(device), offs=_offs(device, ()))

    def test_offs_too_many_groups(self, name, device):
        with raises(ValueError, f"mxq.{name}: offs must hold 1 to 1024 group end offsets, got G=1025"):
            op(name)(_x(device), offs=torch.zeros(1025, dtype=torch.int32, device=device))

    def test_m_alignment(self, name, device):  # one rule on every device and path
        with raises(ValueError, f"mxq.{name}: M must be a multiple of 32, got 48"):
            op(name)(_x(device, 48, 256))

    def test_k_alignment(self, name, device):
        with raises(ValueError, f"mxq.{name}: K must be a multiple of 32, got 2896"):
            op(name)(_x(device, 256, 2896))

    def test_x_misaligned(self, name, device):
        flat = torch.zeros(256 * 256 + 8, dtype=torch.bfloat16, device=device)
        x = flat[1 : 1 + 256 * 256].view(256, 256)  # contiguous, but 2 bytes past a 16-byte boundary
        with raises(ValueError, f"mxq.{name}: x must be 16-byte aligned, got address"):
            op(name)(x)

    def test_messages_are_for_users(self, name, device):
        # docs/numerics.md §9: the op once, then the argument, the rule and the value; no build paths, no
        # internal expressions, no doubled prefixes.
        with pytest.raises(ValueError) as info:
            op(name)(_x(device, 100, 256))
        text = str(info.value).splitlines()[0]
        assert text.startswith(f"mxq.{name}: M must be a multiple of "), text
        assert text.count("mxq") == 1, text
        assert not re.search(r"\.(cpp|h|cu):\d+|\[.*\]|==|%", text), text


@pytest.mark.parametrize("name", QUANT_OPS)
def test_cpu_reference_rejects_malformed_offs(name):
    # The reference holds offs on the host and checks them, for every op; the GPU path clamps on the device instead.
    x = _x("cpu")
    cases = {
        (256, 128): "offs must be non-decreasing, got offs[1]=128 after offs[0]=256",
        (-128,): "offs[0]=-128 is negative",
        (384,): "offs[0]=384 exceeds M=256",
        (80,): "offs[0]=80 is not a multiple of 32 (group sizes must be)",
    }
    for values, text in cases.items():
        with raises(ValueError, f"mxq.{name}: {text}"):
            op(name)(x, offs=_offs("cpu", values))


@requires_cuda
@pytest.mark.parametrize("name", QUANT_OPS)
def test_cuda_device_mismatch(name):
    with raises(ValueError, f"mxq.{name}: offs must be on x's device (cuda:0), got cpu"):
        op(name)(_x("cuda"), offs=_offs("cpu"))
    # x on the CPU with offs on CUDA dispatches to the CUDA key; the impl still names x's device.
    with raises(ValueError, f"mxq.{name}: offs must be on x's device (cpu), got cuda:0"):
        op(name)(_x("cpu"), offs=_offs("cuda"))


@requires_cuda
@pytest.mark.parametrize("name", QUANT_OPS)
def test_cuda_malformed_offs_is_silent_and_contained(name):
    # No host sync in the op, so no exception: the device clamps a malformed offs (docs/numerics.md §9);
    # validate_offs raises.
    x = _x("cuda")
    for values in ((256, 128), (-128,), (384,), (80,)):
        offs = _offs("cuda", values)
        out = op(name)(x, offs=offs)
        torch.cuda.synchronize()
        assert all(t.is_cuda for t in out)
        with pytest.raises(ValueError, match=r"mxq\.validate_offs: .*offs\[\d\]"):
            mxq.validate_offs(offs, 256)


# ---- dequantize ----


@pytest.mark.parametrize("device", DEVICES)
class TestDequantizeArguments:
    def _q(self, device):
        return torch.ops.mxq.quantize(_x(device))

    def test_q_dtype(self, device):
        _q_row, s_row, _, _ = self._q(device)
        with raises(TypeError, "mxq.dequantize: q must be torch.float8_e4m3fn, got torch.bfloat16"):
            mxq.dequantize(_x(device), s_row)

    def test_q_rank(self, device):
        q_row, s_row, _, _ = self._q(device)
        with raises(ValueError, "mxq.dequantize: q must be 2-D (rows, cols), got a 1-D tensor"):
            mxq.dequantize(q_row.view(-1), s_row)

    def test_q_contiguous(self, device):
        _, _, q_col, s_col = self._q(device)
        with raises(ValueError, "for colwise data pass q_col.t(), the (K, M) array"):
            mxq.dequantize(q_col, s_col)

    def test_scales_dtype(self, device):
        q_row, s_row, _, _ = self._q(device)
        with raises(TypeError, "mxq.dequantize: scales must be torch.float8_e8m0fnu, got torch.uint8"):
            mxq.dequantize(q_row, s_row.view(torch.uint8))

    def test_scales_shape(self, device):
        q_row, s_row, _, _ = self._q(device)
        with raises(
            ValueError,
            "mxq.dequantize: scales must have shape [256, 8] for q of shape [256, 256] (blocked layout), got [128, 8]",
        ):
            mxq.dequantize(q_row, s_row[:128])
        with raises(ValueError, "scales must have shape [256, 16] for q of shape [256, 256] (k_groups layout)"):
            mxq.dequantize(q_row, s_row, _offs(device), layout="k_groups")
        with raises(ValueError, "scales must have shape [512, 8] for q of shape [256, 256] (m_groups layout)"):
            mxq.dequantize(q_row, s_row, _offs(device), layout="m_groups")

    def test_layout(self, device):
        q_row, s_row, _, _ = self._q(device)
        with raises(ValueError, 'mxq.dequantize: layout must be "blocked", "m_groups" or "k_groups", got "rows"'):
            mxq.dequantize(q_row, s_row, layout="rows")
        with raises(ValueError, "mxq.dequantize: the blocked layout takes no offs"):
            mxq.dequantize(q_row, s_row, _offs(device))
        with raises(ValueError, "mxq.dequantize: the grouped layouts need offs"):
            mxq.dequantize(q_row, s_row, layout="m_groups")

    def test_cols_alignment(self, device):
        q = torch.zeros(128, 48, dtype=torch.float8_e4m3fn, device=device)
        s = torch.zeros(128, 4, dtype=torch.float8_e8m0fnu, device=device)
        with raises(ValueError, "mxq.dequantize: cols must be a multiple of 32, got 48"):
            mxq.dequantize(q, s)

    def test_offs_dtype(self, device):
        q_row, s_row, _, _ = self._q(device)
        with raises(TypeError, "mxq.dequantize: offs must be torch.int32, got torch.int64"):
            mxq.dequantize(q_row, s_row, _offs(device).long(), layout="m_groups")


# ---- the Python wrappers ----


def test_quantize_wrapper_arguments():
    x = _x("cpu")
    with raises(ValueError, 'mxq.quantize: backend must be "fused" or "composed", got "triton"'):
        mxq.quantize(x, backend="triton")
    with raises(ValueError, 'mxq.quantize: scaling_mode must be "rceil" or "floor", got "even"'):
        mxq.quantize(x, scaling_mode="even")
    with raises(ValueError, 'mxq.quantize: backend="composed" quantizes both axes'):
        mxq.quantize(x, colwise=False, backend="composed")
    with raises(ValueError, "mxq.quantize: at least one of rowwise and colwise must be True"):
        mxq.quantize(x, rowwise=False, colwise=False)


def test_wrapper_argument_types():
    """An argument of the wrong Python type is a TypeError naming the function and the argument, on every wrapper
    (before: a RuntimeError from the op's schema, an AttributeError, or, for the flags, Python truthiness, so
    rowwise="no" quantized both axes)."""
    x = _x("cpu")
    t = mxq.quantize(x)
    cases = [
        ("mxq.quantize: x must be a torch.Tensor, got list", lambda: mxq.quantize(x.tolist())),
        ("mxq.quantize: rowwise must be a bool, got str", lambda: mxq.quantize(x, rowwise="no")),
        ("mxq.quantize: colwise must be a bool, got int", lambda: mxq.quantize(x, colwise=0)),
        ("mxq.quantize: scaling_mode must be a str, got int", lambda: mxq.quantize(x, scaling_mode=1)),
        ("mxq.quantize: format must be a str, got NoneType", lambda: mxq.quantize(x, format=None)),
        ("mxq.quantize: backend must be a str, got NoneType", lambda: mxq.quantize(x, backend=None)),
        ("mxq.quantize: offs must be a torch.Tensor, got list", lambda: mxq.quantize(x, offs=[128, 256])),
        (
            OUT_RULE + "got tuple of 3 entries",
            lambda: mxq.quantize(x, out=(None,) * 3),
        ),
        (
            OUT_RULE + "got dict",
            lambda: mxq.quantize(x, out={}),
        ),
        ("mxq.empty_quantized: x must be a torch.Tensor, got NoneType", lambda: mxq.empty_quantized(None)),
        ("mxq.quantize_weight: w must be a torch.Tensor, got NoneType", lambda: mxq.quantize_weight(None)),
        ("mxq.quantize_weight: rowwise must be a bool, got str", lambda: mxq.quantize_weight(x, rowwise="no")),
        (
            "mxq.quantize_weight: weight_scaling must be a str, got int",
            lambda: mxq.quantize_weight(x, weight_scaling=32),
        ),
        ("mxq.quantize_weight: format must be a str, got int", lambda: mxq.quantize_weight(x, format=8)),
        ("mxq.quantize_routed: format must be a str, got NoneType", lambda: mxq.quantize_routed(x, x, x, format=None)),
        ("mxq.dequantize: format must be a str, got NoneType", lambda: mxq.dequantize(t.q_row, t.s_row, format=None)),
        (
            "mxq.dequantize_rowwise: format must be a str, got int",
            lambda: mxq.dequantize_rowwise(t.q_row, t.s_row, format=1),
        ),
        ("mxq.dequantize: q must be a torch.Tensor, got NoneType", lambda: mxq.dequantize(None, t.s_row)),
        ("mxq.dequantize: layout must be a str, got NoneType", lambda: mxq.dequantize(t.q_row, t.s_row, layout=None)),
        ("mxq.dequantize_rowwise: s_row must be a torch.Tensor, got int", lambda: mxq.dequantize_rowwise(t.q_row, 0)),
        ("mxq.dequantize_colwise: q_col must be a torch.Tensor, got list", lambda: mxq.dequantize_colwise([], t.s_col)),
        ("mxq.validate_offs: offs must be a torch.Tensor, got list", lambda: mxq.validate_offs([128], 256)),
        ("mxq.validate_offs: M must be an int, got str", lambda: mxq.validate_offs(_offs("cpu"), "256")),
    ]
    for text, call in cases:
        with pytest.raises(TypeError, match="^" + re.escape(text) + "$"):
            call()


def test_dequantize_colwise_names_its_own_argument():
    """A row-major q_col (not the (1, M)-strided tensor quantize returns): the message names q_col and its own
    strides, not the op's q and the strides of the wrapper's transpose."""
    t = mxq.quantize(_x("cpu", 256, 128))
    with raises(
        ValueError,
        "mxq.dequantize_colwise: q_col must have strides (1, M) as quantize returns it "
        "(q_col.t() contiguous), got strides (128, 1) for shape [256, 128]",
    ):
        mxq.dequantize_colwise(t.q_col.contiguous(), t.s_col)


@pytest.mark.parametrize("device", DEVICES)
def test_validate_offs_messages(device):
    M = 512
    cases = [
        ((128, 64), "mxq.validate_offs: offs must be non-decreasing, got offs[1]=64 after offs[0]=128"),
        ((-128,), "mxq.validate_offs: offs[0]=-128 is negative"),
        ((128, 640), "mxq.validate_offs: offs[1]=640 exceeds M=512"),
        ((128, 256, 300), "mxq.validate_offs: offs[2]=300 is not a multiple of 32"),
        ((), "mxq.validate_offs: offs must hold 1 to 1024 group end offsets, got G=0"),
    ]
    for values, text in cases:
        with raises(ValueError, text):
            mxq.validate_offs(_offs(device, values), M)
    # The format's block: 128 for FP8 blockwise, whose group ends the ops check at 128 too.
    mxq.validate_offs(_offs(device, (128, 384)), M, format="fp8_blockwise")
    with raises(ValueError, "mxq.validate_offs: offs[1]=160 is not a multiple of 128"):
        mxq.validate_offs(_offs(device, (128, 160)), M, format="fp8_blockwise")
    with raises(ValueError, 'mxq.validate_offs: format must be "mxfp8" or "fp8_blockwise", got "fp8"'):
        mxq.validate_offs(_offs(device, (128,)), M, format="fp8")
    # M itself, checked first as the ops check it (48 passed, -32 was reported as offs[0]=0 exceeding it).
    for bad_M, rule in (
        (48, "must be a multiple of 32, got 48"),
        (-32, "must be non-negative, got -32"),
        (2**40, "must be at most 2^31-1, got 1099511627776"),
    ):
        with raises(ValueError, f"mxq.validate_offs: M {rule}"):
            mxq.validate_offs(_offs(device, (0,)), bad_M)
    with raises(TypeError, "mxq.validate_offs: offs must be torch.int32, got torch.int64"):
        mxq.validate_offs(_offs(device).long(), M)
    with raises(ValueError, "mxq.validate_offs: offs must be 1-D (G,), got a 2-D tensor of shape [1, 2]"):
        mxq.validate_offs(_offs(device).view(1, 2), M)
