"""The real-engine stream benchmark's parsing and arithmetic (``benchmarks/stream_bench.py --real-engine``).

No engine and no timing here: the figures line is read as the chat writes it (``chat_views.figures_md``),
the client's view is rebuilt from Gradio diffs, and the rates are computed from given times.
"""

from __future__ import annotations

import pytest

from benchmarks import stream_bench
from dots3_demo.core.records import Answer
from dots3_demo.core.reply import Reply
from dots3_demo.engine.protocol import TurnStats
from dots3_demo.ui import chat_views


@pytest.fixture(scope="module")
def bench():
    return stream_bench


def _figures(tokens_per_s, output_tokens, finished=True, finish_reason="length") -> str:
    stats = TurnStats(ttft_s=0.12, tokens_per_s=tokens_per_s, output_tokens=output_tokens)
    reply = Reply(Answer(stats=stats, finish_reason=finish_reason if finished else None),
                  "done" if finished else "streaming")
    return chat_views.figures_md(reply, ())


def test_the_figures_line_gives_the_engines_rate_count_and_finish(bench):
    line = _figures(1234.56, 2000)
    assert bench.parse_figures(line) == {"tok_s": pytest.approx(1234.6), "output": 2000, "finish": "length"}
    assert bench.parse_figures(_figures(87.0, 12_345, finish_reason="stop"))["output"] == 12_345
    assert bench.parse_figures(_figures(87.0, 40, finished=False)) is None  # still streaming
    assert bench.parse_figures(_figures(None, 1)) is None  # one token: vLLM gives no rate
    assert bench.parse_figures("⏳ sending…") is None and bench.parse_figures(None) is None


def test_reply_text_is_everything_after_the_last_user_message(bench):
    chatbot = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        {"role": "assistant", "content": "abc", "metadata": {"title": "Thinking"}},
        {"role": "assistant", "content": [{"type": "text", "text": "def"}]},
    ]
    assert bench.reply_text(chatbot) == "abc\ndef"
    assert bench.reply_text(chatbot[:3]) == ""
    assert bench.reply_text(None) == ""


def test_diffs_rebuild_the_reply_as_the_browser_does(bench):
    chatbot = [{"role": "user", "content": "hi"}]
    chatbot = bench.apply_diff(chatbot, [["add", [1], {"role": "assistant", "content": "Hel"}]])
    chatbot = bench.apply_diff(chatbot, [["append", [1, "content"], "lo"]])
    assert bench.reply_text(chatbot) == "Hello"
    assert bench.apply_diff("TTFT —", [["replace", [], "TTFT 0.1 s"]]) == "TTFT 0.1 s"


def test_received_rate_counts_the_engines_token_intervals_over_the_clients_span(bench):
    figures = {"tok_s": 100.0, "output": 1001, "finish": "length"}  # 1000 intervals in 10 s at the engine
    on_time = bench.session_figures([50.0, 52.0, 60.0], figures)
    assert on_time["received_tps"] == pytest.approx(100.0) and on_time["ratio"] == pytest.approx(1.0)
    assert on_time["engine_span"] == pytest.approx(10.0) and on_time["client_span"] == pytest.approx(10.0)
    assert on_time["updates_s"] == pytest.approx(0.2)
    late = bench.session_figures([50.0, 60.2], figures)  # the last token reached the client 200 ms late
    assert late["ratio"] == pytest.approx(10 / 10.2)
    assert bench.session_figures([50.0], figures) is None  # one update: no span
    assert bench.session_figures([50.0, 60.0], None) is None  # the reply never ended with figures


def test_a_row_adds_the_replies_rates_and_keeps_the_worst(bench):
    a = bench.session_figures([0.0, 10.0], {"tok_s": 100.0, "output": 1001, "finish": "length"})
    b = bench.session_figures([0.0, 25.0], {"tok_s": 50.0, "output": 1001, "finish": "stop"})  # 20 s at the engine
    row = bench.real_row(3, [a, b, None])
    assert row["measured"] == 2 and row["at_length"] == 1 and row["output"] == 1001
    assert row["engine_total"] == pytest.approx(150.0) and row["received_total"] == pytest.approx(140.0)
    assert row["ratio"] == pytest.approx(140 / 150) and row["worst"] == pytest.approx(0.8)
    assert row["engine_tps"] == pytest.approx(75.0) and row["lag_ms"] == pytest.approx(5000.0)
