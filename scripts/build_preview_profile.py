"""Build the bundled preview profile in ``assets/preview_profile/``.

    python -m scripts.build_preview_profile      # from the repository root

The profile lets the studio inspect uploads exactly like vLLM's dots3_note code would for a
checkpoint with this geometry, without the (undownloadable) checkpoint:

* ``config.json``: ``vision_config`` / ``audio_config`` sections with public Dots geometry
  (patch 14, spatial merge 2, temporal patch 1) and a 16 kHz Whisper-style audio stem.
* ``preprocessor_config.json``: the image processor settings vLLM reads
  (``vision_config``). The pixel limits are OUR CHOICE (Qwen2-VL's well-known 3136 /
  12,845,056), not the checkpoint's — the studio marks them approximate in preview.
* tokenizer files: a byte-level BPE trained here from scratch on Python's own docstrings, with
  the Dots special tokens added. Text-token counts are therefore approximate in preview
  (the multimodal pad-token counts do not depend on the tokenizer).
"""

from __future__ import annotations

import json
import pydoc
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "assets" / "preview_profile"

# Placeholders vLLM's dots3_note processor looks up, plus chat / tool markers.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|system|>", "<|endofsystem|>",
    "<|user|>", "<|endofuser|>",
    "<|assistant|>", "<|endofassistant|>",
    "<|img|>", "<|imgpad|>", "<|endofimg|>",
    "<|audio_comp_start|>", "<|audio_comp_pad|>", "<|audio_comp_end|>",
    "<|video_pad|>",
    "<think>", "</think>",
    "<dots_function_call>", "</dots_function_call>",
]

# A stand-in chat template (labelled as such): the real one ships with the checkpoint.
CHAT_TEMPLATE = (
    "{#- PREVIEW STAND-IN: the real Dots3 NOTE template comes from the checkpoint -#}"
    "{%- if messages[0]['role'] != 'system' -%}"
    "<|system|>You are a helpful assistant.<|endofsystem|>\n"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if m['content'] is string else "
    "(m['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\n')) -%}"
    "{%- if m['role'] == 'system' -%}<|system|>{{ c }}<|endofsystem|>\n"
    "{%- elif m['role'] == 'user' -%}<|user|>{{ c }}<|endofuser|>"
    "{%- elif m['role'] == 'tool' -%}<|user|><tool_response>{{ c }}</tool_response><|endofuser|>"
    "{%- else -%}<|assistant|>{{ c }}<|endofassistant|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def _corpus() -> list[str]:
    texts = []
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in {"antigravity", "this", "idlelib", "turtledemo"}:
            continue
        try:
            module = __import__(name)
        except Exception:  # noqa: BLE001 - some stdlib modules need a platform
            continue
        doc = pydoc.getdoc(module)
        if doc:
            texts.append(doc)
    texts.append("00:00:00.00 01:02:03.45 <00:00:12.50> 0123456789")
    return texts


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endofassistant|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=131072,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    config = {
        "_preview_profile": "Dots3 NOTE Studio preview profile: public geometry, assumed pixel "
        "limits, home-made tokenizer. Not a checkpoint.",
        "architectures": ["Dots3NoteForCausalLM"],
        "model_type": "dots3_note",
        "max_position_embeddings": 131072,
        "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 1},
        "audio_config": {
            "sampling_rate": 16000,
            "use_conv2d_stem": True,
            "merge_factor": 1,
            "chunk_seconds": 30,
        },
    }
    preprocessor = {
        "vision_config": {
            "min_pixels": 3136,
            "max_pixels": 12845056,
            "patch_size": 14,
            "temporal_patch_size": 1,
            "merge_size": 2,
            "pre_pixel_shuffle": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        }
    }
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (OUT / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")
    build_tokenizer(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
