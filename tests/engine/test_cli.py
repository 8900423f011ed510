"""--engine / --endpoint / vLLM engine flags."""

from __future__ import annotations

import argparse

import pytest

from dots3_demo.cli.engine import add_engine_cli_args, build_engine, engine_args_from_namespace, engine_mode
from dots3_demo.cli.parser import new_parser
from dots3_demo.engine.remote import RemoteEngine


@pytest.fixture(scope="module")
def parser(tmp_path_factory) -> argparse.ArgumentParser:
    with pytest.MonkeyPatch.context() as mp:  # vLLM's flags are recorded for --help: not in ~/.cache
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        return add_engine_cli_args(new_parser())


def test_modes(parser):
    assert engine_mode(parser.parse_args([])) == "none"
    assert engine_mode(parser.parse_args(["--endpoint", "http://h:8000/v1"])) == "remote"
    assert engine_mode(parser.parse_args(["--engine", "inprocess", "--model", "/m"])) == "inprocess"
    assert build_engine(parser.parse_args(["--model", "/profile"])) is None
    assert isinstance(build_engine(parser.parse_args(["--endpoint", "http://h:8000/v1"])), RemoteEngine)


def test_inprocess_engine_args_with_dots_defaults(parser):
    ns = parser.parse_args(["--engine", "inprocess", "--model", "/ckpt", "--max-model-len", "8192",
                            "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'])
    args = engine_args_from_namespace(ns)
    assert args.model == "/ckpt" and args.max_model_len == 8192
    assert args.mm_processor_cache_gb == 0
    assert args.limit_mm_per_prompt == {"image": 8, "audio": 4, "video": 1}
    assert args.per_request_spec_decode_metrics == "summary"
    assert engine_args_from_namespace(parser.parse_args(["--model", "/ckpt"])) is None


def test_user_cache_setting_is_kept(parser, caplog):
    ns = parser.parse_args(["--engine", "inprocess", "--model", "/ckpt", "--mm-processor-cache-gb", "4",
                            "--limit-mm-per-prompt", '{"image": 2}'])
    args = engine_args_from_namespace(ns)
    assert args.mm_processor_cache_gb == 4
    assert args.limit_mm_per_prompt == {"image": 2}


def test_inprocess_needs_model(parser):
    with pytest.raises(SystemExit):
        engine_args_from_namespace(parser.parse_args(["--engine", "inprocess"]))


@pytest.mark.parametrize("flags, expected", [
    (["--language-model-only"], {"language_model_only": True}),
    (["--kv-cache-dtype", "fp8"], {"kv_cache_dtype": "fp8"}),
    (["-tp", "2", "--pipeline-parallel-size", "2"], {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}),
    (["--enforce-eager", "--max-num-batched-tokens", "8192"], {"enforce_eager": True, "max_num_batched_tokens": 8192}),
    (["--gpu-memory-utilization", "0.8", "--max-num-seqs", "16"], {"gpu_memory_utilization": 0.8, "max_num_seqs": 16}),
    (["--enable-prefix-caching", "--dtype", "bfloat16"], {"enable_prefix_caching": True, "dtype": "bfloat16"}),
    (["--quantization", "fp8", "--trust-remote-code"], {"quantization": "fp8", "trust_remote_code": True}),
    (["--compilation-config", '{"mode": 0}'], {}),
    (["--served-model-name", "dots", "--enable-log-requests"],
     {"served_model_name": ["dots"], "enable_log_requests": True}),
], ids=["language-model-only", "kv-cache-dtype", "parallel", "eager", "memory", "prefix-caching", "quantization",
        "compilation-config", "served-name"])
def test_any_vllm_flag_builds_engine_args_on_this_host(parser, flags, expected):
    """vLLM's whole flag set parses here (a CPU host, CUDA build), into real ``AsyncEngineArgs``."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    args = engine_args_from_namespace(parser.parse_args(["--engine", "inprocess", "--model", "/ckpt", *flags]))
    assert isinstance(args, AsyncEngineArgs)
    assert {k: getattr(args, k) for k in expected} == expected
    assert args.mm_processor_cache_gb == 0 and args.limit_mm_per_prompt == {"image": 8, "audio": 4, "video": 1}


# ---------------------------------------------------------------- the CUDA-graph mode (issue 19)
def _cudagraph_mode(args) -> str | None:
    mode = args.compilation_config.cudagraph_mode
    return None if mode is None else mode.name


def _on_gpu(monkeypatch, cuda: bool) -> None:
    from dots3_demo.engine import args as engine_args

    monkeypatch.setattr(engine_args, "on_cuda", lambda: cuda)


def test_a_gpu_gets_full_decode_only_when_nobody_chose_and_the_log_says_so(parser, monkeypatch, caplog):
    _on_gpu(monkeypatch, True)
    with caplog.at_level("WARNING", logger="dots3_demo.engine.args"):
        args = engine_args_from_namespace(parser.parse_args(["--engine", "inprocess", "--model", "/ckpt"]))
    assert _cudagraph_mode(args) == "FULL_DECODE_ONLY" and not args.enforce_eager
    _on_gpu(monkeypatch, False)  # the parser's own default CompilationConfig was not changed
    again = engine_args_from_namespace(parser.parse_args(["--engine", "inprocess", "--model", "/m"]))
    assert _cudagraph_mode(again) is None
    assert any("cudagraph_mode FULL_DECODE_ONLY" in r.getMessage() and "hang" in r.getMessage()
               for r in caplog.records), caplog.text


def test_the_cpu_keeps_vllms_defaults(parser, monkeypatch, caplog):
    _on_gpu(monkeypatch, False)
    with caplog.at_level("WARNING", logger="dots3_demo.engine.args"):
        args = engine_args_from_namespace(parser.parse_args(["--engine", "inprocess", "--model", "/ckpt"]))
    assert _cudagraph_mode(args) is None  # vLLM decides (its CPU build has no CUDA graphs)
    assert "cudagraph_mode" not in caplog.text


@pytest.mark.parametrize("flags, mode, eager", [
    (["--compilation-config", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'], "FULL_AND_PIECEWISE", False),
    (["-cc.cudagraph_mode=PIECEWISE"], "PIECEWISE", False),
    (["--compilation-config", '{"cudagraph_mode": "NONE"}'], "NONE", False),
    (["--enforce-eager"], None, True),
    (["-O0"], None, False),
], ids=["compilation-config", "dotted", "none", "enforce-eager", "O0"])
def test_an_operators_own_choice_is_kept(parser, monkeypatch, caplog, flags, mode, eager):
    _on_gpu(monkeypatch, True)
    with caplog.at_level("WARNING", logger="dots3_demo.engine.args"):
        args = engine_args_from_namespace(parser.parse_args(["--engine", "inprocess", "--model", "/ckpt", *flags]))
    assert (_cudagraph_mode(args), bool(args.enforce_eager)) == (mode, eager)
    assert "cudagraph_mode FULL_DECODE_ONLY" not in caplog.text


def test_other_compilation_settings_keep_and_get_the_default(parser, monkeypatch):
    _on_gpu(monkeypatch, True)
    args = engine_args_from_namespace(parser.parse_args(
        ["--engine", "inprocess", "--model", "/ckpt", "--compilation-config", '{"max_cudagraph_capture_size": 64}']))
    assert _cudagraph_mode(args) == "FULL_DECODE_ONLY" and args.compilation_config.max_cudagraph_capture_size == 64


def test_programmatic_engine_args_get_the_default_too(monkeypatch):
    from dots3_demo.engine.args import make_engine_args

    _on_gpu(monkeypatch, True)
    assert _cudagraph_mode(make_engine_args("/ckpt")) == "FULL_DECODE_ONLY"
    assert _cudagraph_mode(make_engine_args("/ckpt", compilation_config={"cudagraph_mode": "FULL"})) == "FULL"
    assert make_engine_args("/ckpt", enforce_eager=True).compilation_config.cudagraph_mode is None


def test_eval_builds_the_same_engine_args(monkeypatch, tmp_path):
    from dots3_demo.cli.eval import build_parser

    _on_gpu(monkeypatch, True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    argv = ["set.jsonl", "--out", str(tmp_path / "out"), "--engine", "inprocess", "--model", "/ckpt"]
    engine = build_engine(build_parser(argv).parse_args(argv))
    assert _cudagraph_mode(engine.engine_args) == "FULL_DECODE_ONLY"
