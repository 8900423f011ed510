"""A scripted double of vLLM's AsyncLLM at its public boundary (tests and benchmarks only).

It yields real ``vllm.outputs.RequestOutput`` / ``CompletionOutput`` objects, records every
``generate`` and ``abort`` call, and can hold the stream at a step so tests can cancel mid-way.
The renderer is a recording stand-in with the same ``render_chat_async`` signature; the real
renderer is exercised in tests/engine/test_render_real.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.v1.metrics.stats import RequestSpecDecodeMetrics, RequestStateStats

VOCAB = {"<|imgpad|>": 7, "<|audio_comp_pad|>": 8, "<|img|>": 5, "<|endofimg|>": 6}


class _Tokenizer:
    def get_vocab(self) -> dict[str, int]:
        return dict(VOCAB)

    def get_added_vocab(self) -> dict[str, int]:
        return dict(VOCAB)

    def decode(self, ids: list[int], **_: Any) -> str:
        """Each ordinary id reads as one letter (``a`` for 1, ``b`` for 2, …), a special token as its name."""
        names = {i: name for name, i in VOCAB.items()}
        return "".join(names.get(i) or chr(ord("a") + (i - 1) % 26) for i in ids)


class _TokParams:
    def with_kwargs(self, **kwargs: Any) -> _TokParams:
        self.kwargs = kwargs
        return self


@dataclass
class RecordingRenderer:
    """Returns a fixed engine input: 10 text tokens + one image of 2+4 tokens."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    default_chat_tok_params: _TokParams = field(default_factory=_TokParams)

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    async def render_chat_async(self, conversations, chat_params, tok_params, *, prompt_extras=None):
        self.calls.append({"conversations": conversations, "chat_params": chat_params, "prompt_extras": prompt_extras})
        ids = [1] * 10 + [5, 7, 7, 7, 7, 6]
        return [[]], [{"type": "multimodal", "prompt_token_ids": ids,
                       "mm_placeholders": {"image": [SimpleNamespace(offset=10, length=6)]},
                       "conversation": conversations[0]}]


class ScriptedAsyncLLM:
    """Each ``generate`` plays ``script``: a list of text deltas; the last one finishes.

    ``script`` may also be a callable ``(engine_input) -> list[str]`` (e.g. to answer per
    session from the rendered ``conversation``); ``delay_s`` paces the deltas (browser tests).
    """

    def __init__(self, script, *, delay_s: float = 0.0, finish_reason: str = "stop", hold_at: int | None = None,
                 max_num_seqs: int = 4, spec_decode: bool = False, tokens_per_delta: int = 1) -> None:
        self.script = script
        self.delay_s = delay_s
        self.finish_reason = finish_reason
        self.hold_at = hold_at
        self.released = asyncio.Event()
        self.reached_hold = asyncio.Event()
        self.renderer = RecordingRenderer()
        self.generated: list[tuple[Any, Any, str]] = []
        self.aborted: list[str] = []
        self.closed_streams: list[str] = []
        self.shutdown_called = False
        self.spec_decode = spec_decode
        self.tokens_per_delta = tokens_per_delta
        self.vllm_config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs))
        limits = {"image": 8, "audio": 4, "video": 1}
        self.model_config = SimpleNamespace(
            max_model_len=32768,
            multimodal_config=SimpleNamespace(get_limit_per_prompt=lambda m: limits.get(m, 0)),
        )

    async def generate(self, engine_input, sampling_params, request_id):
        self.generated.append((engine_input, sampling_params, request_id))
        prompt_ids = list(engine_input["prompt_token_ids"])
        stats = RequestStateStats(arrival_time=0.0)
        script = self.script(engine_input) if callable(self.script) else self.script
        try:
            for step, text in enumerate(script):
                if self.hold_at is not None and step == self.hold_at:
                    self.reached_hold.set()
                    await self.released.wait()
                await asyncio.sleep(self.delay_s)
                last = step == len(script) - 1
                stats.num_generation_tokens += self.tokens_per_delta
                if step == 0:
                    stats.first_token_ts, stats.first_token_latency = 10.0, 0.25
                stats.last_token_ts = 10.0 + 0.5 * step
                spec = None
                if last and self.spec_decode:
                    spec = RequestSpecDecodeMetrics.new(1)
                    spec.observe(1, 1)
                    spec.observe(1, 0)
                completion = CompletionOutput(
                    index=0, text=text, token_ids=list(range(self.tokens_per_delta)),
                    cumulative_logprob=None, logprobs=None,
                    finish_reason=self.finish_reason if last else None,
                    spec_decode_metrics=spec,
                )
                yield RequestOutput(
                    request_id=request_id, prompt=None, prompt_token_ids=prompt_ids,
                    prompt_logprobs=None, outputs=[completion], finished=last,
                    metrics=stats, num_cached_tokens=0,
                )
        finally:
            self.closed_streams.append(request_id)

    async def abort(self, request_id):
        self.aborted.append(request_id)

    def shutdown(self):
        self.shutdown_called = True


def scripted_engine(double: Any, *, max_num_seqs: int = 4, max_model_len: int = 32768) -> Any:
    """The product's ``InProcessEngine`` over a scripted double, with the engine args it reads."""
    from dots3_demo.engine.inprocess import InProcessEngine

    args = SimpleNamespace(model="scripted", mm_processor_cache_gb=0, max_model_len=max_model_len,
                           max_num_seqs=max_num_seqs)
    return InProcessEngine(args, engine_factory=lambda _args: double)
