"""The serve benchmark (``benchmarks/serve_bench.py``): both servers get the same engine, and its arithmetic.

No engine and no timing here: the studio's engine arguments and vLLM's own, parsed from the flags the
benchmark gives each, must be the same ``AsyncEngineArgs`` field by field (on a CUDA GPU too, where the
studio applies its CUDA-graph default); the figures are computed from given times.
"""

from __future__ import annotations

import argparse
import statistics

import pytest

from benchmarks import serve_bench
from benchmarks.serve_bench import Reply, Side
from dots3_demo.cli.engine import add_engine_cli_args, engine_args_from_namespace
from dots3_demo.cli.parser import new_parser
from dots3_demo.engine import args as engine_args


@pytest.fixture(scope="module")
def parsers(tmp_path_factory) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with pytest.MonkeyPatch.context() as mp:  # vLLM's flags are recorded for --help: not in ~/.cache
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        return add_engine_cli_args(new_parser()), AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())


@pytest.mark.parametrize("cuda", [True, False])
@pytest.mark.parametrize("extra", [
    [],
    ["--enforce-eager"],
    ["--compilation-config", '{"cudagraph_mode": "FULL"}'],
    ["--quantization", "fp8", "--max-num-batched-tokens", "8192"],
    ["--gpu-memory-utilization", "0.8", "--limit-mm-per-prompt", '{"image": 2}'],
])
def test_the_studio_and_vllms_server_get_the_same_engine(parsers, monkeypatch, cuda, extra):
    from vllm.engine.arg_utils import AsyncEngineArgs

    studio_parser, vllm_parser = parsers
    monkeypatch.setattr(engine_args, "on_cuda", lambda: cuda)
    flags = serve_bench.engine_flags(extra, cpu=not cuda, tiny=True, max_num_seqs=32)
    studio = engine_args_from_namespace(studio_parser.parse_args(["--engine", "inprocess", "--model", "/m", *flags]))
    vllm = AsyncEngineArgs.from_cli_args(
        vllm_parser.parse_args(["--model", "/m", *flags, *serve_bench.vllm_equivalents(extra, cpu=not cuda)]))
    differ = {k: (v, getattr(vllm, k)) for k, v in vars(studio).items() if v != getattr(vllm, k)}
    assert differ == {}
    assert studio.max_num_seqs == 32 and studio.load_format == "dummy"
    if cuda and not extra:
        assert str(vllm.compilation_config.cudagraph_mode).endswith(engine_args.DEFAULT_CUDAGRAPH_MODE)


def _reply(submitted, first, last, output, prompt=40, tokens=5, error=None) -> Reply:
    step = (last - first) / (tokens - 1)
    return Reply(submitted, tuple(first + i * step for i in range(tokens)), output, prompt, error)


def test_a_reply_s_ttft_and_rate():
    reply = _reply(10.0, 10.1, 12.1, output=201)
    assert reply.ttft == pytest.approx(0.1) and reply.rate == pytest.approx(100.0) and reply.ok
    assert Reply(1.0, (1.5,), 1, 40).rate is None  # one token: no interval
    assert not serve_bench.failed(1.0, "HTTP 500").ok


def test_sides_give_medians_and_whole_round_rates():
    side = Side(((_reply(0, 0.1, 2.1, 201), _reply(0, 0.3, 2.3, 201)), (_reply(5, 5.2, 7.2, 201),)))
    assert side.ttft_ms() == pytest.approx(200.0)
    assert side.ttft_ms(0.9) == pytest.approx(300.0)
    assert side.rate() == pytest.approx(100.0)
    assert side.all_rate() == pytest.approx(statistics.median([402 / 2.3, 201 / 2.2]))
    assert Side(((serve_bench.failed(0, "boom"),),)).errors == ["boom"]


@pytest.mark.parametrize("studio_ttft, studio_output, error, met", [
    (0.105, 201, None, True),   # 5 ms added, same tokens: met
    (0.115, 201, None, False),  # 15 ms added
    (0.105, 200, None, False),  # another output count: not the same requests
    (0.105, 201, "boom", False),
])
def test_a_row_meets_the_goals_only_when_every_figure_does(studio_ttft, studio_output, error, met):
    vllm = Side(((_reply(0, 0.1, 2.1, 201),),))
    studio = Side(((_reply(0, studio_ttft, 2.0 + studio_ttft, studio_output),
                    *([serve_bench.failed(0, error)] if error else [])),))
    line, ok = serve_bench.row_line(1, studio, vllm)
    assert ok is met
    assert line.startswith("| 1 | 100.0 / 100.0 | ")


def test_the_rate_goal_counts():
    vllm = Side(((_reply(0, 0.1, 2.1, 201),),))
    slow = Side(((_reply(0, 0.1, 2.2, 201),),))  # 95 % of vLLM's rate
    assert serve_bench.row_line(1, slow, vllm)[1] is False
    assert "95.2 %" in serve_bench.row_line(1, slow, vllm)[0]


def test_flags_after_the_double_dash_go_to_both_engines():
    args, extra = serve_bench.parse_args(["--rows", "1", "8", "--", "--enforce-eager", "--max-num-seqs", "8"])
    assert args.rows == [1, 8] and extra == ["--enforce-eager", "--max-num-seqs", "8"]
    assert "--compilation-config" not in serve_bench.vllm_equivalents(extra, cpu=False)
    assert "--compilation-config" in serve_bench.vllm_equivalents(["--max-num-seqs", "8"], cpu=False)
    assert "--compilation-config" not in serve_bench.vllm_equivalents(["-cc.cudagraph_mode=FULL"], cpu=False)
