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
