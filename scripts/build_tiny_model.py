"""Build the real-engine test tier's tiny random-weight model folder.

    python -m scripts.build_tiny_model OUT_DIR [--max-position-embeddings 4096]   # from the repository root

vLLM runs it for real (``--load-format dummy``: random weights, no checkpoint file) on its CPU build,
so the studio's streaming, Stop, tool calls, figures and remote mode meet the real ``AsyncLLM`` and
the real ``vllm serve``. dots3_note itself cannot run on a CPU (sparse MLA, FA3 and Triton kernels),
so the network is a tiny Qwen2 (hidden 128, 2 layers, 4 heads of 32 — vLLM's CPU attention needs a
head size of at least 32), and everything around it is the studio's:

* the preview profile's tokenizer, with the Dots special tokens (``<think>``, ``<dots_function_call>``,
  the image/audio pads), and its ``preprocessor_config.json``;
* the preview profile's ``vision_config`` / ``audio_config`` in ``config.json``, so the same folder is
  a studio profile (``--model``) — vLLM's Qwen2 ignores those keys, and the engine has no
  multimodal tower (every modality limit is 0: media is refused by the engine itself);
* a chat template that renders tools, Dots XML tool calls and tool results (the preview profile's
  stand-in template ignores tools).

Random weights make the words meaningless; the tests compare lifecycles, token counts and parsed
tool calls (forced with vLLM's structured outputs), never words.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PREVIEW = Path(__file__).resolve().parent.parent / "assets" / "preview_profile"
MARKER = "Dots3 NOTE Studio tiny test model: random weights (load_format=dummy). Not a checkpoint."

# Tools in the system turn, Dots XML for the assistant's calls, results as tool responses. Marked as a
# stand-in: the real Dots3 NOTE template comes with the checkpoint.
CHAT_TEMPLATE = (
    "{#- TEST STAND-IN: the real Dots3 NOTE template comes from the checkpoint -#}"
    "{%- macro text(c) -%}"
    "{%- if c is string -%}{{ c }}"
    "{%- elif c -%}{{ c | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\n') }}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set system = messages[0] if messages and messages[0]['role'] == 'system' else none -%}"
    "<|system|>{{ text(system['content']) if system else 'You are a helpful assistant.' }}"
    "{%- if tools -%}\n\n# Tools\nCall a tool with <dots_function_call><invoke name=\"NAME\">"
    "<parameter name=\"ARG\">VALUE</parameter></invoke></dots_function_call>. Tools:"
    "{%- for tool in tools -%}\n{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}"
    "{%- endfor -%}"
    "{%- endif -%}<|endofsystem|>\n"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}<|user|>{{ text(m['content']) }}<|endofuser|>"
    "{%- elif m['role'] == 'tool' -%}<|user|><tool_response>{{ text(m['content']) }}</tool_response><|endofuser|>"
    "{%- elif m['role'] == 'assistant' -%}<|assistant|>{{ text(m['content']) }}"
    "{%- if m['tool_calls'] is defined and m['tool_calls'] -%}<dots_function_call>"
    "{%- for call in m['tool_calls'] -%}\n<invoke name=\"{{ call['function']['name'] }}\">"
    "{%- set args = call['function']['arguments'] -%}"
    "{%- if args is mapping -%}{%- for k, v in args.items() -%}"
    "\n<parameter name=\"{{ k }}\">{{ v if v is string else v | tojson }}</parameter>"
    "{%- endfor -%}{%- else -%}\n{{ args }}{%- endif -%}"
    "\n</invoke>"
    "{%- endfor -%}\n</dots_function_call>"
    "{%- endif -%}<|endofassistant|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def qwen2_config(size: int, bos_token_id: int, eos_token_id: int, *, max_position_embeddings: int) -> dict:
    """The tiny Qwen2's ``config.json`` (``size``: the tokenizer's token count)."""
    preview = json.loads((PREVIEW / "config.json").read_text())
    return {
        "_tiny_test_model": MARKER,
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": max_position_embeddings,
        "vocab_size": -(-size // 64) * 64,  # ≥ the tokenizer, a multiple of 64
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": bos_token_id,
        # The preview profile's geometry: the folder doubles as the studio's --model profile.
        "vision_config": preview["vision_config"],
        "audio_config": preview["audio_config"],
    }


def build(out: Path, *, max_position_embeddings: int = 4096) -> Path:
    """Write the model folder ``out`` (created or refreshed) and return it, with the smoke test's folder
    writer (``dots3_demo.workbench.smoke.write_model_folder``: the same tokenizer files) around :func:`qwen2_config`."""
    from dots3_demo.workbench.smoke import write_model_folder

    def config(size: int, bos_token_id: int, eos_token_id: int) -> dict:
        return qwen2_config(size, bos_token_id, eos_token_id, max_position_embeddings=max_position_embeddings)

    return write_model_folder(out, config, max_position_embeddings=max_position_embeddings,
                              chat_template=CHAT_TEMPLATE)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m scripts.build_tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("--max-position-embeddings", type=int, default=4096,
                        help="bounds the engine's --max-model-len (default 4096)")
    args = parser.parse_args()
    print(build(args.out, max_position_embeddings=args.max_position_embeddings))


if __name__ == "__main__":
    main()
