"""The chat runs as many replies at once as the engine has sequence slots, also when the operator named no
``--max-num-seqs`` (``dots3_demo.serving.capacity``): the page is built before vLLM resolves its default, and
the studio used to serve one reply at a time, app-wide."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import httpx
import pytest

from benchmarks import gradio_queue
from benchmarks.stream_bench import apply_diff, chat_payload, reply_text
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.serving.capacity import CHAT_CONCURRENCY_ID, OTHER_EVENTS, fit_queue
from support.doubles import ScriptedAsyncLLM
from support.live import live_app

SEQ = 32768
SLOTS = 6  # what "vLLM" resolves (the double's scheduler config), never named in the engine args
AT_ONCE = 4


def _engine(double: ScriptedAsyncLLM, max_num_seqs: int | None) -> InProcessEngine:
    args = SimpleNamespace(model="scripted", mm_processor_cache_gb=0, max_model_len=SEQ, max_num_seqs=max_num_seqs)
    return InProcessEngine(args, engine_factory=lambda _args: double)


async def _send_at_once(url: str, double: ScriptedAsyncLLM, n: int) -> tuple[int, list[str]]:
    """``n`` browser-like sessions send at once; returns how many requests the engine held together before any
    was let go, and each session's last reply text."""
    async with httpx.AsyncClient(timeout=60) as http:
        config = (await http.get(f"{url}/config")).json()
        fn_index, data = chat_payload(config, **{"chat-message": "hello", "max-tokens": 16})

        async def one() -> str:
            session = gradio_queue.new_session()
            await gradio_queue.join(http, url, fn_index, data, session)
            chatbot = None
            async for _, message in gradio_queue.messages(http, url, session):
                if message.get("msg") == "process_generating":
                    edits = message["output"]["data"][0]
                    chatbot = edits if chatbot is None else apply_diff(chatbot, edits)
            return reply_text(chatbot)

        sessions = [asyncio.create_task(one()) for _ in range(n)]
        deadline = time.monotonic() + 10
        while len(double.generated) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a limit would keep the others waiting in Gradio's queue, not in the engine
        held = len(double.generated)
        double.released.set()
        return held, list(await asyncio.wait_for(asyncio.gather(*sessions), 30))


def _wait_ready(engine: InProcessEngine, demo) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if engine.status.state == "ready":
            time.sleep(1.0)  # the studio checks the engine's state every 0.25 s
            return
        time.sleep(0.05)
    raise AssertionError(f"engine {engine.status.state}")


@pytest.mark.parametrize("named", [None, 3], ids=["vllm-default", "operator-flag"])
def test_replies_at_once_follow_the_engines_resolved_capacity(profile, named):
    double = ScriptedAsyncLLM(["one ", "two ", "three"], hold_at=1, max_num_seqs=SLOTS if named is None else named)
    engine = _engine(double, named)
    assert engine.capacity == (named or 1)  # all the page knows when it is built: the flag, else 1
    with live_app(profile, engine, seq=SEQ, start_engine=True) as demo:
        _wait_ready(engine, demo)
        held, texts = asyncio.run(_send_at_once(demo.local_url.rstrip("/"), double, AT_ONCE))
        chat_fns = [fn for fn in demo.fns.values() if fn.concurrency_id == CHAT_CONCURRENCY_ID]
        limit = demo._queue.event_queue_per_concurrency_id[CHAT_CONCURRENCY_ID].concurrency_limit
        jobs = demo._queue.max_thread_count
    assert held == min(AT_ONCE, named or SLOTS), held  # with the limit left at 1: one reply at a time
    assert len(texts) == AT_ONCE and all("one two three" in text for text in texts), texts
    assert len(chat_fns) >= 5 and {fn.concurrency_limit for fn in chat_fns} == {named or SLOTS} == {limit}
    assert jobs >= (named or SLOTS) + OTHER_EVENTS
    assert engine.capacity == (named or SLOTS)


def test_fit_queue_grows_gradios_job_slots_and_never_shrinks_them():
    chat = SimpleNamespace(concurrency_limit=1)
    fns = {0: SimpleNamespace(concurrency_id=CHAT_CONCURRENCY_ID, concurrency_limit=1),
           1: SimpleNamespace(concurrency_id="inspect", concurrency_limit=2)}
    queue = SimpleNamespace(event_queue_per_concurrency_id={CHAT_CONCURRENCY_ID: chat}, max_thread_count=40,
                            active_jobs=[None] * 40)
    blocks = SimpleNamespace(fns=fns, _queue=queue)
    fit_queue(blocks, 128)
    assert chat.concurrency_limit == fns[0].concurrency_limit == 128 and fns[1].concurrency_limit == 2
    assert queue.max_thread_count == len(queue.active_jobs) == 128 + OTHER_EVENTS
    fit_queue(blocks, 2, others=1)
    assert chat.concurrency_limit == 2 and queue.max_thread_count == len(queue.active_jobs) == 128 + OTHER_EVENTS
