"""The remote adapter: an OpenAI-style chat-completions server (e.g. ``vllm serve`` with
``--enable-auto-tool-choice --tool-call-parser dots``) at ``--endpoint``.

Tool calls come from the server's ``tool_calls`` deltas (the server runs the Dots parser);
reasoning from the ``reasoning``/``reasoning_content`` delta fields, and any ``<think>`` tags
left in the content are split here. Local media paths are sent as ``data:`` URLs. Abort =
close the HTTP stream (vLLM's server aborts a request whose client disconnects). Each request carries
``X-Session-ID`` (the turn's session id), so a router keeps a conversation on one server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import mimetypes
import os
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import replace
from pathlib import Path
from typing import Any

from dots3_demo.engine.media import check_media_limits, modality_of, read_media_bytes
from dots3_demo.engine.promptview import (
    PromptView,
    server_prompt_flags,
    special_tokens,
    text_messages,
    view_from_tokenizer,
)
from dots3_demo.engine.protocol import (
    CONTEXT_HINT,
    DEFAULT_REMOTE_CAPACITY,
    EngineStatus,
    EngineUnavailable,
    PromptTokens,
    RequestRefused,
    TurnDelta,
    TurnRejected,
    TurnRequest,
    TurnStats,
)
from dots3_demo.engine.stats import prompt_tokens_from_view
from dots3_demo.engine.textsplit import ReasoningSplitter
from dots3_demo.engine.wire import ChatRequest, chat_request
from dots3_demo.tools.calls import ToolCallAccumulator

logger = logging.getLogger(__name__)

_DEFAULT_MIME = {"image": "image/png", "audio": "audio/wav", "video": "video/mp4"}

# A conversation's key for a router in front of several servers (vllm-router's consistent_hash reads it before
# X-Request-Id, which is new for every turn): the turn's session id, the same for every turn of a browser session.
SESSION_HEADER = "X-Session-ID"

# vLLM's server refuses per-request mm_processor_kwargs unless started with --trust-request-mm-kwargs.
MM_KWARGS_FLAG = "--trust-request-mm-kwargs"
MM_KWARGS_REFUSED = (
    f"This server does not take the studio's video budget (it was started without {MM_KWARGS_FLAG}), so it "
    "plans the video with its own defaults: the frames and tokens the Budget tab shows may not be what the "
    f"model gets. Start the server with {MM_KWARGS_FLAG} to have it plan exactly as shown."
)


def refused_message(exc: Any) -> str:
    """A server's refusal (an HTTP 4xx) in plain words, with what to change."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    detail = body.get("message") if isinstance(body, dict) else None
    detail = " ".join(str(detail or getattr(exc, "message", "") or exc).split())
    hint = ""
    if "context length" in detail or "max_model_len" in detail or "maximum model length" in detail:
        hint = " " + CONTEXT_HINT
    elif status in (401, 403):
        hint = " Check the API key (--api-key or OPENAI_API_KEY)."
    return f"The server refused this request (HTTP {status}): {detail}{hint}"


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
            if not isinstance(url, str):
                raise TurnRejected(f"a {kind} part has no URL")
            parts.append({"type": kind, kind: {"url": _to_data_url(url, modality)}})
        wire.append({**message, "content": parts})
    return wire


async def server_version(endpoint: str, timeout: float = 5.0) -> str | None:
    """vLLM's server says its version at ``/version`` (beside ``/v1``); None when it does not answer."""
    import httpx

    root = endpoint.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            answer = await client.get(f"{root}/version")
            answer.raise_for_status()
            version = answer.json().get("version")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version else None


class RemoteEngine:
    """``ChatEngine`` over an OpenAI-compatible server, with ``openai.AsyncOpenAI``."""

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        capacity: int = DEFAULT_REMOTE_CAPACITY,
        tokenizer_dir: str | None = None,
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
        self.mm_kwargs_refused = False  # the server refused per-request mm_processor_kwargs once
        # The tokenizer that reads the server's prompt_token_ids (the studio's profile, --model; None: the
        # bundled preview profile's). Loaded on the first reply that returns ids.
        self._tokenizer_dir = tokenizer_dir
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()  # loaded once, from start()'s thread or a reply's
        self.server_version: str | None = None  # the server's /version, asked when connecting (None: not said)

    def tokenizer(self) -> Any:
        """The profile's tokenizer, loaded once (vLLM's ``get_tokenizer``, as the inspector loads it)."""
        with self._tokenizer_lock:
            if self._tokenizer is None:
                self._tokenizer = self._load_tokenizer()
            return self._tokenizer

    def _load_tokenizer(self) -> Any:
        from vllm.tokenizers.registry import get_tokenizer

        from dots3_demo.profiles import PREVIEW_PROFILE_DIR

        return get_tokenizer(self._tokenizer_dir or str(PREVIEW_PROFILE_DIR))

    def prompt_view(self, ids: list[int], prompt_text: str | None, turn: TurnRequest) -> PromptView:
        """The server's own prompt ids, read with the profile's tokenizer, and flagged where they show another
        model or another chat template than the profile's (``promptview.server_prompt_flags``)."""
        from jinja2 import TemplateError

        tokenizer = self.tokenizer()
        try:
            local = tokenizer.apply_chat_template(text_messages(turn.messages), tools=turn.tools or None,
                                                  add_generation_prompt=True, tokenize=False)
            flags = server_prompt_flags(ids, prompt_text, special_tokens(tokenizer),
                                        lambda text: tokenizer.encode(text, add_special_tokens=False), str(local))
        except (ValueError, TypeError, LookupError, TemplateError) as exc:  # cannot render here: say so, keep the view
            flags = (f"this profile's chat template could not render the conversation here "
                     f"({' '.join(str(exc).split())}): the template was not checked",)
        return view_from_tokenizer(ids, tokenizer, "server", prompt_text=prompt_text, flags=flags)

    @property
    def status(self) -> EngineStatus:
        return self._status

    @property
    def label(self) -> str:
        return f"remote · {self.model or '?'} at {self.endpoint}"

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def mm_limits(self) -> dict[str, int] | None:
        """The server's limits are its own; it says so when a request exceeds them."""
        return None

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
            api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
            self._client = AsyncOpenAI(base_url=self.endpoint, api_key=api_key, timeout=self._timeout)
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
        except Exception as exc:
            reason = " ".join(str(exc).split()) or "no answer"
            self._status = EngineStatus("failed", f"cannot reach {self.endpoint}: {reason}",
                                        since=time.monotonic())
            raise EngineUnavailable(self._status.message) from exc
        self.server_version = await server_version(self.endpoint)
        try:  # now, in a thread: loaded on the first reply, it held up the stream (and the page) for seconds
            await asyncio.to_thread(self.tokenizer)
        except Exception:  # the prompt view then says why on the first reply; the chat works on
            logger.exception("the profile's tokenizer did not load")
        said = f"vLLM {self.server_version}" if self.server_version else "vLLM version not said (no /version)"
        self._status = EngineStatus("ready", f"{self.model} at {self.endpoint} · {said}", since=time.monotonic())

    def probe(self, timeout: float = 5.0) -> bool:
        """Ask the server's ``/models`` now, synchronously (before the UI is built), for the model name
        and its ``max_model_len``, so the Budget tab and max tokens start sized to the server.
        False when the server does not answer (the sizes then come from the first connection)."""
        import json
        import urllib.request

        key = self._api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        request = urllib.request.Request(f"{self.endpoint}/models", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                listed = json.load(answer).get("data") or []
        except (OSError, ValueError):
            return False
        entry = next((m for m in listed if self.model is None or m.get("id") == self.model), None)
        if entry is None:
            return False
        self.model = self.model or entry.get("id")
        self._max_model_len = entry.get("max_model_len") or self._max_model_len
        return True

    def unfinished_requests(self) -> int | None:
        """The server's own count is in its ``/metrics``; the studio cannot tell from here."""
        return None

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
        self._status = EngineStatus("stopped", "disconnected", since=time.monotonic())

    def _request(self, turn: TurnRequest, *, mm_kwargs: bool = True) -> ChatRequest:
        """The chat-completions request for ``turn`` (``engine.wire``: the one builder; the video budget only while
        the server takes it, ``mm_kwargs``)."""
        return chat_request(turn, self.model or "", mm_kwargs=mm_kwargs, endpoint=self.endpoint)

    async def stream_turn(self, turn: TurnRequest) -> AsyncGenerator[TurnDelta, None]:
        if self._status.state != "ready" or self._client is None:
            raise EngineUnavailable(f"endpoint not ready ({self._status.state}: {self._status.message})")
        check_media_limits(turn.messages, None)
        request_id = turn.request_id
        started = time.monotonic()
        first_at: float | None = None
        splitter = ReasoningSplitter()
        calls = ToolCallAccumulator()  # the server's tool_calls deltas (its DotsToolParser's), by index
        stats = TurnStats(source="server", max_tokens=int(turn.sampling.max_tokens), max_model_len=self._max_model_len)
        finish_reason: str | None = None
        stream, notices, stats.request = await self._open(turn)
        self._streams[request_id] = stream
        finished = False
        try:
            async for chunk in stream:
                reasoning, text = "", ""
                returned = getattr(chunk, "model_extra", None) or {}
                if stats.prompt_view is None and returned.get("prompt_token_ids"):
                    # Off the event loop (a chat template and a tokenizer pass): other sessions' streams go on.
                    stats.prompt_view = await asyncio.to_thread(self.prompt_view, list(returned["prompt_token_ids"]),
                                                                returned.get("prompt_text"), turn)
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    stats.output_tokens = usage.completion_tokens or 0
                    if stats.prompt_view is not None:  # by modality, from the server's own ids
                        stats.prompt = prompt_tokens_from_view(stats.prompt_view)
                    else:
                        stats.prompt = PromptTokens(total=usage.prompt_tokens or 0, by_modality=False)
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
                        calls.add(tool_delta)  # "writing" until the stream ends
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
                        tool_calls=calls.calls,
                        stats=stats.snapshot(),
                        notices=notices,
                    )
                    notices = ()
            r, t = splitter.finish()
            calls.settle()
            finished = True
            yield TurnDelta(
                request_id=request_id,
                text=t,
                reasoning=r,
                tool_calls=calls.calls,
                finished=True,
                finish_reason=finish_reason,
                stats=stats.snapshot(),
                notices=notices,
            )
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                with contextlib.suppress(Exception):
                    await stream.close()


    async def _open(self, turn: TurnRequest) -> tuple[Any, tuple[str, ...], ChatRequest]:
        """Send the request; returns the stream, the notices on how it was served and the request as sent.

        A server that refuses per-request ``mm_processor_kwargs`` gets the request again without
        them (and never again with them), and the user is told what that means. Any other refusal
        (HTTP 4xx) raises ``RequestRefused`` in plain words; it is not an engine failure.
        """
        import openai

        notices: tuple[str, ...] = ()
        headers = {"X-Request-Id": turn.request_id, SESSION_HEADER: turn.session_id}
        try:
            try:
                request = self._request(turn, mm_kwargs=not self.mm_kwargs_refused)
                body = request.openai_kwargs(to_wire_messages(turn.messages), stream=True)
                return await self._client.chat.completions.create(**body, extra_headers=headers), notices, request
            except openai.BadRequestError as exc:
                if "mm_processor_kwargs" not in str(exc) or "mm_processor_kwargs" not in body.get("extra_body", {}):
                    raise
                self.mm_kwargs_refused = True
                notices = (MM_KWARGS_REFUSED,)
                self._status = replace(self._status, message=f"{self._status.message} · plans videos with its own "
                                       f"defaults, not the Budget tab's (no {MM_KWARGS_FLAG})")
                request = self._request(turn, mm_kwargs=False)
                body = request.openai_kwargs(to_wire_messages(turn.messages), stream=True)
                return await self._client.chat.completions.create(**body, extra_headers=headers), notices, request
        except openai.APIStatusError as exc:
            if 400 <= exc.status_code < 500 and exc.status_code not in (404, 408, 429):
                raise RequestRefused(refused_message(exc)) from exc
            raise
