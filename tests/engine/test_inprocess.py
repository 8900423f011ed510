"""InProcessEngine against a scripted AsyncLLM double (real vLLM output objects)."""

from __future__ import annotations

import asyncio
import json

import pytest

from dots3_demo.budget import VideoSettings
from dots3_demo.engine import (
    ChatEngine,
    EngineUnavailable,
    SamplingSettings,
    ToolCall,
    TurnRejected,
    TurnRequest,
)
from dots3_demo.engine.inprocess import MM_CACHE_WARNING, InProcessEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from support.doubles import ScriptedAsyncLLM
from tests.engine.media import make_clip, make_png


class _Args:
    model = "stub"
    mm_processor_cache_gb = 0
    max_model_len = 32768
    max_num_seqs = 4


async def _engine(double: ScriptedAsyncLLM) -> InProcessEngine:
    engine = InProcessEngine(_Args(), engine_factory=lambda args: double)
    await engine.start()
    return engine


def _turn(text: str = "hi", **kwargs) -> TurnRequest:
    return TurnRequest(session_id="s1", messages=[{"role": "user", "content": text}], **kwargs)


async def _collect(engine, turn):
    return [delta async for delta in engine.stream_turn(turn)]


def test_the_adapter_is_a_chat_engine():
    engine = InProcessEngine(_Args(), engine_factory=lambda args: None)
    assert isinstance(engine, ChatEngine)  # every hook the UI uses
    assert (engine.model, engine.status.state, engine.capacity) == ("stub", "idle", 4)


def test_streams_deltas_and_finishes():
    async def main():
        double = ScriptedAsyncLLM(["Hel", "lo", " world"])
        engine = await _engine(double)
        sampling = SamplingSettings(temperature=0.2, max_tokens=64, seed=3, top_k=20)
        deltas = await _collect(engine, _turn(sampling=sampling))
        assert "".join(d.text for d in deltas) == "Hello world"
        assert [d.finished for d in deltas] == [False, False, True]
        assert deltas[-1].finish_reason == "stop"
        (_, params, request_id), = double.generated
        from vllm.sampling_params import RequestOutputKind

        assert params.output_kind == RequestOutputKind.DELTA
        assert (params.temperature, params.max_tokens, params.seed, params.top_k) == (0.2, 64, 3, 20)
        assert params.skip_special_tokens is False
        assert double.aborted == []  # finished normally: nothing to abort
        assert engine.active_requests == frozenset()
        assert request_id.startswith("s1-")

    asyncio.run(main())


def test_mm_processor_kwargs_reach_prompt_extras():
    async def main():
        double = ScriptedAsyncLLM(["ok"])
        engine = await _engine(double)
        turn = _turn(sampling=SamplingSettings(max_tokens=300),
                     video=VideoSettings(seq=8192, output_reserve=512, audio_cap=0.5, k_mode="whole"))
        await _collect(engine, turn)
        call = double.renderer.calls[0]
        assert call["prompt_extras"]["mm_processor_kwargs"] == {
            "max_new_tokens": 300, "seq": 8192, "output_reserve": 512, "audio_cap": 0.5, "k_mode": "whole"}
        assert call["chat_params"].chat_template_kwargs["add_generation_prompt"] is True
        plain = _turn(sampling=SamplingSettings(max_tokens=64))  # no budget: vLLM's defaults but max tokens
        await _collect(engine, plain)
        assert double.renderer.calls[1]["prompt_extras"]["mm_processor_kwargs"] == {"max_new_tokens": 64}

    asyncio.run(main())


def test_unique_request_ids():
    ids = {_turn().request_id for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("s1-") for i in ids)


def test_abort_on_aclose_mid_stream():
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c", "d"])
        engine = await _engine(double)
        turn = _turn()
        stream = engine.stream_turn(turn)
        first = await stream.__anext__()
        assert first.text == "a"
        await stream.aclose()
        assert double.aborted == [turn.request_id]
        assert double.closed_streams == [turn.request_id]  # vLLM's generator was closed too
        assert engine.active_requests == frozenset()

    asyncio.run(main())


def test_abort_on_task_cancel_while_waiting():
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c"], hold_at=1)
        engine = await _engine(double)
        turn = _turn()
        seen = []

        async def consume():
            async for delta in engine.stream_turn(turn):
                seen.append(delta.text)

        task = asyncio.create_task(consume())
        await double.reached_hold.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["a"]
        assert double.aborted == [turn.request_id]

    asyncio.run(main())


def test_rejects_video_with_image_before_sending(tmp_path):
    async def main():
        double = ScriptedAsyncLLM(["x"])
        engine = await _engine(double)
        video, image = make_clip(tmp_path / "v.mp4", seconds=1, audio=False), make_png(tmp_path / "i.png")
        turn = TurnRequest(session_id="s", messages=[{"role": "user", "content": [
            {"type": "video_url", "video_url": {"url": str(video)}},
            {"type": "image_url", "image_url": {"url": f"file://{image}"}},
            {"type": "text", "text": "compare"}]}])
        with pytest.raises(TurnRejected, match="cannot mix a video"):
            await _collect(engine, turn)
        two_videos = TurnRequest(session_id="s", messages=[
            {"role": "user", "content": [{"type": "video_url", "video_url": {"url": str(video)}}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "video_url", "video_url": {"url": str(video)}}]}])
        with pytest.raises(TurnRejected, match="one video per"):
            await _collect(engine, two_videos)
        too_many = TurnRequest(session_id="s", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": str(image)}}] * 9}])
        with pytest.raises(TurnRejected, match="at most 8 image"):
            await _collect(engine, too_many)
        assert double.generated == [] and double.renderer.calls == []

    asyncio.run(main())


def test_tool_calls_surface_mid_stream():
    script = ["Checking. <dots_", "function_call>\n<invoke name=\"get_weather\">\n",
              "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</dots_function_call>", " more", " text"]

    async def main():
        double = ScriptedAsyncLLM(script)
        engine = await _engine(double)
        deltas = await _collect(engine, _turn(tools=EXAMPLE_TOOLS))
        assert deltas[0].text == "Checking. " and deltas[0].tool_calls == ()
        assert deltas[1].writing_tool_call is True and deltas[1].tool_calls == ()
        mid = deltas[2]
        assert not mid.finished and len(mid.tool_calls) == 1
        (call,) = mid.tool_calls
        assert isinstance(call, ToolCall)  # the parser's type, unchanged through the delta
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
        assert call.id and call.status == "called"
        assert deltas[-1].tool_calls == (call,)
        assert "".join(d.text for d in deltas) == "Checking.  more text"
        assert deltas[-1].finish_reason == "tool_calls"

    asyncio.run(main())


def test_reasoning_split_across_deltas():
    async def main():
        double = ScriptedAsyncLLM(["<thi", "nk>Let me ", "think.</th", "ink>The answer", " is 4."])
        engine = await _engine(double)
        deltas = await _collect(engine, _turn())
        assert "".join(d.reasoning for d in deltas) == "Let me think."
        assert "".join(d.text for d in deltas) == "The answer is 4."

    asyncio.run(main())


def test_reasoning_when_template_opens_think():
    async def main():
        double = ScriptedAsyncLLM(["plan", "</think>", "answer"])
        engine = InProcessEngine(_Args(), engine_factory=lambda a: double, starts_in_reasoning=True)
        await engine.start()
        deltas = await _collect(engine, _turn())
        assert "".join(d.reasoning for d in deltas) == "plan"
        assert "".join(d.text for d in deltas) == "answer"

    asyncio.run(main())


def test_stats_from_engine_outputs():
    async def main():
        double = ScriptedAsyncLLM(["a", "b", "c"], spec_decode=True, tokens_per_delta=2)
        engine = await _engine(double)
        deltas = await _collect(engine, _turn())
        stats = deltas[-1].stats
        assert stats.source == "engine"
        assert stats.prompt.total == 16 and stats.prompt.image == 6 and stats.prompt.text == 10
        assert stats.output_tokens == 6
        assert stats.ttft_s == pytest.approx(0.25)  # vLLM's first_token_latency
        assert stats.tokens_per_s == pytest.approx((6 - 1) / 1.0)  # engine timestamps 10.0 -> 11.0
        assert stats.mtp["num_draft_tokens"] == 2 and stats.mtp["draft_acceptance_rate"] == 0.5
        assert deltas[0].stats.mtp is None

    asyncio.run(main())


def test_lifecycle_status_capacity_and_shutdown():
    async def main():
        double = ScriptedAsyncLLM(["x"], max_num_seqs=7)
        builds = []
        engine = InProcessEngine(_Args(), engine_factory=lambda a: builds.append(a) or double)
        assert engine.status.state == "idle"
        with pytest.raises(EngineUnavailable):
            await _collect(engine, _turn())
        await asyncio.gather(engine.start(), engine.start(), engine.start())
        assert len(builds) == 1 and engine.status.state == "ready"
        assert engine.capacity == 7 and engine.max_model_len == 32768
        await engine.shutdown()
        assert double.shutdown_called and engine.status.state == "stopped"

    asyncio.run(main())


def test_vllms_own_engine_is_built_as_vllm_serve_builds_it_and_its_start_up_heap_frozen(monkeypatch):
    """Without a factory the adapter builds vLLM's ``AsyncLLM`` with the OpenAI server's usage context (vLLM picks
    ``max_num_seqs`` / ``max_num_batched_tokens`` defaults by context: 1,024 / 8,192 for ``vllm serve`` on an H100,
    128 / 2,048 without one), then freezes what the start made, as vLLM's server does."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from dots3_demo import vllm_compat

    calls, frozen = [], []
    double = ScriptedAsyncLLM(["x"])

    def from_engine_args(engine_args, **kwargs):
        calls.append((engine_args, kwargs))
        return double

    monkeypatch.setattr(AsyncLLM, "from_engine_args", staticmethod(from_engine_args))
    monkeypatch.setattr(vllm_compat, "freeze_gc_heap", lambda: frozen.append(True))
    args = _Args()
    engine = InProcessEngine(args)
    asyncio.run(engine.start())
    assert engine.status.state == "ready" and engine.engine is double
    assert calls == [(args, {"usage_context": UsageContext.OPENAI_API_SERVER})]
    assert frozen == [True]


def test_failed_start_is_reported():
    async def main():
        def boom(args):
            raise RuntimeError("no GPU")

        engine = InProcessEngine(_Args(), engine_factory=boom)
        with pytest.raises(EngineUnavailable, match="no GPU"):
            await engine.start()
        assert engine.status.state == "failed" and "no GPU" in engine.status.message

    asyncio.run(main())


def test_cache_warning():
    class Cached(_Args):
        mm_processor_cache_gb = 4

    engine = InProcessEngine(Cached(), engine_factory=lambda a: None)
    assert engine.warnings == [MM_CACHE_WARNING]


def test_the_engine_loads_an_image_as_the_inspector_does(tmp_path):
    """One loader (vLLM's ImageMediaIO, RGB) for the inspector and the engine: a transparent PNG is the
    same flattened RGB image in both."""
    import base64
    import io

    from PIL import Image

    from dots3_demo.engine.media import _load_image
    from dots3_demo.inspection.image import load_image_as_vllm

    buffer = io.BytesIO()
    Image.new("RGBA", (40, 30), (255, 0, 0, 90)).save(buffer, "PNG")
    data = buffer.getvalue()
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    engine_image, _digest = _load_image({"type": "image_url", "image_url": {"url": url}})
    inspector_image = load_image_as_vllm(data)
    assert engine_image.mode == inspector_image.mode == "RGB"
    assert engine_image.tobytes() == inspector_image.tobytes()


# ---------------------------------------------------------------- the stall watchdog (issue 19)
class _FrozenLLM(ScriptedAsyncLLM):
    """Streams one delta, then nothing (a hung GPU); ``output_processor.propagate_error`` ends its streams with
    the error given, as vLLM's output processor does (each request's queue raises it)."""

    def __init__(self) -> None:
        super().__init__(["a", "b", "c"], hold_at=1)
        self.error: BaseException | None = None
        self.output_processor = type("Processor", (), {"propagate_error": lambda _, exc: self._propagate(exc)})()

    def _propagate(self, exc: BaseException) -> None:
        self.error = exc
        self.released.set()

    async def generate(self, engine_input, sampling_params, request_id):
        async for output in super().generate(engine_input, sampling_params, request_id):
            if self.error is not None:
                raise self.error
            yield output


def test_a_stalled_engine_that_stops_producing_tokens_is_failed_and_its_streams_told():
    double = _FrozenLLM()
    stalls: list[str] = []

    async def main():
        engine = InProcessEngine(_Args(), engine_factory=lambda args: double, stall_timeout=0.4,
                                 on_stall=lambda: stalls.append(engine.status.message))
        await engine.start()
        seen = []
        with pytest.raises(EngineUnavailable) as waiting:
            async for delta in engine.stream_turn(_turn()):
                seen.append(delta.text)
        with pytest.raises(EngineUnavailable) as later:
            async for _ in engine.stream_turn(_turn("again")):
                pass
        return engine, seen, str(waiting.value), str(later.value)

    engine, seen, waiting, later = asyncio.run(main())
    assert seen == ["a"]  # the reply streamed, then the engine froze
    assert waiting.startswith("the engine stopped producing tokens: it held 1 request(s) and produced nothing for")
    assert "Restart the studio" in waiting and waiting in later
    assert engine.status.state == "failed" and engine.status.message == waiting and stalls == [waiting]
    assert double.aborted == []  # nothing is sent to a hung engine


def test_an_idle_engine_is_not_stalled_and_zero_turns_the_watchdog_off():
    async def main(timeout):
        double = ScriptedAsyncLLM(["a", "b"], delay_s=0.05)
        engine = InProcessEngine(_Args(), engine_factory=lambda args: double, stall_timeout=timeout)
        await engine.start()
        async for _ in engine.stream_turn(_turn()):
            pass
        await asyncio.sleep(0.6)  # idle, holding nothing, longer than the stall timeout
        return engine

    assert asyncio.run(main(0.2)).status.state == "ready"
    assert asyncio.run(main(0)).stall_timeout is None
