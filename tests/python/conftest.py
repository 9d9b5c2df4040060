# The Python tests need torch and the installed mxq package (pip install --no-build-isolation .). Every test module
# that does starts with pytest.importorskip("torch") (test_sass_profile.py, a benchmark script's, needs neither), so
# without torch those skip visibly, module by module, and pytest exits 0 (a skip raised here, in conftest.py, would be
# a collection error instead). With torch, a missing or broken mxq extension is an error, not a skip: the modules
# import mxq unconditionally.


def pytest_report_header(config):
    try:
        import torch
    except ImportError:
        return "mxq: PyTorch is not installed; every Python test skips"
    try:
        import mxq
    except ImportError as e:
        return f"mxq: torch {torch.__version__}, but import mxq failed: {e}"
    return (
        f"mxq: torch {torch.__version__} (CUDA {torch.version.cuda}), CUDA device: {torch.cuda.is_available()}, "
        f"extension {mxq._library_path} (CUDA impls: {mxq.has_cuda_kernels()})"
    )
