"""The one turn builder (issue 20 §1): every path that sends a turn (the chat, compare, ``app.py eval``, ``app.py
smoke``) sends the user message, system prompt, tools, sampling and video budget ``core.turns`` builds; the
chat's request is read off the product's ``InProcessEngine`` as it streams it."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dots3_demo.budget import VideoSettings
from dots3_demo.core.records import MediaItem, TurnSetting
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import StudioState, new_session
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT, asked_ahead, build_turn, new_media, panel_media, user_message
from dots3_demo.engine.protocol import SamplingSettings, TurnRequest
from dots3_demo.inspection.plan import FilePlan
from dots3_demo.ui import chat
from dots3_demo.workbench import batch, compare, smoke
from dots3_demo.workbench.evalset import EvalItem
from support.doubles import ScriptedAsyncLLM, scripted_engine

QUESTION = "What is in the picture?"
SAMPLING = SamplingSettings(temperature=0.3, top_p=0.9, top_k=20, max_tokens=77, seed=5)
VIDEO = VideoSettings(seq=4096, max_new_tokens=77)
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


class Recording:
    """The product's engine, with every request it is asked to stream kept."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.turns = engine, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def stream_turn(self, turn: TurnRequest) -> Any:
        self.turns.append(turn)
        return self.engine.stream_turn(turn)


def test_build_turn_puts_the_system_prompt_first_unless_blank_and_names_the_session():
    user = user_message(QUESTION, [MediaItem("image", "/m/a.png"), MediaItem("audio", "/m/b.wav")])
    assert user == {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "/m/a.png"}},
                                                {"type": "audio_url", "audio_url": {"url": "/m/b.wav"}},
                                                {"type": "text", "text": QUESTION}]}
    turn = build_turn(session_id="s1", system="Be brief.", messages=[user], tools=[TOOL], sampling=SAMPLING,
                      video=VIDEO, tool_choice="required")
    assert turn.messages == [{"role": "system", "content": "Be brief."}, user]
    assert (turn.tools, turn.sampling, turn.video, turn.tool_choice) == ([TOOL], SAMPLING, VIDEO, "required")
    assert turn.request_id.startswith("s1-") and turn.mm_processor_kwargs()["max_new_tokens"] == 77
    again = build_turn(session_id="s1", system="  ", messages=[user])
    assert again.messages == [user] and again.request_id != turn.request_id
    assert again.sampling == SamplingSettings() and again.video is None and again.tools == []
    assert user_message("", [MediaItem("video", "/m/c.mp4")])["content"] == [
        {"type": "video_url", "video_url": {"url": "/m/c.mp4"}}]


def test_panel_media_carries_the_inspectors_numbers_and_new_media_what_was_not_sent():
    video = SimpleNamespace(prompt_tokens=900, image_pad_tokens=700, audio_pad_tokens=150)
    studio = StudioState(video_path="/m/v.mp4", video=video, images=(("/m/a.png", SimpleNamespace(tokens=64)),),
                         audio_path="/m/b.wav", audio=SimpleNamespace(tokens=25))
    items = panel_media(studio)
    assert items == [MediaItem("video", "/m/v.mp4", 900, 700, 150), MediaItem("image", "/m/a.png", 64),
                     MediaItem("audio", "/m/b.wav", 25)]
    session = replace(new_session(), media=(items[1],))
    assert new_media(studio, session) == [items[0], items[2]]


def _chat_turn(image: str) -> TurnRequest:
    """The request the chat sends for QUESTION with ``image`` in the panel."""
    engine = Recording(scripted_engine(ScriptedAsyncLLM(["fine"])))
    studio = StudioState(settings=VIDEO, images=((image, SimpleNamespace(tokens=64)),))
    settings = ChatSettings(sampling=SAMPLING)

    async def run() -> None:
        async with contextlib.aclosing(chat.send_message(engine, studio, new_session(), QUESTION, settings)) as views:
            async for _ in views:
                pass

    asyncio.run(run())
    assert len(engine.turns) == 1
    return engine.turns[0]


def test_the_chat_compare_eval_and_smoke_send_the_turn_core_builds(tmp_path: Path):
    image = str(tmp_path / "a.png")
    item = MediaItem("image", image, tokens=64)
    expected = build_turn(session_id="x", system=DEFAULT_SYSTEM_PROMPT, messages=[user_message(QUESTION, [item])],
                          sampling=SAMPLING, video=VIDEO)

    def same(turn: TurnRequest, *, system: bool = True) -> None:
        messages = expected.messages if system else expected.messages[1:]
        assert (turn.messages, turn.sampling, turn.video) == (messages, SAMPLING, VIDEO)

    same(_chat_turn(image))

    studio = StudioState(settings=VIDEO, images=((image, SimpleNamespace(tokens=64)),))
    plan = compare.SidePlan("A", TurnSetting(video=VIDEO, sampling=SAMPLING), studio=studio)
    same(compare.side_turn(compare.new_compare_session(), plan, QUESTION, DEFAULT_SYSTEM_PROMPT))

    eval_item = EvalItem(id="q1", line=1, media=("a.png",), files=(image,), prompt=QUESTION, video=VIDEO,
                         sampling=SAMPLING, tools=(TOOL,))
    turn = batch.item_turn(eval_item, [FilePlan({"file": image, "kind": "image"})], "run-1")
    same(turn)
    assert turn.tools == [TOOL]
    assert batch.item_turn(replace(eval_item, system=""), [FilePlan({"file": image, "kind": "image"})],
                           "run-1").messages == expected.messages[1:]

    smoke_turn = smoke.SmokeTurn("image", QUESTION, media=(("image", Path(image)),), tools=(TOOL,),
                                 tool_choice="required")
    sent = smoke.turn_request(smoke_turn, [item], seq=4096)
    assert sent.messages == expected.messages[1:]  # the smoke test sends no system prompt
    assert (sent.tools, sent.tool_choice, sent.video) == ([TOOL], "required", VideoSettings(seq=4096))


class _Stream:
    """An async generator's run, recorded: when it was first asked, whether it was closed, how it ended."""

    def __init__(self, items: list[Any], *, hold: asyncio.Event | None = None, error: Exception | None = None) -> None:
        self.items, self.hold, self.error = items, hold, error
        self.asked = self.closed = self.cancelled = False

    async def run(self):
        self.asked = True
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.error is not None:
                raise self.error
            for item in self.items:
                yield item
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.closed = True


def test_asked_ahead_asks_for_the_first_item_before_the_caller_does_and_yields_every_item():
    async def main():
        stream = _Stream([1, 2, 3])
        async with asked_ahead(stream.run()) as items:
            await asyncio.sleep(0)  # the caller is elsewhere (the chat: at its "sending…" yield)
            assert stream.asked  # the engine already has the request
            got = [item async for item in items]
        assert got == [1, 2, 3] and stream.closed
        empty = _Stream([])
        async with asked_ahead(empty.run()) as items:
            assert [item async for item in items] == []

    asyncio.run(main())


def test_asked_ahead_raises_the_first_asks_error_to_the_caller():
    async def main():
        stream = _Stream([1], error=ValueError("refused"))
        with pytest.raises(ValueError, match="refused"):
            async with asked_ahead(stream.run()) as items:
                await asyncio.sleep(0)
                async for _ in items:
                    pass
        assert stream.closed

    asyncio.run(main())


def test_asked_ahead_left_before_the_first_item_cancels_the_ask_and_closes_the_stream(caplog):
    async def main():
        hold = asyncio.Event()
        stream = _Stream([1], hold=hold)
        async with asked_ahead(stream.run()):
            await asyncio.sleep(0)
            assert stream.asked and not stream.closed
        assert stream.cancelled and stream.closed  # an engine stream closed so aborts its request
        # the first ask ended in an error nobody awaited: it is not reported as a lost task exception
        failed = _Stream([], error=ValueError("lost"))
        async with asked_ahead(failed.run()):
            await asyncio.sleep(0.01)
        assert failed.closed

    import gc
    asyncio.run(main())
    gc.collect()
    assert "exception was never retrieved" not in caplog.text


def test_asked_ahead_passes_a_cancel_of_the_caller_to_the_ask():
    async def main():
        hold = asyncio.Event()
        stream = _Stream([1], hold=hold)

        async def consume():
            async with asked_ahead(stream.run()) as items:
                async for _ in items:
                    pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.01)
        task.cancel()  # Gradio's Stop, while the caller waits for the first item
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.cancelled and stream.closed

    asyncio.run(main())
