"""The in-process adapter: vLLM's ``AsyncLLM`` on the Gradio server's event loop.

Flow of one turn (all vLLM calls, nothing re-implemented):

1. limits checked, media loaded (``engine.media``) in a worker thread;
2. ``engine.renderer.render_chat_async([messages], ChatParams(...), tok_params,
   prompt_extras={"mm_processor_kwargs": ..., "multi_modal_data": ..., "multi_modal_uuids": ...})``
   renders the chat template, tokenizes and runs the Dots multimodal processor;
3. ``engine.generate(engine_input, SamplingParams(output_kind=DELTA, ...), request_id)``;
4. each ``RequestOutput`` delta goes through the reasoning splitter and vLLM's DotsToolParser;
5. on close/cancel before the end, ``await engine.abort(request_id)`` in a ``finally``.

``skip_special_tokens=False``: ``<think>`` and ``<dots_function_call>`` are special tokens in the
Dots tokenizer; skipping them would erase the very tags we split on. The EOS token still never
reaches the text (vLLM drops the stop token's text unless ``include_stop_str_in_output``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from dots3_demo.engine.media import prepare_messages
from dots3_demo.engine.protocol import (
    EngineStatus,
    EngineUnavailable,
    TurnDelta,
    TurnRequest,
    TurnStats,
)
from dots3_demo.engine.stats import prompt_tokens_by_modality
from dots3_demo.engine.textsplit import TurnAssembler

logger = logging.getLogger(__name__)

MM_CACHE_WARNING = (
    "mm_processor_cache_gb > 0: vLLM's multimodal processor cache re-reads videos as decoded "
    "frames, so dots3_note never hears a video's sound track. Use --mm-processor-cache-gb 0."
)


def build_mm_processor_kwargs(turn: TurnRequest) -> dict[str, Any]:
    """Per-request kwargs for the Dots processor (they reach it only via ``prompt_extras``)."""
    kwargs: dict[str, Any] = {"max_new_tokens": int(turn.sampling.max_tokens)}
    budget = turn.video
    for name in ("seq", "output_reserve", "audio_cap", "k_mode"):
        value = getattr(budget, name)
        if value is not None:
            kwargs[name] = value
    return kwargs


def build_sampling_params(turn: TurnRequest) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    settings = turn.sampling
    return SamplingParams(
        temperature=float(settings.temperature),
        top_p=float(settings.top_p),
        top_k=int(settings.top_k) if settings.top_k and settings.top_k > 0 else -1,
        max_tokens=int(settings.max_tokens),
        seed=settings.seed,
        repetition_penalty=float(settings.repetition_penalty),
        skip_special_tokens=False,
        output_kind=RequestOutputKind.DELTA,
    )


async def render_turn(renderer: Any, turn: TurnRequest, mm_limits: dict[str, int] | None) -> Any:
    """Render ``turn`` with vLLM's renderer; return the engine input (token ids + mm inputs).

    Raises ``TurnRejected`` for limits vLLM's Dots processor would refuse and unreadable media.
    """
    from vllm.renderers.params import ChatParams

    prepared = await asyncio.to_thread(prepare_messages, turn.messages, mm_limits)
    chat_params = ChatParams(
        chat_template_kwargs=dict(add_generation_prompt=True, tools=turn.tools or None, tokenize=False)
    )
    tok_params = renderer.default_chat_tok_params.with_kwargs(add_special_tokens=False)
    extras: dict[str, Any] = {"mm_processor_kwargs": build_mm_processor_kwargs(turn)}
    if prepared.mm_data:
        extras["multi_modal_data"] = prepared.mm_data
        extras["multi_modal_uuids"] = prepared.mm_uuids
    _, (engine_input,) = await renderer.render_chat_async(
        [prepared.messages], chat_params, tok_params, prompt_extras=extras
    )
    return engine_input


def _engine_timings(metrics: Any) -> tuple[float | None, float | None]:
    """TTFT and decode tokens/s from vLLM's per-request ``RequestStateStats`` (if logged)."""
    if metrics is None:
        return None, None
    ttft = getattr(metrics, "first_token_latency", 0.0) or None
    first, last = getattr(metrics, "first_token_ts", 0.0), getattr(metrics, "last_token_ts", 0.0)
    tokens = getattr(metrics, "num_generation_tokens", 0)
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else None
    return ttft, rate


class InProcessEngine:
    """``ChatEngine`` over vLLM's ``AsyncLLM`` built in this process.

    ``engine_factory`` defaults to ``AsyncLLM.from_engine_args``; tests pass a double.
    """

    def __init__(
        self,
        engine_args: Any,
        *,
        engine_factory: Callable[[Any], Any] | None = None,
        starts_in_reasoning: bool = False,
    ) -> None:
        self.engine_args = engine_args
        self._factory = engine_factory
        self._starts_in_reasoning = starts_in_reasoning
        self._engine: Any = None
        self._status = EngineStatus("idle", "not started")
        self._start_lock: asyncio.Lock | None = None
        self._active: set[str] = set()
        self.warnings: list[str] = []
        if (getattr(engine_args, "mm_processor_cache_gb", 0) or 0) > 0:
            self.warnings.append(MM_CACHE_WARNING)
            logger.warning(MM_CACHE_WARNING)

    # -- status ---------------------------------------------------------------------------
    @property
    def status(self) -> EngineStatus:
        return self._status

    @property
    def engine(self) -> Any:
        return self._engine

    @property
    def capacity(self) -> int:
        if self._engine is not None:
            return int(self._engine.vllm_config.scheduler_config.max_num_seqs)
        return int(getattr(self.engine_args, "max_num_seqs", None) or 1)

    @property
    def max_model_len(self) -> int | None:
        if self._engine is not None:
            return int(self._engine.model_config.max_model_len)
        return getattr(self.engine_args, "max_model_len", None)

    @property
    def mm_limits(self) -> dict[str, int] | None:
        if self._engine is None:
            return None
        mm_config = self._engine.model_config.multimodal_config
        if mm_config is None:
            return {"image": 0, "audio": 0, "video": 0}
        return {m: int(mm_config.get_limit_per_prompt(m)) for m in ("image", "audio", "video")}

    @property
    def active_requests(self) -> frozenset[str]:
        return frozenset(self._active)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Build the engine on the running loop (first caller builds, others wait)."""
        if self._status.state == "ready":
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._status.state == "ready":
                return
            if self._status.state == "stopped":
                raise EngineUnavailable("the engine was shut down")
            self._status = EngineStatus("loading", f"loading {getattr(self.engine_args, 'model', '')}")
            try:
                factory = self._factory or _default_factory
                # Synchronous by design: vLLM starts its output task on the running loop.
                self._engine = factory(self.engine_args)
            except Exception as exc:  # noqa: BLE001 - surfaced in status for the UI
                self._status = EngineStatus("failed", f"{type(exc).__name__}: {exc}")
                logger.exception("engine start failed")
                raise EngineUnavailable(self._status.message) from exc
            self._status = EngineStatus("ready", "ready")

    async def abort(self, request_id: str) -> None:
        if self._engine is not None:
            await self._engine.abort(request_id)

    async def shutdown(self) -> None:
        engine, self._engine = self._engine, None
        self._status = EngineStatus("stopped", "shut down")
        if engine is not None:
            engine.shutdown()

    # -- one turn -------------------------------------------------------------------------
    async def stream_turn(self, turn: TurnRequest) -> AsyncIterator[TurnDelta]:
        if self._status.state != "ready" or self._engine is None:
            raise EngineUnavailable(f"engine not ready ({self._status.state}: {self._status.message})")
        engine = self._engine
        request_id = turn.request_id
        if request_id in self._active:
            raise ValueError(f"request id {request_id} is already running")
        engine_input = await render_turn(engine.renderer, turn, self.mm_limits)
        vocab = engine.renderer.get_tokenizer().get_vocab()
        sampling_params = build_sampling_params(turn)
        assembler = TurnAssembler(turn.tools, self._starts_in_reasoning)
        stats = TurnStats(source="engine")
        started = time.monotonic()
        first_token_at: float | None = None
        finished = False
        self._active.add(request_id)
        try:
            stream = engine.generate(engine_input, sampling_params, request_id)
            async with contextlib.aclosing(stream):
                async for output in stream:
                    if stats.prompt is None and output.prompt_token_ids is not None:
                        stats.prompt = prompt_tokens_by_modality(
                            output.prompt_token_ids, engine_input.get("mm_placeholders"), vocab
                        )
                    if output.num_cached_tokens is not None and stats.prompt is not None:
                        stats.prompt.cached = output.num_cached_tokens
                    completion = output.outputs[0] if output.outputs else None
                    delta_text = completion.text if completion is not None else ""
                    if completion is not None:
                        stats.output_tokens += len(completion.token_ids)
                        if completion.token_ids and first_token_at is None:
                            first_token_at = time.monotonic()
                    now = time.monotonic()
                    stats.elapsed_s = now - started
                    ttft, rate = _engine_timings(output.metrics)
                    stats.ttft_s = ttft if ttft else (first_token_at - started if first_token_at else None)
                    if rate is None and first_token_at is not None and stats.output_tokens > 1 and now > first_token_at:
                        rate = (stats.output_tokens - 1) / (now - first_token_at)
                    stats.tokens_per_s = rate
                    step = assembler.feed(delta_text)
                    done = bool(output.finished)
                    if done:
                        tail = assembler.finish()
                        step.reasoning += tail.reasoning
                        step.text += tail.text
                        step.tool_calls = tail.tool_calls
                        step.writing_tool_call = False
                        spec = getattr(completion, "spec_decode_metrics", None)
                        if spec is not None:
                            stats.mtp = spec.to_dict()
                    finish_reason = completion.finish_reason if (completion and done) else None
                    if done and step.tool_calls and finish_reason == "stop":
                        finish_reason = "tool_calls"
                    delta = TurnDelta(
                        request_id=request_id,
                        text=step.text,
                        reasoning=step.reasoning,
                        tool_calls=step.tool_calls,
                        writing_tool_call=step.writing_tool_call,
                        finished=done,
                        finish_reason=finish_reason,
                        stats=_copy_stats(stats),
                    )
                    if done:
                        finished = True
                    yield delta
                    if done:
                        break
        finally:
            self._active.discard(request_id)
            if not finished:
                # Closed (Stop, tab closed) or failed before the end: free the engine's slot.
                with contextlib.suppress(Exception):
                    await engine.abort(request_id)


def _copy_stats(stats: TurnStats) -> TurnStats:
    from dataclasses import replace

    prompt = replace(stats.prompt) if stats.prompt is not None else None
    return replace(stats, prompt=prompt, mtp=dict(stats.mtp) if stats.mtp else None)


def _default_factory(engine_args: Any) -> Any:
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(engine_args)
