"""``vllm_compat``: when the NVIDIA dots3_note package is imported, and vLLM's engine flags on a CPU host."""

from __future__ import annotations

import sys

import pytest

from dots3_demo import vllm_compat

PACKAGE = "vllm.models.dots3_note"


@pytest.fixture
def no_package(monkeypatch):
    """``vllm.models.dots3_note`` not imported yet; the test's own registration is undone after it."""
    monkeypatch.delitem(sys.modules, PACKAGE, raising=False)
    tried = []
    real = vllm_compat.importlib.import_module

    def import_module(name, package=None):  # importlib's, for everyone: only the package's import fails
        if name == PACKAGE:
            tried.append(name)
            raise ImportError("vllm.vllm_flash_attn requires the CUDA flash attention extensions")
        return real(name, package)

    monkeypatch.setattr(vllm_compat.importlib, "import_module", import_module)
    yield tried
    sys.modules.pop(PACKAGE, None)  # then monkeypatch puts back the package there was, if any


def test_off_cuda_the_nvidia_model_is_not_imported(no_package):
    """On this CPU host the normal import (the NVIDIA model, 10-20 s before it fails) is skipped."""
    assert not vllm_compat._platform_is_cuda()
    vllm_compat._ensure_dots3_package()
    assert no_package == []
    package = sys.modules[PACKAGE]
    assert package.__path__[0].endswith("dots3_note") and not hasattr(package, "Dots3NoteForCausalLM")


def test_on_cuda_the_normal_import_is_tried_first(no_package, monkeypatch):
    monkeypatch.setattr(vllm_compat, "_platform_is_cuda", lambda: True)
    vllm_compat._ensure_dots3_package()
    assert no_package == [PACKAGE]  # tried, failed here, and the bare package took its place
    assert sys.modules[PACKAGE].__path__[0].endswith("dots3_note")


def test_engine_flags_platform_lends_cpu_only_inside_the_block():
    from vllm.config import DeviceConfig
    from vllm.platforms import current_platform

    assert current_platform.device_type == ""  # the CUDA build on a host without a GPU
    with pytest.raises(RuntimeError, match="Failed to infer device type"):
        DeviceConfig()
    with vllm_compat.engine_flags_platform():
        assert DeviceConfig().device_type == "cpu"
        assert not current_platform.is_cpu()  # the platform itself is still vLLM's unspecified one
    assert current_platform.device_type == "" and "device_type" not in vars(current_platform)
