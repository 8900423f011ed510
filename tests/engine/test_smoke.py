"""``python app.py smoke``, as far as a CPU host allows.

The tiny config against vLLM's own ``Dots3NoteConfig`` and the kernels' shapes (read from vLLM's
source), the folder as a studio profile, the comparison and the table on real numbers (vLLM's real
renderer and Dots processor give the engine's prompt tokens, through the product's
``InProcessEngine`` over a scripted ``AsyncLLM``; the inspector reads the same files), a mismatch and
a failed lifecycle giving a non-zero exit, the engine flags, ``--help``, and the refusal on a host
without a GPU. The forward pass itself needs a GPU (``python app.py smoke`` there).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dots3_demo.cli import smoke as smoke_command
from dots3_demo.profiles import PREVIEW_PROFILE_DIR, load_profile
from dots3_demo.workbench import smoke
from support.doubles import ScriptedAsyncLLM, scripted_engine

ROOT = Path(__file__).resolve().parents[2]
SEQ = 16384
CALL = ('<dots_function_call>\n<invoke name="get_weather">\n<parameter name="city">Shanghai</parameter>\n'
        '</invoke>\n</dots_function_call>')


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return smoke.write_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def config(tiny_dir) -> dict:
    return json.loads((tiny_dir / "config.json").read_text())


@pytest.fixture(scope="module")
def renderer():
    from tests.engine.real_renderer import build_preview_renderer

    return build_preview_renderer({"image": 8, "audio": 4, "video": 1})


class _ToolAwareLLM(ScriptedAsyncLLM):
    """Plays ``text`` for an ordinary turn and ``call`` when decoding is forced (structured outputs)."""

    def __init__(self, renderer, *, text=("Random", " words."), call=(CALL[:40], CALL[40:])) -> None:
        super().__init__(list(text))
        self.renderer = renderer
        self._text, self._call = list(text), list(call)

    async def generate(self, engine_input, sampling_params, request_id):
        self.script = self._call if sampling_params.structured_outputs is not None else self._text
        async with contextlib.aclosing(super().generate(engine_input, sampling_params, request_id)) as outputs:
            async for output in outputs:
                yield output

    def get_num_unfinished_requests(self) -> int:
        return len(self.generated) - len(self.closed_streams)


def _run(double, profile, turns):
    async def main():
        engine = scripted_engine(double, max_model_len=SEQ)
        await engine.start()
        return await smoke.run_smoke(engine, profile, turns, seq=SEQ)

    return asyncio.run(main())


# ---------------------------------------------------------------- the tiny model
def test_tiny_config_is_vllms_dots3_note(config):
    from vllm.transformers_utils.configs.dots3_note import Dots3NoteConfig

    hf = Dots3NoteConfig(**config)
    assert hf.model_type == "dots3_note" and config["architectures"] == ["Dots3NoteForCausalLM"]
    assert (hf.n_group, hf.topk_group, hf.num_nextn_predict_layers) == (1, 1, 0)  # no MTP layer to load
    assert hf.num_hidden_layers == len(hf.layer_types) == 2
    assert set(hf.layer_types) == {"full_attention", "sliding_attention"}  # both kernels run
    for name, value in smoke.KERNEL_SHAPES.items():
        assert getattr(hf, name) == value, name
    assert hf.sliding_window_size == 512 and hf.num_experts_per_tok <= hf.n_routed_experts


def test_tiny_config_meets_the_kernels_shapes_in_vllms_source(config):
    """The shapes the sliding-window kernels accept, read from vLLM's own attention module."""
    import vllm

    source = Path(vllm.__file__).parent / "models" / "dots3_note" / "nvidia" / "attention.py"
    classes = {node.name: node for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ClassDef)}

    def method(cls: str, name: str) -> ast.FunctionDef:
        return next(n for n in classes[cls].body if isinstance(n, ast.FunctionDef) and n.name == name)

    dims = next(n for n in ast.walk(method("Dots3NoteFlashAttnPrefillBackend", "supports_mla_dimensions"))
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "MLADimensions")
    prefill = {kw.arg: ast.literal_eval(kw.value) for kw in dims.keywords}
    assert prefill == {"qk_nope_head_dim": config["swa_qk_nope_head_dim"],
                       "qk_rope_head_dim": config["swa_qk_rope_head_dim"], "v_head_dim": config["swa_v_head_dim"]}
    returned = next(n for n in ast.walk(method("Dots3NoteTritonMLABackend", "get_supported_head_sizes"))
                    if isinstance(n, ast.Return))
    assert ast.literal_eval(returned.value) == [smoke.SWA_DECODE_HEAD_SIZE]
    assert config["swa_kv_lora_rank"] + config["swa_qk_rope_head_dim"] == smoke.SWA_DECODE_HEAD_SIZE


def test_tiny_folder_is_a_model_and_a_studio_profile(tiny_dir, config):
    tokenizer = json.loads((PREVIEW_PROFILE_DIR / "tokenizer.json").read_text())
    size = len(tokenizer["model"]["vocab"]) + len(tokenizer["added_tokens"])
    assert config["vocab_size"] >= size and config["vocab_size"] % 64 == 0
    added = json.loads((tiny_dir / "added_tokens.json").read_text())
    assert added["<|imgpad|>"] == next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|imgpad|>")
    tokenizer_config = json.loads((tiny_dir / "tokenizer_config.json").read_text())
    assert config["eos_token_id"] == added[tokenizer_config["eos_token"]]
    preprocessor = json.loads((tiny_dir / "preprocessor_config.json").read_text())["vision_config"]
    vision = config["vision_config"]
    assert (vision["patch_size"], vision["spatial_merge_size"], vision["temporal_patch_size"]) == (
        preprocessor["patch_size"], preprocessor["merge_size"], preprocessor["temporal_patch_size"])
    assert (tiny_dir / "chat_template.jinja").is_file()

    from dots3_demo.inspection import inspect_file

    profile = load_profile(tiny_dir)
    assert profile.tokenizer.convert_tokens_to_ids("<|imgpad|>") == added["<|imgpad|>"]
    chart = smoke.EXAMPLES_DIR / "rain_chart.png"
    assert inspect_file(chart, profile).tokens == inspect_file(chart, load_profile()).tokens > 0


# ---------------------------------------------------------------- the comparison and the table
def test_every_turn_matches_with_vllms_real_processor(tiny_dir, renderer):
    """All five turns through InProcessEngine: the engine's counts (vLLM's renderer and Dots processor)
    equal the inspector's for the same files, the forced call is parsed, and the exit status is 0."""
    double = _ToolAwareLLM(renderer)
    turns = smoke.default_turns(max_tokens=8)
    report = _run(double, load_profile(tiny_dir, max_model_len=SEQ), turns)
    table = smoke.format_table(report)
    assert report.ok, table
    assert smoke.exit_status(report) == 0
    assert [r.turn for r in report.results] == ["text", "image", "audio", "video", "tool", "long", "long again",
                                                 "8 at once"]
    long_rows = [row for r in report.results if r.turn.startswith("long") for row in r.rows]
    assert [row.engine > smoke.LONG_PROMPT_TOKENS for row in long_rows] == [True, True]  # vLLM's renderer counted
    batch = report.results[-1]
    assert batch.output_tokens == 8 * len(double._text) and len(double.generated) == 5 + 2 + 8
    rows = {(row.turn, row.modality): row for r in report.results for row in r.rows}
    assert rows["image", "image"].markers == 2 and rows["audio", "audio"].markers == 2
    assert rows["video", "video sound"].engine > 0 and rows["video", "video frames"].engine > 0
    assert ("video", "image") not in rows and ("text", "image") not in rows  # absent modalities: no row
    tool = report.results[4]
    assert tool.tool_calls == ("get_weather",) and tool.finish_reason == "tool_calls"
    # the forced turn was constrained by vLLM's structured outputs; the video planned against SEQ
    params = [p for _, p, _ in double.generated]
    assert params[4].structured_outputs is not None and params[4].max_tokens >= smoke.TOOL_MAX_TOKENS
    video_input = double.generated[3][0]
    assert video_input["mm_placeholders"]["video"]
    for needle in ("turn", "inspector", "TTFT", "tok/s", "video sound", "tool_calls get_weather", "smoke: passed"):
        assert needle in table, needle
    image_line = next(line for line in table.splitlines() if line.startswith("image"))
    inspector = rows["image", "image"].inspector
    assert f"{inspector - 2:,} + 2" in image_line and "✓" in image_line and "0.25 s" in image_line


def test_a_count_mismatch_exits_non_zero(tmp_path, tiny_dir, renderer):
    """An inspector whose profile differs from the engine's (smaller max_pixels) counts another image size."""
    other = tmp_path / "other"
    other.mkdir()
    for f in tiny_dir.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    pre = json.loads((other / "preprocessor_config.json").read_text())
    pre["vision_config"]["max_pixels"] = 100352
    (other / "preprocessor_config.json").write_text(json.dumps(pre))
    image_turn = next(t for t in smoke.default_turns(max_tokens=8) if t.name == "image")
    report = _run(_ToolAwareLLM(renderer), load_profile(other, max_model_len=SEQ), [image_turn])
    (result,) = report.results
    (row,) = result.mismatches
    assert row.modality == "image" and row.engine > row.inspector and not result.problems
    assert smoke.exit_status(report) == 1
    table = smoke.format_table(report)
    assert "≠" in table and f"≠ image: image: engine {row.engine:,}, inspector {row.inspector:,}" in table
    assert "smoke: FAILED — 1 count mismatch(es), 0 turn(s) with problems" in table


def test_a_tool_turn_without_a_parsed_call_fails(renderer, tiny_dir):
    tool_turn = next(t for t in smoke.default_turns() if t.name == "tool")
    report = _run(_ToolAwareLLM(renderer, call=("no call here",)), load_profile(tiny_dir), [tool_turn])
    (result,) = report.results
    assert result.rows and not result.mismatches  # the counts are fine; the lifecycle is not
    assert "expected one parsed call of calculator, get_weather, search" in result.problems[0]
    assert smoke.exit_status(report) == 1
    assert "✕ tool: expected one parsed call" in smoke.format_table(report)


def test_count_rows_text_only_and_unexpected_media():
    from dots3_demo.engine.protocol import PromptTokens

    (text,) = smoke.count_rows("text", PromptTokens(total=12, text=12), [])
    assert (text.modality, text.engine, text.inspector, text.ok) == ("text", 12, None, True)
    rows = smoke.count_rows("text", PromptTokens(total=20, text=12, image=8), [])
    assert [(r.modality, r.ok) for r in rows] == [("image", False), ("text", True)]  # media nobody sent


# ---------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def parser():
    return smoke_command.build_parser()


def test_engine_args_defaults_and_flags(parser, tiny_dir):
    tiny = smoke_command.smoke_engine_args(parser.parse_args(["--max-model-len", "4096"]), tiny_dir, tiny=True)
    assert (tiny.model, tiny.load_format, tiny.enforce_eager) == (str(tiny_dir), "dummy", False)
    assert tiny.gpu_memory_utilization == smoke.TINY_GPU_MEMORY_UTILIZATION and tiny.max_model_len == 4096
    assert tiny.mm_processor_cache_gb == 0 and tiny.limit_mm_per_prompt == {"image": 8, "audio": 4, "video": 1}
    from vllm.engine.arg_utils import AsyncEngineArgs

    given = smoke_command.smoke_engine_args(parser.parse_args(["--model", "/ckpt", "--gpu-memory-utilization", "0.5"]),
                                    Path("/ckpt"), tiny=False)
    assert (given.load_format, given.gpu_memory_utilization) == (AsyncEngineArgs.load_format, 0.5)


def test_help_lists_the_smoke_and_engine_flags(parser):
    text = parser.format_help()
    for flag in ("--max-tokens", "--keep-model", "--model", "--max-model-len", "--gpu-memory-utilization",
                 "--turn-timeout", "--mtp", "--enforce-eager", "--quantization", "--engine-stall-timeout"):
        assert flag in text, flag
    assert "--endpoint" not in text  # smoke always runs vLLM in-process


def test_refuses_on_a_host_without_a_gpu():
    if smoke.gpu_problem() is None:
        pytest.skip("this host has a CUDA GPU: run `python app.py smoke` instead")
    env = {k: v for k, v in os.environ.items() if k != "DOTS3_STUDIO_ARGS"}
    done = subprocess.run([sys.executable, "app.py", "smoke"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("smoke:")]
    assert len(said) == 1 and "no CUDA GPU" in said[0] and "GPU host" in said[0], done.stderr
    assert done.stdout == ""


# ---------------------------------------------------------------- issue 19: what operators run, hangs, MTP, FP8
def _on_gpu(monkeypatch) -> None:
    from dots3_demo.engine import args as engine_args

    monkeypatch.setattr(engine_args, "on_cuda", lambda: True)


def test_the_smoke_runs_the_studios_engine_configuration(parser, tiny_dir, monkeypatch):
    """The same engine arguments as ``app.py --engine inprocess`` (on a GPU: cudagraph_mode FULL_DECODE_ONLY,
    not eager); ``--enforce-eager`` and an operator's own mode are kept."""
    from dots3_demo.cli.engine import engine_args_from_namespace
    from dots3_demo.cli.studio import parse_args

    _on_gpu(monkeypatch)
    ns = parser.parse_args(["--model", str(tiny_dir)])
    args = smoke_command.smoke_engine_args(ns, tiny_dir, tiny=False)
    studio = engine_args_from_namespace(parse_args(["--engine", "inprocess", "--model", str(tiny_dir)]))
    assert (args.enforce_eager, args.compilation_config.cudagraph_mode.name) == (False, "FULL_DECODE_ONLY")
    assert studio.compilation_config.cudagraph_mode == args.compilation_config.cudagraph_mode
    assert studio.enforce_eager is args.enforce_eager is False
    assert smoke_command.engine_configuration(args).startswith("cudagraph_mode FULL_DECODE_ONLY · quantization none")
    eager = smoke_command.smoke_engine_args(parser.parse_args(["--enforce-eager"]), tiny_dir, tiny=True)
    assert eager.enforce_eager and eager.compilation_config.cudagraph_mode is None
    assert smoke_command.engine_configuration(eager).startswith("enforce_eager · ")
    chosen = smoke_command.smoke_engine_args(parser.parse_args(["-cc.cudagraph_mode=PIECEWISE"]), tiny_dir, tiny=True)
    assert chosen.compilation_config.cudagraph_mode.name == "PIECEWISE"


def test_mtp_and_fp8_options(parser, tmp_path):
    from vllm.transformers_utils.configs.dots3_note import Dots3NoteConfig

    folder = smoke.write_tiny_model(tmp_path / "mtp", mtp=True)
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_nextn_predict_layers"], config["mtp_layer_types"]) == (1, ["sliding_attention"])
    assert Dots3NoteConfig(**config).num_nextn_predict_layers == 1  # vLLM's own config reads it
    args = smoke_command.smoke_engine_args(parser.parse_args(["--mtp", "--quantization", "fp8"]), folder, tiny=True)
    assert args.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert (args.disable_log_stats, args.per_request_spec_decode_metrics) == (False, "summary")
    assert args.quantization == "fp8"
    assert 'quantization fp8 · speculative {"method": "mtp", "num_speculative_tokens": 1}' in (
        smoke_command.engine_configuration(args))
    own = smoke_command.smoke_engine_args(parser.parse_args(
        ["--mtp", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']), folder, tiny=True)
    assert own.speculative_config["num_speculative_tokens"] == 2  # the operator's own stays
    plain = smoke_command.smoke_engine_args(parser.parse_args([]), tiny_dir_without_mtp(tmp_path), tiny=True)
    assert plain.speculative_config is None


def tiny_dir_without_mtp(tmp_path: Path) -> Path:
    folder = smoke.write_tiny_model(tmp_path / "plain")
    assert json.loads((folder / "config.json").read_text())["num_nextn_predict_layers"] == 0
    assert "mtp_layer_types" not in json.loads((folder / "config.json").read_text())
    return folder


def test_the_table_shows_vllms_mtp_acceptance(tiny_dir, renderer):
    double = _ToolAwareLLM(renderer)
    double.spec_decode = True  # vLLM's RequestSpecDecodeMetrics: 1 of 2 drafts accepted
    report = _run(double, load_profile(tiny_dir, max_model_len=SEQ), [smoke.default_turns()[0]])
    assert report.results[0].mtp["num_draft_tokens"] == 2
    assert "MTP text: accepted 1 of 2 draft tokens (rate 0.50, mean acceptance length 1.50) in 2 steps" in (
        smoke.format_table(report))


def test_a_hung_turn_fails_naming_the_turn_and_the_configuration(tiny_dir, renderer):
    """A turn whose engine yields nothing more (a double held forever, as the hung GPU engine) fails at its time
    limit; the turns after it are not run; the exit status is 1."""
    double = _ToolAwareLLM(renderer)
    double.hold_at = 1  # after the first token, never released

    async def main():
        engine = scripted_engine(double, max_model_len=SEQ)
        await engine.start()
        turns = smoke.default_turns(max_tokens=8)
        return await smoke.run_smoke(engine, load_profile(tiny_dir, max_model_len=SEQ), turns[:2], seq=SEQ,
                                     turn_timeout=1.0, configuration="cudagraph_mode PIECEWISE · quantization none")

    report = asyncio.run(main())
    hung, skipped = report.results
    assert hung.problems == ("did not finish within 1 s: the engine hung (engine configuration: "
                             "cudagraph_mode PIECEWISE · quantization none)",)
    assert skipped.problems == ("not run: the text turn failed",)
    assert smoke.exit_status(report) == 1
    table = smoke.format_table(report)
    assert "✕ text: did not finish within 1 s: the engine hung (engine configuration: cudagraph_mode PIECEWISE" in table
    assert double.closed_streams == [double.generated[0][2]]  # the hung request's stream was closed (aborted)
