"""The serve benchmark (``benchmarks/serve_bench.py``): both servers get the same engine, and its arithmetic.

No engine and no timing here: the studio's engine arguments and vLLM's own, parsed from the flags the
benchmark gives each, must be the same ``AsyncEngineArgs`` field by field (on a CUDA GPU too, where the
studio applies its CUDA-graph default); the figures are computed from given times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from dataclasses import replace

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


def test_the_studio_side_reports_the_part_of_its_ttft_spent_in_vllm():
    """vLLM's own TTFT of a studio reply (the figures line) is read, and its median is a column of the row."""
    figures = "TTFT **0.62 s** · **446.8** tok/s · output **512** tok · prompt **26** (text 26) · finish `length`"
    assert serve_bench.TTFT_RE.search(figures)[1] == "0.62"
    replies = [replace(_reply(0, 0.7, 2.7, 201), engine_ttft=t) for t in (0.62, 0.02, 0.64)]
    studio, vllm = Side((tuple(replies),)), Side(((_reply(0, 0.1, 2.1, 201),),))
    assert studio.engine_ttft_ms() == pytest.approx(620.0)
    line, _ = serve_bench.row_line(1, studio, vllm)
    assert line.startswith("| 1 | 100.0 / 100.0 | 700.0 / 700.0 | 620 | **+600.0** |")


def test_each_row_is_warmed_up_on_both_sides_before_it_is_timed(monkeypatch, tmp_path, capsys):
    """Untimed rounds of each row run on both sides first (vLLM compiles kernels for the batch shapes it meets the
    first time); only the rounds after them are in the table and in --replies."""
    calls: list[tuple[str, int]] = []

    async def fake_round(side, base, requests, *, model, max_tokens):
        calls.append((side, requests))
        return [_reply(0, 0.1, 2.1, 201) for _ in range(requests)]

    @contextlib.contextmanager
    def fake_servers(*args, **kwargs):
        yield "http://studio", "http://vllm", 1.0, 1.0

    monkeypatch.setattr(serve_bench, "run_round", fake_round)
    monkeypatch.setattr(serve_bench, "both_servers", fake_servers)
    monkeypatch.setattr("dots3_demo.workbench.smoke.write_tiny_model", lambda folder: folder)
    monkeypatch.setattr(serve_bench, "gpu_line", lambda: "GPU")
    monkeypatch.setattr(serve_bench, "realtime_client", lambda: "normal priority (a test)")  # never this process
    replies = tmp_path / "replies.jsonl"
    serve_bench.main(["--rows", "1", "8", "--rounds", "3", "--warmup-rounds", "2", "--replies", str(replies)])
    first = [("studio", 8), ("vLLM", 8)]  # the start's warm-up, at the largest row
    row = lambda n: [("studio", n), ("vLLM", n), ("vLLM", n), ("studio", n)]  # noqa: E731
    timed = lambda n: [*row(n), ("studio", n), ("vLLM", n)]  # noqa: E731
    assert calls == first + row(1) + timed(1) + row(8) + timed(8)
    written = [json.loads(line) for line in replies.read_text().splitlines()]
    assert len(written) == 2 * 3 * (1 + 8) and {w["round"] for w in written} == {0, 1, 2}
    assert "after 2 untimed rounds per row and side" in capsys.readouterr().out
