"""A reply that finished with ``length`` says which limit it ran into (issue 18 §6): the request's max tokens,
or the context (prompt + output reached the engine's max model len) — worked out from the engine's counts, in
both adapters, shown on the figures line, the rating line and the session report."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from dots3_demo.core.records import Answer
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine import TurnRequest
from dots3_demo.engine.protocol import PromptTokens, SamplingSettings, TurnStats
from dots3_demo.engine.remote import RemoteEngine
from dots3_demo.engine.stats import finish_words, length_limit
from dots3_demo.ui import chat, chat_views
from dots3_demo.workbench import report_html
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.engine.test_remote import Server, _chunk, _serve


def _stats(prompt: int | None, output: int, max_tokens: int | None, max_model_len: int | None) -> TurnStats:
    return TurnStats(output_tokens=output, prompt=None if prompt is None else PromptTokens(total=prompt),
                     max_tokens=max_tokens, max_model_len=max_model_len)


@pytest.mark.parametrize(("prompt", "output", "max_tokens", "max_model_len", "limit", "words"), [
    # the reply: max tokens 1,024, a 1,223-token prompt in a 2,048 context, stopped at 825 tokens
    (1223, 825, 1024, 2048, "context", "length · context full (2,048)"),
    (100, 1024, 1024, 2048, "max tokens", "length · max tokens (1,024)"),
    (1024, 1024, 1024, 2048, "both", "length · max tokens (1,024) and context full (2,048)"),
    # a server that does not report its context length: short of max tokens, the sum says how far it got
    (1223, 825, 1024, None, "short of max tokens",
     "length · short of max tokens (1,024): prompt + output = 2,048, the context length is not known"),
    (None, 1024, 1024, None, "max tokens", "length · max tokens (1,024)"),
    (None, 825, 1024, 2048, None, "length"),  # no prompt count: nothing to say
    (100, 500, None, None, None, "length"),  # a record made before the limits were kept
    (100, 500, 1024, 2048, None, "length"),  # neither limit reached (a server's own cap): no guess
])
def test_which_limit_a_length_finish_ran_into(prompt, output, max_tokens, max_model_len, limit, words):
    stats = _stats(prompt, output, max_tokens, max_model_len)
    assert length_limit("length", stats) == limit
    assert finish_words("length", stats) == words


def test_other_finishes_are_their_reason():
    stats = _stats(1223, 825, 1024, 2048)
    assert length_limit("stop", stats) is None and finish_words("stop", stats) == "stop"
    assert finish_words(None, stats) == "" and finish_words("length", None) == "length"


def test_the_figures_the_rating_line_and_the_report_say_context_full():
    stats = _stats(1223, 825, 1024, 2048)
    answer = Answer(text="…", finish_reason="length", stats=stats)
    assert chat_views.finish_md("length", stats) == "finish `length` · **context full (2,048)**"
    assert "finish length · context full (2,048)" in report_html.stats_html(stats, "length")
    by_tokens = _stats(100, 1024, 1024, 2048)
    assert chat_views.finish_md("length", by_tokens) == "finish `length` · **max tokens (1,024)**"
    session = replace(new_session(), messages=({"role": "user", "content": "q"}, {"role": "assistant", "content": "…"}),
                      answers=(answer,))
    assert "finish `length` · **context full (2,048)**" in chat_views.rating_md(session, 0)


def test_in_process_a_reply_cut_by_the_context_says_so():
    """The InProcessEngine over the scripted AsyncLLM: its prompt is 16 tokens; with max model len 20, four
    output tokens fill the context long before max tokens 64."""
    double = ScriptedAsyncLLM(["a", "b", "c", "d"], finish_reason="length")
    double.model_config.max_model_len = 20
    engine = scripted_engine(double, max_model_len=20)
    settings = ChatSettings(min_interval_s=0.0, sampling=SamplingSettings(max_tokens=64))

    async def main():
        return [v async for v in chat.send_message(engine, initial_state(32768), new_session(), "hi", settings)][-1]

    final = asyncio.run(main())
    stats = final.session.answers[0].stats
    assert (stats.prompt.total, stats.output_tokens, stats.max_tokens, stats.max_model_len) == (16, 4, 64, 20)
    assert "finish `length` · **context full (20)**" in final.figures
    # the same reply reaching max tokens instead
    settings = replace(settings, sampling=SamplingSettings(max_tokens=4))
    double.model_config.max_model_len = 32768
    final = asyncio.run(main())
    assert "finish `length` · **max tokens (4)**" in final.figures


def test_remote_uses_the_servers_max_model_len():
    """The server's /v1/models says max_model_len 4096; its usage: prompt 4,000, output 96 of max tokens 512."""
    chunks = [_chunk({"role": "assistant", "content": "words"}), _chunk({}, finish="length"),
              _chunk(usage={"prompt_tokens": 4000, "completion_tokens": 96, "total_tokens": 4096})]

    async def main():
        server = Server(chunks)
        runner, url = await _serve(server)
        try:
            engine = RemoteEngine(url)
            await engine.start()
            turn = TurnRequest(session_id="r", messages=[{"role": "user", "content": "hi"}],
                               sampling=SamplingSettings(max_tokens=512))
            deltas = [d async for d in engine.stream_turn(turn)]
            await engine.shutdown()
        finally:
            await runner.cleanup()
        return deltas[-1]

    final = asyncio.run(main())
    assert (final.stats.max_tokens, final.stats.max_model_len) == (512, 4096)
    assert finish_words(final.finish_reason, final.stats) == "length · context full (4,096)"
