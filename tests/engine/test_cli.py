"""--engine / --endpoint / vLLM engine flags."""

from __future__ import annotations

import argparse

import pytest

from dots3_demo.engine.cli import add_engine_cli_args, build_engine, engine_args_from_namespace, engine_mode, new_parser
from dots3_demo.engine.remote import RemoteEngine


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
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
