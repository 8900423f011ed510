"""``python app.py smoke [--model DIR] [engine flags]``: a GPU smoke test for operators.

It starts vLLM in this process through the studio's own adapter (``InProcessEngine``, engine
arguments built as for ``--engine inprocess``: the configuration operators run) and runs one turn of each:
text, an image, an audio clip, a video with its sound track, a tool call forced with vLLM's
structured outputs (``tool_choice="required"``), a prompt over 1,000 tokens twice (the second time
from vLLM's prefix cache; vLLM's default CUDA-graph mode hung on that on an H200), and 8 requests at
once. Every turn has a time limit: a turn that does not finish within it fails, naming the turn and the
engine's configuration, and the turns after it are not run (a hung engine answers nothing more).
For every turn it prints the engine's prompt
tokens by modality next to the inspector's numbers for the same media (``inspect_file``, the
chat's ``token_pairs``: the engine's image/audio counts include 2 marker tokens per item), with
TTFT and tokens/s, and checks each turn's lifecycle (finished, output tokens, a parsed tool call
with finish ``tool_calls``, nothing left in the engine).

With no ``--model`` it writes a tiny random-weight ``dots3_note`` (:func:`write_tiny_model`:
the kernels' own attention shapes, everything else small; ``load_format=dummy``) to a temp
folder. Random weights make the words meaningless: counts and lifecycles are compared, never text.

Exit status: 0 when every count equals the inspector's and every turn ran its course; 1 on a
mismatch, a failed turn or an engine that would not start; 2 when it cannot run here (no CUDA GPU,
a ``--model`` that is not a usable local folder). Nothing runs at import. The command, its flags
and its engine arguments are ``dots3_demo.cli.smoke``; this module is the test it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dots3_demo.budget import VideoSettings
from dots3_demo.core.counts import token_pairs
from dots3_demo.core.records import MediaItem
from dots3_demo.core.reply import Reply
from dots3_demo.core.turns import build_turn, user_message
from dots3_demo.engine.protocol import (
    ChatEngine,
    EngineUnavailable,
    PromptTokens,
    SamplingSettings,
    TurnRejected,
    TurnRequest,
)
from dots3_demo.inspection.errors import one_line
from dots3_demo.profiles import ASSETS_DIR, PREVIEW_PROFILE_DIR

if TYPE_CHECKING:
    from dots3_demo.inspection.probe import Kind

EXAMPLES_DIR = ASSETS_DIR / "examples"
TINY_MARKER = "Dots3 NOTE Studio smoke model: random weights (load_format=dummy). Not a checkpoint."
TINY_MAX_POSITIONS = 16384
TINY_GPU_MEMORY_UTILIZATION = 0.3  # the tiny model needs little; leaves the GPU to others
DEFAULT_MAX_TOKENS = 32
DEFAULT_TURN_TIMEOUT_S = 300.0  # a turn on the tiny model takes seconds; the first compiles kernels (13 s)
LONG_PROMPT_TOKENS = 1000  # the long turn's prompt has more than this (the largest CUDA-graph capture is 256)
BATCH = 8  # requests of the batch turn, at once
MTP_CONFIG = {"num_nextn_predict_layers": 1, "mtp_layer_types": ["sliding_attention"]}
MTP_SPECULATIVE_CONFIG = {"method": "mtp", "num_speculative_tokens": 1}
TOOL_MAX_TOKENS = 512  # a forced call written character by character stays well under this

# The attention shapes dots3_note's CUDA kernels accept (vLLM 0.32, ``models/dots3_note/nvidia/``).
# Verified on an H200 with :func:`tiny_config`; the rest of the model may be tiny.
KERNEL_SHAPES: Mapping[str, int] = {
    # sliding-window prefill: Dots3NoteFlashAttnPrefillBackend.supports_mla_dimensions (FA3)
    "swa_qk_nope_head_dim": 192,
    "swa_qk_rope_head_dim": 64,
    "swa_v_head_dim": 128,
    # sliding-window decode: Dots3NoteTritonMLABackend.get_supported_head_sizes() == [1088]
    # = swa_kv_lora_rank + swa_qk_rope_head_dim
    "swa_kv_lora_rank": 1024,
    # full attention: DeepSeek-V3.2 sparse MLA and its indexer
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
}
SWA_DECODE_HEAD_SIZE = 1088


# ---------------------------------------------------------------- the tiny model
def _tokenizer_facts(tokenizer_json: Path) -> tuple[int, dict[str, int]]:
    """(token count, {added token: id}) of a Hugging Face ``tokenizer.json``."""
    data = json.loads(tokenizer_json.read_text())
    added = {t["content"]: int(t["id"]) for t in data.get("added_tokens", [])}
    return len(data["model"]["vocab"]) + len(added), added


def tiny_config(tokenizer_size: int, *, bos_token_id: int, eos_token_id: int,
                max_position_embeddings: int = TINY_MAX_POSITIONS, mtp: bool = False) -> dict[str, Any]:
    """A random-weight ``dots3_note`` ``config.json`` the GPU kernels accept.

    Two decoder layers (one full sparse-MLA layer, one sliding-window layer) at the kernels' head
    shapes (:data:`KERNEL_SHAPES`), hidden 1024, 8 routed experts (top-2), no MTP layer (``mtp``: one,
    sliding-window, :data:`MTP_CONFIG`: what vLLM's ``Dots3NoteMTPModel`` loads); a 2-layer
    vision tower (patch 14, merge 2, as the preview profile's ``preprocessor_config.json``) and
    audio encoder of width 256. ``vocab_size``: the tokenizer's size rounded up to a multiple of 64.
    """
    config = {
        "_smoke_model": TINY_MARKER,
        "architectures": ["Dots3NoteForCausalLM"],
        "model_type": "dots3_note",
        "vocab_size": -(-tokenizer_size // 64) * 64,
        "hidden_size": 1024,
        "intermediate_size": 1024,
        "moe_intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_shared_experts": 1,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "q_lora_rank": 1536,
        "kv_lora_rank": KERNEL_SHAPES["kv_lora_rank"],
        "qk_rope_head_dim": KERNEL_SHAPES["qk_rope_head_dim"],
        "qk_nope_head_dim": KERNEL_SHAPES["qk_nope_head_dim"],
        "v_head_dim": KERNEL_SHAPES["v_head_dim"],
        "index_n_heads": KERNEL_SHAPES["index_n_heads"],
        "index_head_dim": KERNEL_SHAPES["index_head_dim"],
        "index_topk": KERNEL_SHAPES["index_topk"],
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window_size": 512,
        "swa_num_attention_heads": 64,
        "swa_q_lora_rank": 1536,
        "swa_kv_lora_rank": KERNEL_SHAPES["swa_kv_lora_rank"],
        "swa_qk_rope_head_dim": KERNEL_SHAPES["swa_qk_rope_head_dim"],
        "swa_qk_nope_head_dim": KERNEL_SHAPES["swa_qk_nope_head_dim"],
        "swa_v_head_dim": KERNEL_SHAPES["swa_v_head_dim"],
        "swa_rope_theta": 10000.0,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "num_nextn_predict_layers": 0,
        "attention_gate_type": "headwise",
        "swa_attention_gate_type": "headwise",
        "apply_mla_qkv_lora_rescale": False,
        "vision_config": {
            "embed_dim": 256,
            "hidden_size": 1024,
            "intermediate_size": 512,
            "moe_intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 1,
            "pyramid_num_routed": [4, 4],
            "capacity_factor": 2.0,
            "adapter_in_dim": 256,
            "adapter_out_dim": 1024,
            "adapter_merge_size": 2,
            "pre_pixel_shuffle": True,
            "enable_torch_compile": False,
            "enable_fp8_moe": False,
            "attn_implementation": "flash_attention_3",
            "use_qk_norm": True,
            "post_norm": True,
        },
        "audio_config": {
            "sampling_rate": 16000,
            "use_conv2d_stem": True,
            "merge_factor": 1,
            "chunk_seconds": 30,
            "encoder_type": "dots",
            "whisper_config": {
                "d_model": 256,
                "encoder_layers": 2,
                "encoder_attention_heads": 4,
                "encoder_ffn_dim": 512,
                "max_source_positions": 1500,
                "activation_function": "gelu",
                "num_mel_bins": 128,
            },
            "whisper_adapter_in_dim": 256,
            "whisper_adapter_out_dim": 1024,
            "downsample_hidden_size": 64,
        },
    }
    if mtp:
        config.update(MTP_CONFIG)
    return config


def write_tiny_model(out: Path, *, max_position_embeddings: int = TINY_MAX_POSITIONS, mtp: bool = False) -> Path:
    """Write the tiny random-weight ``dots3_note`` folder ``out`` (created if missing) and return it:
    :func:`write_model_folder` with :func:`tiny_config` (``mtp``: with an MTP layer) and the preview profile's
    chat template. The folder is also a studio profile (``load_profile``), so the inspector counts the same
    media with the same geometry."""
    def config(size: int, bos_token_id: int, eos_token_id: int) -> dict[str, Any]:
        return tiny_config(size, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                           max_position_embeddings=max_position_embeddings, mtp=mtp)

    return write_model_folder(out, config, max_position_embeddings=max_position_embeddings)


def write_model_folder(out: Path, config: Callable[[int, int, int], dict[str, Any]], *,
                       max_position_embeddings: int, chat_template: str | None = None) -> Path:
    """A random-weight model folder around the preview profile's tokenizer: the one builder of the smoke
    test's tiny ``dots3_note`` (:func:`write_tiny_model`) and the real-engine tier's tiny Qwen2
    (``scripts/build_tiny_model.py``: dots3_note's kernels are CUDA-only, so the CPU tier needs another network).

    Writes the preview profile's ``tokenizer.json`` (with the Dots special tokens) and
    ``preprocessor_config.json``; its ``tokenizer_config.json`` with ``model_max_length``; ``added_tokens.json``
    (dots3_note reads the image pad token from it); ``chat_template.jinja`` (``chat_template``, else the
    preview profile's); ``config.json`` from ``config(tokenizer size, bos id, eos id)`` (bos: the tokenizer's pad
    token, eos: its eos token); ``generation_config.json`` with those two ids. ``out`` is created if missing.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "preprocessor_config.json"):
        (out / name).write_bytes((PREVIEW_PROFILE_DIR / name).read_bytes())
    template = chat_template if chat_template is not None else (PREVIEW_PROFILE_DIR / "chat_template.jinja").read_text()
    (out / "chat_template.jinja").write_text(template)
    size, added = _tokenizer_facts(PREVIEW_PROFILE_DIR / "tokenizer.json")
    tokenizer_config = json.loads((PREVIEW_PROFILE_DIR / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = max_position_embeddings
    model_config = config(size, added[tokenizer_config["pad_token"]], added[tokenizer_config["eos_token"]])
    files = {
        "tokenizer_config.json": tokenizer_config,
        "added_tokens.json": added,
        "config.json": model_config,
        "generation_config.json": {"bos_token_id": model_config["bos_token_id"],
                                   "eos_token_id": model_config["eos_token_id"]},
    }
    for name, data in files.items():
        (out / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return out


# ---------------------------------------------------------------- turns and results
@dataclass(frozen=True)
class SmokeTurn:
    """One turn to run: a user message with its media (``(kind, path)``), tools for a forced call."""

    name: str
    prompt: str
    media: tuple[tuple[Kind, Path], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"
    max_tokens: int = DEFAULT_MAX_TOKENS
    copies: int = 1  # requests sent at once (the batch turn)
    min_prompt_tokens: int = 0  # the engine's prompt must have more tokens than this (the long turns)


def long_prompt() -> str:
    """A user message of well over :data:`LONG_PROMPT_TOKENS` tokens (about 1,400 with the preview tokenizer)."""
    numbers = ", ".join(str(n) for n in range(1, 701))
    return f"Here are the numbers from 1 to 700: {numbers}. Which of them is the largest? Answer in one word."


def default_turns(max_tokens: int = DEFAULT_MAX_TOKENS, examples: Path = EXAMPLES_DIR) -> tuple[SmokeTurn, ...]:
    """Text, image, audio, video with its sound track (the bundled examples), a forced tool call, a prompt over
    1,000 tokens twice, and :data:`BATCH` text requests at once."""
    from dots3_demo.tools import EXAMPLE_TOOLS

    return (
        SmokeTurn("text", "Say hello in one short sentence.", max_tokens=max_tokens),
        SmokeTurn("image", "Which month had the most rain in this chart?",
                  (("image", examples / "rain_chart.png"),), max_tokens=max_tokens),
        SmokeTurn("audio", "Answer the spoken question in one sentence.",
                  (("audio", examples / "spoken_question.wav"),), max_tokens=max_tokens),
        SmokeTurn("video", "What room number is on the door, and what password does the voice say?",
                  (("video", examples / "room_clip.mp4"),), max_tokens=max_tokens),
        SmokeTurn("tool", "What's the weather in Shanghai right now?", tools=tuple(EXAMPLE_TOOLS),
                  tool_choice="required", max_tokens=max(max_tokens, TOOL_MAX_TOKENS)),
        SmokeTurn("long", long_prompt(), max_tokens=max_tokens, min_prompt_tokens=LONG_PROMPT_TOKENS),
        SmokeTurn("long again", long_prompt(), max_tokens=max_tokens, min_prompt_tokens=LONG_PROMPT_TOKENS),
        SmokeTurn(f"{BATCH} at once", "Count from one to ten.", max_tokens=max_tokens, copies=BATCH),
    )


@dataclass(frozen=True)
class CountRow:
    """One modality of one turn: the engine's prompt tokens against the inspector's.

    ``inspector`` None: no inspector number (text); the row then only asks for some tokens.
    ``markers``: marker tokens included in ``inspector`` (2 per image or audio clip).
    """

    turn: str
    modality: str
    engine: int
    inspector: int | None = None
    markers: int = 0

    @property
    def ok(self) -> bool:
        return self.engine > 0 if self.inspector is None else self.engine == self.inspector


@dataclass(frozen=True)
class TurnResult:
    """What one turn showed: its count rows, figures, and problems with its lifecycle (plain words)."""

    turn: str
    rows: tuple[CountRow, ...] = ()
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    output_tokens: int = 0
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()  # names of the parsed calls
    problems: tuple[str, ...] = ()
    mtp: dict[str, Any] | None = None  # vLLM's spec-decode metrics (MTP acceptance), when it reported them

    @property
    def mismatches(self) -> tuple[CountRow, ...]:
        return tuple(row for row in self.rows if not row.ok)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.mismatches


@dataclass(frozen=True)
class SmokeReport:
    results: tuple[TurnResult, ...]
    unfinished: int | None = 0  # requests the engine still holds after the last turn (None: unknown)
    header: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results) and not self.unfinished


def exit_status(report: SmokeReport) -> int:
    """0 when every count matched and every turn ran its course, else 1."""
    return 0 if report.ok else 1


def count_rows(turn: str, prompt: PromptTokens, media: Sequence[Any]) -> tuple[CountRow, ...]:
    """The engine's ``prompt`` against the inspector's ``media`` (the chat's ``MediaItem``s)."""
    rows = [CountRow(turn, p.label, p.engine, p.inspector, p.markers) for p in token_pairs(prompt, tuple(media))]
    return (*rows, CountRow(turn, "text", prompt.text))


def lifecycle_problems(turn: SmokeTurn, final: Reply | None) -> tuple[str, ...]:
    """What went wrong with a turn's stream, given its reply at the end (None: the engine sent nothing; empty: it
    ran its course)."""
    if final is None:
        return ("the engine streamed nothing",)
    problems = []
    if not final.finished:
        problems.append("the stream ended before the turn finished")
    if final.stats.prompt is None:
        problems.append("the engine reported no prompt tokens")
    if final.stats.output_tokens <= 0:
        problems.append("the engine produced no output tokens")
    if final.stats.prompt is not None and final.stats.prompt.total <= turn.min_prompt_tokens:
        problems.append(f"the prompt has {final.stats.prompt.total:,} tokens, not over {turn.min_prompt_tokens:,}")
    if turn.tool_choice == "required":
        names = {t.get("function", t).get("name") for t in turn.tools}
        called = [c.name for c in final.tool_calls]
        if len(called) != 1 or called[0] not in names or final.finish_reason != "tool_calls":
            problems.append(f"expected one parsed call of {', '.join(sorted(map(str, names)))} and finish "
                            f"'tool_calls'; got {len(called)} call(s) {called or ''}, finish {final.finish_reason!r}"
                            + (" (raise --max-tokens?)" if final.finish_reason == "length" else ""))
    elif final.finished and final.finish_reason not in ("stop", "length"):
        problems.append(f"unexpected finish reason {final.finish_reason!r}")
    return tuple(problems)


def media_item(kind: str, path: Path, report: Any) -> Any:
    """The chat's ``MediaItem`` for an inspected file (the numbers the chat compares against)."""
    if kind == "video":
        return MediaItem("video", str(path), tokens=report.prompt_tokens, frame_tokens=report.image_pad_tokens,
                         audio_tokens=report.audio_pad_tokens)
    return MediaItem(kind, str(path), tokens=report.tokens)


def turn_request(turn: SmokeTurn, items: Sequence[Any], seq: int, copy: int = 0) -> TurnRequest:
    """The chat's own user message for ``turn``; greedy sampling; the video planned against ``seq``."""
    return build_turn(
        session_id=f"smoke-{turn.name.replace(' ', '-')}-{copy}",
        messages=[user_message(turn.prompt, items)],
        tools=turn.tools,
        sampling=SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=turn.max_tokens, seed=0),
        video=VideoSettings(seq=seq),
        tool_choice=turn.tool_choice,
    )


async def run_turn(engine: ChatEngine, turn: SmokeTurn, profile: Any, *, seq: int) -> TurnResult:
    """Inspect the turn's media, stream the turn through ``engine``, compare and check it."""
    from dots3_demo.inspection import InspectionError, VideoReport, inspect_file

    settings = VideoSettings(seq=seq, max_new_tokens=turn.max_tokens)  # what the engine gets (mm kwargs)
    try:
        items = []
        for kind, path in turn.media:
            report = await asyncio.to_thread(inspect_file, path, profile, settings, expected=kind)
            if isinstance(report, VideoReport) and not report.audio_pad_tokens:  # kind == "video"
                return TurnResult(turn.name, problems=(
                    f"the inspector drops the sound track of {Path(path).name} ({report.audio.reason}): "
                    "this turn would not test the sound track",))
            items.append(media_item(kind, Path(path), report))
    except (InspectionError, OSError) as exc:
        return TurnResult(turn.name, problems=(f"the inspector could not read the media: {one_line(exc)}",))
    try:
        finals = await asyncio.gather(*(_stream(engine, turn_request(turn, items, seq, copy))
                                        for copy in range(turn.copies)))
    except EngineUnavailable:
        raise
    except TurnRejected as exc:
        return TurnResult(turn.name, problems=(f"refused: {one_line(exc, 400)}",))
    except Exception as exc:  # noqa: BLE001 - reported as this turn's failure, the others still run
        return TurnResult(turn.name, problems=(f"the turn failed: {one_line(exc, 400) or type(exc).__name__}",))
    final = finals[0]
    stats = final.stats if final is not None else None
    rows = count_rows(turn.name, stats.prompt, items) if stats is not None and stats.prompt is not None else ()
    problems = list(lifecycle_problems(turn, final))
    if turn.copies > 1:  # every request on its own, and all the same prompt
        for copy, other in enumerate(finals[1:], start=2):
            problems += [f"request {copy} of {turn.copies}: {p}" for p in lifecycle_problems(turn, other)]
        totals = {f.stats.prompt.total for f in finals if f is not None and f.stats.prompt is not None}
        if len(totals) > 1:
            problems.append(f"the {turn.copies} requests got different prompt counts: {sorted(totals)}")
    done = [f.stats for f in finals if f is not None]
    ttfts = [s.ttft_s for s in done if s.ttft_s is not None]
    rates = [s.tokens_per_s for s in done if s.tokens_per_s]
    return TurnResult(
        turn.name, rows,
        ttft_s=max(ttfts) if ttfts else None,  # the slowest first token
        tokens_per_s=sum(rates) if rates else None,  # all requests together
        output_tokens=sum(s.output_tokens for s in done),
        finish_reason=final.finish_reason if final else None,
        tool_calls=tuple(c.name for c in final.tool_calls) if final else (),
        problems=tuple(problems),
        mtp=stats.mtp if stats else None,
    )


async def _stream(engine: ChatEngine, request: TurnRequest) -> Reply | None:
    """Stream one request to its end; the reply then (None: the engine sent nothing)."""
    reply: Reply | None = None
    async with contextlib.aclosing(engine.stream_turn(request)) as stream:
        async for delta in stream:
            reply = (reply or Reply(state="streaming")).add(delta)
    return reply


async def run_smoke(engine: ChatEngine, profile: Any, turns: Sequence[SmokeTurn], *, seq: int,
                    log: TextIO | None = None, header: Sequence[str] = (), turn_timeout: float | None = None,
                    configuration: str = "") -> SmokeReport:
    """Run ``turns`` one after the other on a started ``engine``; the inspector uses ``profile``.

    ``turn_timeout``: seconds a turn may take; one that takes longer fails, naming the engine's
    ``configuration``, and the turns after it (and after an engine that stopped) are not run.
    """
    results: list[TurnResult] = []
    where = f" (engine configuration: {configuration})" if configuration else ""
    for index, turn in enumerate(turns):
        started = time.monotonic()
        stopped = ""
        try:
            result = await asyncio.wait_for(run_turn(engine, turn, profile, seq=seq), turn_timeout)
        except TimeoutError:
            stopped = (f"did not finish within {turn_timeout:.0f} s: the engine hung{where}")
        except EngineUnavailable as exc:
            stopped = f"the engine stopped: {one_line(exc, 400)}{where}"
        if stopped:
            results.append(TurnResult(turn.name, problems=(stopped,)))
            skipped = f"not run: the {turn.name} turn failed"
            results += [TurnResult(t.name, problems=(skipped,)) for t in turns[index + 1:]]
            if log is not None:
                print(f"smoke: {turn.name} turn ✕ {stopped}", file=log, flush=True)
            break
        results.append(result)
        if log is not None:
            print(f"smoke: {turn.name} turn {'✓' if result.ok else '✕'} in {time.monotonic() - started:.1f} s",
                  file=log, flush=True)
    unfinished = engine.unfinished_requests()
    return SmokeReport(tuple(results), unfinished, tuple(header))


def mtp_line(result: TurnResult) -> str | None:
    """vLLM's MTP acceptance for a turn (its ``RequestSpecDecodeMetrics``), in one line."""
    m = result.mtp
    if not m:
        return None
    accepted, drafted = m.get("num_accepted_draft_tokens", 0), m.get("num_draft_tokens", 0)
    return (f"MTP {result.turn}: accepted {accepted:,} of {drafted:,} draft tokens "
            f"(rate {m.get('draft_acceptance_rate', 0.0):.2f}, mean acceptance length "
            f"{m.get('mean_acceptance_length', 1.0):.2f}) in {m.get('num_spec_steps', 0):,} steps")


# ---------------------------------------------------------------- the table
COLUMNS = ("turn", "modality", "engine", "inspector", "", "TTFT", "tok/s", "out", "finish")


def _n(value: int) -> str:
    return f"{value:,}"


def format_table(report: SmokeReport) -> str:
    """The report as a plain-text table, then its problems and a one-line verdict."""
    lines: list[list[str]] = []
    for result in report.results:
        figures = [
            f"{result.ttft_s:.2f} s" if result.ttft_s is not None else "—",
            f"{result.tokens_per_s:.1f}" if result.tokens_per_s else "—",
            _n(result.output_tokens),
            (result.finish_reason or "—") + (f" {', '.join(result.tool_calls)}" if result.tool_calls else ""),
        ]
        if not result.rows:
            lines.append([result.turn, "—", "—", "—", "✕", *figures])
        for i, row in enumerate(result.rows):
            inspector = "—" if row.inspector is None else (
                f"{_n(row.inspector - row.markers)} + {row.markers}" if row.markers else _n(row.inspector))
            mark = ("✓" if row.ok else "≠") if row.inspector is not None else ("✓" if row.ok else "✕")
            lines.append([row.turn if i == 0 else "", row.modality, _n(row.engine), inspector, mark,
                          *(figures if i == 0 else [""] * len(figures))])
    widths = [max(len(c), *(len(line[i]) for line in lines)) if lines else len(c) for i, c in enumerate(COLUMNS)]
    right = {2, 5, 6, 7}

    def render(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "  ".join(padded).rstrip()

    out = [*report.header, render(COLUMNS), render(["─" * w for w in widths]), *(render(line) for line in lines)]
    out.append("(inspector: image and audio as embeddings + 2 marker tokens per item, as the engine counts them; "
               f"{BATCH} at once: the slowest TTFT, the requests' tok/s added up, the first request's counts)")
    out += [line for line in map(mtp_line, report.results) if line]
    for result in report.results:
        out += [f"✕ {result.turn}: {problem}" for problem in result.problems]
        out += [f"≠ {result.turn}: {row.modality}: engine {_n(row.engine)}, inspector {_n(row.inspector)}"
                for row in result.mismatches if row.inspector is not None]
    if report.unfinished:
        out.append(f"✕ the engine still holds {report.unfinished} unfinished request(s) after the last turn")
    mismatches = sum(len(r.mismatches) for r in report.results)
    failed = sum(1 for r in report.results if r.problems)
    if report.ok:
        out.append(f"smoke: passed — {len(report.results)} turns, every prompt count equals the inspector's, "
                   "every turn finished, nothing left in the engine")
    else:
        out.append(f"smoke: FAILED — {mismatches} count mismatch(es), {failed} turn(s) with problems")
    return "\n".join(out)


# ---------------------------------------------------------------- the command
def gpu_problem() -> str | None:
    """Why dots3_note cannot run on this host (no CUDA GPU), in one line; None when it can.

    Fork-safe: torch counts devices through NVML (``PYTORCH_NVML_BASED_CUDA_CHECK``) and vLLM's
    platform detection uses NVML too, so no CUDA context exists before vLLM starts its processes.
    """
    saved = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        import torch

        has_gpu = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason too
        return f"PyTorch cannot be used here ({one_line(exc)})"
    finally:
        if saved is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = saved
    why = ("dots3_note's sparse MLA, FA3 and Triton kernels run only on an NVIDIA GPU; run the smoke test "
           "on a GPU host (here, `python app.py inspect FILE` shows what the model would see)")
    if not has_gpu:
        return f"no CUDA GPU on this host: {why}"
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cuda():
            return f"vLLM finds no CUDA platform here (it found {type(current_platform).__name__}): {why}"
    except Exception as exc:  # noqa: BLE001
        return f"vLLM cannot be used here ({one_line(exc)})"
    return None


def gpu_name() -> str:
    try:
        from vllm.platforms import current_platform

        major, minor = current_platform.get_device_capability() or (0, 0)
        return f"{current_platform.get_device_name()} (compute capability {major}.{minor})"
    except Exception:  # noqa: BLE001 - only for the header
        return "a CUDA GPU"


def engine_factory(engine_args: Any) -> Any:
    # Passed explicitly so the adapter does not tee this process's output (the web UI's load stage):
    # vLLM's log lines go straight to the terminal, and the table is never held in a pipe at exit.
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(engine_args)


async def start_and_run(engine: Any, model_dir: Path, turns: Sequence[SmokeTurn], header: list[str], *,
                        turn_timeout: float | None = None, configuration: str = "") -> SmokeReport | str:
    from dots3_demo.profiles import load_profile

    try:
        started = time.monotonic()
        try:
            await engine.start()
        except EngineUnavailable as exc:
            return one_line(exc, 600)
        seq = int(engine.max_model_len)
        header.append(f"engine: started in {time.monotonic() - started:.0f} s · max_model_len {_n(seq)} "
                      f"(the video is planned against it) · media limits {engine.mm_limits}")
        print(f"smoke: {header[-1]}", file=sys.stderr, flush=True)
        profile = load_profile(model_dir, max_model_len=seq, mm_limits=engine.mm_limits)
        return await run_smoke(engine, profile, turns, seq=seq, log=sys.stderr, header=header,
                               turn_timeout=turn_timeout, configuration=configuration)
    finally:
        await engine.shutdown()
