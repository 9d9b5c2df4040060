"""Always collected (no module-level skip), so that a run without torch reports a skip and exits 0 rather than
pytest's "no tests collected" (exit 5); with torch, it checks that the build matches the machine."""

import pytest


def test_extension_matches_the_machine():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the mxq Python tests need it")
    import mxq

    ops = ["quantize", "quantize_rowwise", "quantize_colwise", "quantize_composed", "quantize_weight"]
    ops += ["quantize_routed", "dequantize", "validate_offs"]
    missing = [op for op in ops if not torch._C._dispatch_has_kernel_for_dispatch_key(f"mxq::{op}", "CPU")]
    assert not missing, f"the extension {mxq._library_path} registered no CPU impl (the C++ reference) for {missing}"
    if torch.cuda.is_available():
        assert mxq.has_cuda_kernels(), (
            "a CUDA device is present but the extension registered no CUDA impls: it was built without nvcc or "
            "against a CPU-only torch"
        )
