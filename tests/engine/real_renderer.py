"""vLLM's real renderer + Dots processor for the preview profile, on CPU (tests only).

vLLM cannot import the NVIDIA ``Dots3NoteForCausalLM`` without CUDA, so we register a stub
under that architecture name carrying vLLM's own Dots processor registration. No weights, no
forward pass: only the CPU preprocessing path the real engine runs before the GPU.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from dots3_demo import vllm_compat
from dots3_demo.profiles import PREVIEW_PROFILE_DIR


def build_preview_renderer(limits: dict[str, int] | None = None) -> Any:
    from vllm import ModelRegistry
    from vllm.config import DeviceConfig, VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models.interfaces import SupportsMultiModal
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.renderers.registry import renderer_from_config

    pm = vllm_compat.processor_module()

    @MULTIMODAL_REGISTRY.register_processor(
        pm.Dots3NoteMultiModalProcessor, info=pm.Dots3NoteProcessingInfo, dummy_inputs=pm.Dots3NoteDummyInputsBuilder
    )
    class StubDots3Note(nn.Module, SupportsMultiModal):
        def __init__(self, *, vllm_config: Any = None, prefix: str = "") -> None:
            super().__init__()

        @classmethod
        def get_placeholder_str(cls, modality: str, i: int) -> str | None:
            if modality.startswith("image"):
                return f"{pm.IMAGE_START}{pm.IMAGE_PAD}{pm.IMAGE_END}"
            if modality.startswith("audio"):
                return f"{pm.AUDIO_START}{pm.AUDIO_PAD}{pm.AUDIO_END}"
            if modality.startswith("video"):
                return pm.VIDEO_PLACEHOLDER
            return None

        def forward(self, input_ids, positions, **kwargs):
            raise RuntimeError("stub model: preprocessing only")

        def compute_logits(self, hidden_states):
            raise RuntimeError("stub model: preprocessing only")

        def embed_input_ids(self, input_ids, *args, **kwargs):
            raise RuntimeError("stub model: preprocessing only")

    ModelRegistry.register_model("Dots3NoteForCausalLM", StubDots3Note)
    args = EngineArgs(
        model=str(PREVIEW_PROFILE_DIR),
        mm_processor_cache_gb=0,
        limit_mm_per_prompt=limits or {"image": 8, "audio": 4, "video": 1},
        max_model_len=32768,
    )
    config = VllmConfig(model_config=args.create_model_config(), device_config=DeviceConfig(device="cpu"))
    return renderer_from_config(config)
