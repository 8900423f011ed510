"""The remote adapter: an OpenAI-style chat-completions server (e.g. ``vllm serve`` with
``--enable-auto-tool-choice --tool-call-parser dots``) at ``--endpoint``.

Tool calls come from the server's ``tool_calls`` deltas (the server runs the Dots parser);
reasoning from the ``reasoning``/``reasoning_content`` delta fields, and any ``<think>`` tags
left in the content are split here. Local media paths are sent as ``data:`` URLs. Abort =
close the HTTP stream (vLLM's server aborts a request whose client disconnects).
"""

from __future__ import annotations

import base64
import contextlib
import mimetypes
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from dots3_demo.engine.media import check_media_limits, modality_of, read_media_bytes
from dots3_demo.engine.protocol import (
    EngineStatus,
    EngineUnavailable,
    PromptTokens,
    TurnDelta,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.engine.textsplit import ReasoningSplitter

_DEFAULT_MIME = {"image": "image/png", "audio": "audio/wav", "video": "video/mp4"}


def _to_data_url(url: str, modality: str) -> str:
    if url.startswith(("data:", "http://", "https://")):
        return url
    data = read_media_bytes(url)
    path = url[len("file://"):] if url.startswith("file://") else url
    mime = mimetypes.guess_type(Path(path).name)[0] or _DEFAULT_MIME[modality]
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def to_wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with local media turned into ``data:`` URLs (the server cannot read our disk)."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            wire.append(message)
            continue
        parts = []
        for part in content:
            modality = modality_of(part) if isinstance(part, dict) else None
            kind = part.get("type") if isinstance(part, dict) else None
            if modality is None or kind in ("input_audio", "image_pil"):
                if kind == "image_pil":
                    raise TurnRejected("remote mode needs images as files or data: URLs, not PIL objects")
                parts.append(part)
                continue
            value = part[kind]
            url = value.get("url") if isinstance(value, dict) else value
            parts.append({"type": kind, kind: {"url": _to_data_url(url, modality)}})
        wire.append({**message, "content": parts})
    return wire


class RemoteEngine:
    """``ChatEngine`` over an OpenAI-compatible server, with ``openai.AsyncOpenAI``."""

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        capacity: int = 16,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._api_key = api_key
        self.model = model
        self._timeout = timeout
        self._capacity = capacity
        self._client: Any = None
        self._status = EngineStatus("idle", "not connected")
        self._max_model_len: int | None = None
        self._streams: dict[str, Any] = {}

    @property
    def status(self) -> EngineStatus:
        return self._status

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_model_len(self) -> int | None:
        return self._max_model_len

    async def start(self) -> None:
        """Connect and pick the model (the first one the server lists unless given)."""
        if self._status.state == "ready":
            return
        from openai import AsyncOpenAI

        self._status = EngineStatus("loading", f"connecting to {self.endpoint}")
        try:
            self._client = AsyncOpenAI(base_url=self.endpoint, api_key=self._api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY", timeout=self._timeout)
            models = await self._client.models.list()
            listed = list(models.data)
            if self.model is None:
                if not listed:
                    raise EngineUnavailable(f"{self.endpoint} lists no models")
                self.model = listed[0].id
            for entry in listed:
                if entry.id == self.model:
                    self._max_model_len = getattr(entry, "max_model_len", None) or (
                        (entry.model_extra or {}).get("max_model_len")
                    )
        except Exception as exc:  # noqa: BLE001 - surfaced in status
            self._status = EngineStatus("failed", f"{type(exc).__name__}: {exc}")
            raise EngineUnavailable(self._status.message) from exc
        self._status = EngineStatus("ready", f"{self.model} at {self.endpoint}")

    async def abort(self, request_id: str) -> None:
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            await stream.close()

    async def shutdown(self) -> None:
        for request_id in list(self._streams):
            with contextlib.suppress(Exception):
                await self.abort(request_id)
        if self._client is not None:
            await self._client.close()
        self._client = None
        self._status = EngineStatus("stopped", "disconnected")

    def _request_body(self, turn: TurnRequest) -> dict[str, Any]:
        settings = turn.sampling
        extra: dict[str, Any] = {
            "repetition_penalty": settings.repetition_penalty,
            "skip_special_tokens": False,
            "mm_processor_kwargs": {
                "max_new_tokens": settings.max_tokens,
                **{k: v for k in ("seq", "output_reserve", "audio_cap", "k_mode") if (v := getattr(turn.video, k)) is not None},
            },
        }
        if settings.top_k and settings.top_k > 0:
            extra["top_k"] = settings.top_k
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_wire_messages(turn.messages),
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "max_tokens": settings.max_tokens,
            "extra_body": extra,
        }
        if settings.seed is not None:
            body["seed"] = settings.seed
        if turn.tools:
            body["tools"] = turn.tools
            body["tool_choice"] = "auto"
        return body

    async def stream_turn(self, turn: TurnRequest) -> AsyncIterator[TurnDelta]:
        if self._status.state != "ready" or self._client is None:
            raise EngineUnavailable(f"endpoint not ready ({self._status.state}: {self._status.message})")
        check_media_limits(turn.messages, None)
        body = self._request_body(turn)
        request_id = turn.request_id
        started = time.monotonic()
        first_at: float | None = None
        splitter = ReasoningSplitter()
        calls: dict[int, dict[str, Any]] = {}
        stats = TurnStats(source="server")
        finish_reason: str | None = None
        stream = await self._client.chat.completions.create(
            **body, extra_headers={"X-Request-Id": request_id}
        )
        self._streams[request_id] = stream
        finished = False
        try:
            async for chunk in stream:
                reasoning, text = "", ""
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    stats.output_tokens = usage.completion_tokens or 0
                    stats.prompt = PromptTokens(total=usage.prompt_tokens or 0)
                    details = getattr(usage, "prompt_tokens_details", None)
                    if details is not None and getattr(details, "cached_tokens", None) is not None:
                        stats.prompt.cached = details.cached_tokens
                for choice in chunk.choices or []:
                    delta = choice.delta
                    extra = getattr(delta, "model_extra", None) or {}
                    server_reasoning = extra.get("reasoning") or extra.get("reasoning_content") or ""
                    r, t = splitter.feed(delta.content or "")
                    reasoning += server_reasoning + r
                    text += t
                    for tool_delta in delta.tool_calls or []:
                        call = calls.setdefault(
                            tool_delta.index,
                            {"id": "", "name": "", "arguments": "", "status": "streaming", "index": tool_delta.index},
                        )
                        if tool_delta.id:
                            call["id"] = tool_delta.id
                        if tool_delta.function is not None:
                            if tool_delta.function.name:
                                call["name"] = tool_delta.function.name
                            if tool_delta.function.arguments:
                                call["arguments"] += tool_delta.function.arguments
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                if (reasoning or text or calls) and first_at is None:
                    first_at = time.monotonic()
                now = time.monotonic()
                stats.elapsed_s = now - started
                stats.ttft_s = first_at - started if first_at else None
                if first_at and stats.output_tokens > 1 and now > first_at:
                    stats.tokens_per_s = (stats.output_tokens - 1) / (now - first_at)
                if reasoning or text or calls or usage is not None:
                    yield TurnDelta(
                        request_id=request_id,
                        text=text,
                        reasoning=reasoning,
                        tool_calls=[dict(c) for _, c in sorted(calls.items())],
                        stats=_snapshot(stats),
                    )
            r, t = splitter.finish()
            for call in calls.values():
                call["status"] = "complete"
            finished = True
            yield TurnDelta(
                request_id=request_id,
                text=t,
                reasoning=r,
                tool_calls=[dict(c) for _, c in sorted(calls.items())],
                finished=True,
                finish_reason=finish_reason,
                stats=_snapshot(stats),
            )
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                with contextlib.suppress(Exception):
                    await stream.close()


def _snapshot(stats: TurnStats) -> TurnStats:
    from dataclasses import replace

    return replace(stats, prompt=replace(stats.prompt) if stats.prompt else None)
