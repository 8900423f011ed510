"""The in-process adapter: vLLM's ``AsyncLLM`` on the Gradio server's event loop.

Flow of one turn (all vLLM calls, nothing re-implemented):

1. limits checked, media loaded (``engine.media``) in a worker thread;
2. ``engine.renderer.render_chat_async([messages], ChatParams(...), tok_params,
   prompt_extras={"mm_processor_kwargs": ..., "multi_modal_data": ..., "multi_modal_uuids": ...})``
   renders the chat template, tokenizes and runs the Dots multimodal processor;
3. ``engine.generate(engine_input, SamplingParams(output_kind=DELTA, ...), request_id)``;
4. each ``RequestOutput`` delta goes through the reasoning splitter and vLLM's DotsToolParser;
5. on close/cancel before the end, ``await engine.abort(request_id)`` in a ``finally``.

A watchdog (``stall_timeout``) notices an engine that holds requests and yields nothing: a hung GPU or a
frozen engine-core process never raises, so without it every session would wait forever. It marks the
engine failed in plain words, wakes every waiting stream with that message (vLLM's own way to end its
streams when the engine dies: ``EngineDeadError`` into each request's queue) and calls ``on_stall`` (the
studio's ``--exit-on-engine-stall``). ``close()`` shuts vLLM down from any thread (a signal handler).

``skip_special_tokens=False``: ``<think>`` and ``<dots_function_call>`` are special tokens in the
Dots tokenizer; skipping them would erase the very tags we split on. The EOS token still never
reaches the text (vLLM drops the stop token's text unless ``include_stop_str_in_output``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from dots3_demo import vllm_compat
from dots3_demo.engine import enginelog
from dots3_demo.engine.media import prepare_messages
from dots3_demo.engine.promptview import view_from_tokenizer
from dots3_demo.engine.protocol import (
    CONTEXT_HINT,
    EngineStatus,
    EngineUnavailable,
    RequestRefused,
    TurnDelta,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.engine.stats import prompt_tokens_by_modality
from dots3_demo.engine.textsplit import TurnAssembler
from dots3_demo.engine.wire import chat_request
from dots3_demo.tools.forcing import tool_call_regex

logger = logging.getLogger(__name__)

DEFAULT_STALL_TIMEOUT_S = 120.0  # well above a slow first token (kernels compiling on a GPU: 13 s); cli.engine's
ABORT_TIMEOUT_S = 10.0  # an abort sent to the engine; a healthy one answers at once
ENGINE_SHUTDOWN_TIMEOUT_S = 5.0  # vLLM's own shutdown of its processes, when the studio stops


def stall_message(requests: int, seconds: float) -> str:
    """What a session and ``/healthz`` say when the engine stopped producing tokens."""
    return (f"the engine stopped producing tokens: it held {requests} request(s) and produced nothing for "
            f"{seconds:.0f} s (a hung GPU or engine process). Restart the studio to load the model again.")

MM_CACHE_WARNING = (
    "mm_processor_cache_gb > 0: vLLM's multimodal processor cache re-reads videos as decoded "
    "frames, so dots3_note never hears a video's sound track. Use --mm-processor-cache-gb 0."
)


def build_sampling_params(turn: TurnRequest) -> Any:
    """vLLM ``SamplingParams`` for ``turn``; tool choice "required" constrains decoding to one call, else the
    sampling's ``structured_outputs`` (an eval item's ``choice``) to one of its strings."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

    settings = turn.sampling
    forced = None
    if turn.tool_choice == "required":
        forced = StructuredOutputsParams(regex=tool_call_regex(turn.tools))
    elif settings.structured_outputs is not None:
        forced = StructuredOutputsParams(choice=list(settings.structured_outputs.choice))
    return SamplingParams(
        temperature=float(settings.temperature),
        top_p=float(settings.top_p),
        top_k=int(settings.top_k) if settings.top_k and settings.top_k > 0 else -1,
        max_tokens=int(settings.max_tokens),
        seed=settings.seed,
        repetition_penalty=float(settings.repetition_penalty),
        skip_special_tokens=False,
        output_kind=RequestOutputKind.DELTA,
        structured_outputs=forced,
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
    extras: dict[str, Any] = {"mm_processor_kwargs": turn.mm_processor_kwargs()}
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
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT_S,
        on_stall: Callable[[], None] | None = None,
    ) -> None:
        self.engine_args = engine_args
        self._factory = engine_factory
        self._starts_in_reasoning = starts_in_reasoning
        self._engine: Any = None
        self._status = EngineStatus("idle", "not started")
        self._start_task: asyncio.Task[None] | None = None
        self._tail: enginelog.OutputTail | None = None
        self._tail_mark = 0
        self._active: set[str] = set()
        self.stall_timeout = stall_timeout or None  # 0: no watchdog
        self._on_stall = on_stall
        self._last_progress = 0.0  # time.monotonic() of the last output, or of the first request held
        self._stalled = False
        self._watchdog: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.warnings: list[str] = []
        if (getattr(engine_args, "mm_processor_cache_gb", 0) or 0) > 0:
            self.warnings.append(MM_CACHE_WARNING)
            logger.warning(MM_CACHE_WARNING)

    # -- status ---------------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        return self._engine

    @property
    def label(self) -> str:
        return f"in-process vLLM · {getattr(self.engine_args, 'model', '')}"

    @property
    def model(self) -> str | None:
        """``--model``: the checkpoint this process loads."""
        model = getattr(self.engine_args, "model", None)
        return None if model is None else str(model)

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
        """Media per request the engine takes; None while unknown (not loaded yet)."""
        if getattr(self.engine_args, "language_model_only", False):
            return {"image": 0, "audio": 0, "video": 0}  # known from the flags, before the engine loads
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
        """Build the engine (first caller starts the build, every caller waits for it).

        The build runs in a worker thread: vLLM's ``AsyncLLM`` constructor blocks for as long as its
        engine-core process takes to load (minutes on a GPU host), and the server's event loop must
        keep answering the page, ``/healthz`` and the inspector meanwhile. The engine's output task
        starts on this loop at its first request. A waiter that is cancelled (Stop) leaves the build
        running. Raises ``EngineUnavailable`` with the reason in plain words when the build fails.
        """
        if self._status.state == "ready":
            return
        if self._status.state == "stopped":
            raise EngineUnavailable("the engine was shut down")
        if self._start_task is None:
            self._start_task = asyncio.get_running_loop().create_task(self._build())
        await asyncio.shield(self._start_task)
        if not self._is_ready():  # the start task changed the state while this waited
            raise EngineUnavailable(self._status.message)

    def _is_ready(self) -> bool:
        return self._status.state == "ready"

    async def _build(self) -> None:
        model = getattr(self.engine_args, "model", "")
        tail = self._log_tail() if self._factory is None else None
        mark = tail.mark() if tail is not None else 0
        self._status = EngineStatus("loading", f"loading {model}", since=time.monotonic())
        self._tail, self._tail_mark = tail, mark
        self._loop = asyncio.get_running_loop()
        try:
            factory = self._factory or _default_factory
            self._engine = await asyncio.to_thread(factory, self.engine_args)
        except BaseException as exc:
            lines = tail.lines(since=mark) if tail is not None else []
            logger.error("engine start failed: %s", exc)
            self._status = EngineStatus("failed", start_failure_message(exc, lines), since=time.monotonic(),
                                        details=enginelog.last_lines(lines))
            if not isinstance(exc, Exception):
                raise
            return
        if self._factory is None:  # vLLM's own engine: what its start made joins the frozen heap (vLLM's server
            vllm_compat.freeze_gc_heap()  # does the same once started); a test's double leaves the heap alone
        self._status = EngineStatus("ready", "ready", since=time.monotonic())

    @staticmethod
    def _log_tail() -> enginelog.OutputTail | None:
        try:
            return enginelog.OutputTail.shared()
        except OSError:  # descriptors that cannot be teed: run without the load stage
            logger.warning("cannot follow vLLM's output; the load stage will not be shown")
            return None

    @property
    def status(self) -> EngineStatus:
        status = self._status
        if status.state == "ready" and getattr(self._engine, "errored", False):  # its core died while idle
            self._died(RuntimeError("the engine core is gone"))
            return self._status
        if status.state == "loading" and self._tail is not None:
            lines = self._tail.lines(since=self._tail_mark, last=60)
            return replace(status, stage=enginelog.load_stage(lines),
                           details=tuple(enginelog.clean(line) for line in lines[-1:]))
        return status

    def _died(self, exc: BaseException) -> None:
        """The engine-core process is gone: every later turn is refused with this, in plain words."""
        if self._stalled:  # the watchdog ended the streams: its message stands
            return
        lines = self._tail.lines(since=self._tail_mark) if self._tail is not None else []
        self._status = EngineStatus(
            "failed", "the engine stopped: its core process ended unexpectedly (killed, or out of memory). "
            "Restart the studio to load the model again.", since=time.monotonic(),
            details=enginelog.last_lines(lines))
        logger.error("engine died: %r", exc)

    def unfinished_requests(self) -> int | None:
        """Requests vLLM's output processor still holds (0 when every stream ended or was aborted)."""
        if self._engine is None:
            return 0
        return int(self._engine.get_num_unfinished_requests())

    async def abort(self, request_id: str) -> None:
        if self._engine is not None:
            await self._engine.abort(request_id)

    async def shutdown(self) -> None:
        self._close()

    def close(self, timeout: float = ENGINE_SHUTDOWN_TIMEOUT_S) -> None:
        """Shut vLLM down from any thread (the studio's stop signal): on the engine's own event loop when it
        runs elsewhere, waiting at most ``timeout`` seconds (a hung engine may not answer; the caller then
        ends its processes, ``serving.stopping``)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop is running or not loop.is_running():
            self._close()
            return
        done = threading.Event()

        def close_there() -> None:
            try:
                self._close()
            finally:
                done.set()

        loop.call_soon_threadsafe(close_there)
        if not done.wait(timeout):
            logger.warning("vLLM's shutdown did not finish within %.0f s", timeout)

    def _close(self) -> None:
        engine, self._engine = self._engine, None
        self._status = EngineStatus("stopped", "shut down", since=time.monotonic())
        if self._watchdog is not None:
            self._watchdog.cancel()
        if engine is not None:
            engine.shutdown()

    # -- the watchdog ---------------------------------------------------------------------
    def _hold(self, request_id: str) -> None:
        """``request_id`` is in the engine now; the watchdog counts from here if nothing else was."""
        if not self._active:
            self._last_progress = time.monotonic()
        self._active.add(request_id)
        if self.stall_timeout and (self._watchdog is None or self._watchdog.done()):
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Every few seconds: has the engine held requests and produced nothing for ``stall_timeout``?"""
        assert self.stall_timeout
        every = min(5.0, self.stall_timeout / 4)
        while self._status.state == "ready":
            await asyncio.sleep(every)
            idle = time.monotonic() - self._last_progress
            if self._active and idle >= self.stall_timeout:
                self._stall(idle)
                return

    def _stall(self, idle: float) -> None:
        """Mark the engine failed and end every waiting stream with the message, as vLLM ends them when its
        engine dies (``EngineDeadError`` into each request's queue: no abort is sent to a hung engine)."""
        message = stall_message(len(self._active), idle)
        self._stalled = True
        self._status = EngineStatus("failed", message, since=time.monotonic())
        logger.error("%s", message)
        from vllm.v1.engine.exceptions import EngineDeadError

        processor = getattr(self._engine, "output_processor", None)
        if processor is not None:
            processor.propagate_error(EngineDeadError(message))
        if self._on_stall is not None:
            self._on_stall()

    # -- one turn -------------------------------------------------------------------------
    async def stream_turn(self, turn: TurnRequest) -> AsyncGenerator[TurnDelta, None]:
        if self._status.state != "ready" or self._engine is None:
            raise EngineUnavailable(f"engine not ready ({self._status.state}: {self._status.message})")
        engine = self._engine
        request_id = turn.request_id
        if request_id in self._active:
            raise ValueError(f"request id {request_id} is already running")
        # the request a `vllm serve` of this --model gets for the same prompt (issue 21 §3); built before rendering,
        # which turns tool-call arguments into dicts in the messages (vLLM's chat parser, in place)
        request = chat_request(turn, self.model or "")
        try:
            engine_input = await render_turn(engine.renderer, turn, self.mm_limits)
        except TurnRejected:
            raise
        except refusal_types() as exc:  # vLLM's renderer refused the conversation (too long, a template error)
            raise RequestRefused(refusal_message(exc)) from exc
        tokenizer = engine.renderer.get_tokenizer()
        vocab = tokenizer.get_vocab()
        sampling_params = build_sampling_params(turn)
        assembler = TurnAssembler(turn.tools, self._starts_in_reasoning)
        stats = TurnStats(source="engine", max_tokens=int(turn.sampling.max_tokens), max_model_len=self.max_model_len,
                          request=request)
        started = time.monotonic()
        first_token_at: float | None = None
        finished = False
        from vllm.v1.engine.exceptions import EngineDeadError

        self._hold(request_id)

        try:
            stream = engine.generate(engine_input, sampling_params, request_id)
            async with contextlib.aclosing(stream):
                async for output in _refusals(stream):
                    self._last_progress = time.monotonic()
                    if stats.prompt is None and output.prompt_token_ids is not None:
                        stats.prompt = prompt_tokens_by_modality(
                            output.prompt_token_ids, engine_input.get("mm_placeholders"), vocab
                        )
                        stats.prompt_view = view_from_tokenizer(output.prompt_token_ids, tokenizer, "engine")
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
                        stats=stats.snapshot(),
                    )
                    if done:
                        finished = True
                    yield delta
                    if done:
                        break
        except EngineDeadError as exc:
            self._died(exc)
            raise EngineUnavailable(self._status.message) from exc
        finally:
            self._active.discard(request_id)
            if not finished and not self._stalled:
                # Closed (Stop, tab closed) or failed before the end: free the engine's slot (bounded: an engine
                # that hung without the watchdog noticing yet must not hold the closing caller).
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(engine.abort(request_id), ABORT_TIMEOUT_S)


async def _refusals(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """``stream``, with a ``ValueError`` raised before its first output turned into a refusal.

    vLLM validates a request when it is added (on the first step of ``generate``) and raises
    ``ValueError`` for one it will not run, e.g. a prompt longer than ``--max-model-len``.
    """
    started = False
    try:
        async for output in stream:
            started = True
            yield output
    except refusal_types() as exc:
        if started:
            raise
        raise RequestRefused(refusal_message(exc)) from exc


def refusal_types() -> tuple[type[BaseException], ...]:
    """What vLLM raises for a request it will not run: ``ValueError``, and its ``VLLMClientError``
    (e.g. ``VLLMValidationError``: a prompt over the context length, raised while rendering)."""
    from vllm.exceptions import VLLMClientError

    return (ValueError, VLLMClientError)


def refusal_message(exc: BaseException) -> str:
    """vLLM's reason for refusing a request, in plain words, with what to change."""
    reason = " ".join(str(exc).split()) or "no reason given"
    hint = ""
    if "maximum model length" in reason or "max_model_len" in reason or "context length" in reason:
        hint = " " + CONTEXT_HINT
    return f"The engine refused this request: {reason}{hint}"


def start_failure_message(exc: BaseException, lines: list[str]) -> str:
    """Why the engine did not start, in plain words: vLLM's own message (its engine-core process
    prints the root cause; this process only learns that initialisation failed), never a class name."""
    own = " ".join(str(exc).split())
    cause = enginelog.root_cause(lines)
    if cause and (not own or enginelog.is_wrapper(own)):
        own = cause
    return f"the engine could not start: {own or 'vLLM gave no reason (see its last lines)'}"


def _default_factory(engine_args: Any) -> Any:
    """vLLM's engine for ``engine_args``, built as ``vllm serve`` builds its own (the OpenAI server's usage context):
    the defaults vLLM picks by context — ``max_num_seqs`` and ``max_num_batched_tokens``, e.g. 1,024 and 8,192 on an
    H100 or H200 against 128 and 2,048 for an engine built without one — are those of the server the studio is
    compared with (``benchmarks.serve_bench``) and that an operator tuned on."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(engine_args, usage_context=UsageContext.OPENAI_API_SERVER)
