"""The request as sent (issue 21 §3): one turn's OpenAI chat-completions request as vLLM's server takes it, to
copy as JSON, as ``curl`` and as Python with the ``openai`` client.

:func:`chat_request` is the one builder. The remote adapter sends what it builds (local media inlined as ``data:``
URLs, streamed) and keeps it with the reply's figures; the in-process adapter keeps the request that a ``vllm
serve`` of the same ``--model`` gets for the same prompt (tools as the server hands them to the template:
``tools.schemas.validate_tools``). Local media stay files here, as ``file://`` URLs with their sizes, rather than
megabytes of base64: the JSON and ``curl`` forms need a server started with ``--allowed-local-media-path``; the
Python form reads the files and sends them inline, as the studio's remote mode does.

Each form asks for ``return_token_ids`` and ``return_prompt_text``, so the answer carries the prompt the server
built, to set beside the prompt view. The copies are not streamed (the answer comes back whole); the remote
adapter streams the same body.
"""

from __future__ import annotations

import json
import os
import pprint
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from dots3_demo.engine.media import modality_of
from dots3_demo.engine.protocol import ChatRequest, SentMedia, TurnRequest
from dots3_demo.tools.forcing import tool_call_regex

URL_PARTS = ("image_url", "audio_url", "video_url")  # parts whose media is a URL (``input_audio`` carries its data)
SERVE_FLAGS = "--enable-auto-tool-choice --tool-call-parser dots --trust-request-mm-kwargs"


def has_video(messages: list[dict[str, Any]]) -> bool:
    """Whether any message carries a video part (the only media the budget kwargs plan)."""
    return any(isinstance(part, dict) and modality_of(part) == "video"
               for message in messages if isinstance(message.get("content"), list)
               for part in message["content"])


def as_json(request: ChatRequest) -> str:
    """The body as JSON text (``POST {base_url}/chat/completions``)."""
    return json.dumps(request.body(), indent=2, ensure_ascii=False)


def as_curl(request: ChatRequest) -> str:
    """A shell command that sends the body (a quoted here-document: nothing in it is expanded)."""
    return "\n".join([
        *_where_lines(request),
        f"curl -sS {request.base_url}/chat/completions \\",
        "  -H 'Content-Type: application/json' -H \"Authorization: Bearer ${OPENAI_API_KEY:-EMPTY}\" \\",
        "  -d @- <<'REQUEST_JSON'",
        as_json(request),
        "REQUEST_JSON",
    ])


def as_python(request: ChatRequest) -> str:
    """A Python script that sends the request with the ``openai`` client and prints the answer."""
    imports = ["base64", "mimetypes", "os", "urllib.parse", "urllib.request"] if request.media else ["os"]
    lines = ['"""The request as the studio sent it (the answer carries prompt_token_ids and prompt_text)."""',
             *_where_lines(request), *(f"import {name}" for name in imports), "",
             "from openai import OpenAI", "", ""]
    if request.media:
        lines += [
            "def inline(url):",
            '    """A local file (file://) as a data: URL, as the studio\'s remote mode sends media."""',
            '    if not url.startswith("file://"):',
            "        return url",
            "    path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)",
            '    mime = mimetypes.guess_type(path)[0] or "application/octet-stream"',
            '    with open(path, "rb") as media:',
            '        return f"data:{mime};base64," + base64.b64encode(media.read()).decode()',
            "", "",
        ]
    lines.append(_assign("messages = ", request.messages))
    if request.media:
        lines += [
            "for message in messages:",
            '    for part in message["content"] if isinstance(message.get("content"), list) else []:',
            f"        if part.get(\"type\") in {URL_PARTS!r}:",
            '            part[part["type"]]["url"] = inline(part[part["type"]]["url"])',
        ]
    lines += ["", f"client = OpenAI(base_url={request.base_url!r}, "
                  'api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"))',
              "response = client.chat.completions.create(",
              f"    model={request.model!r},",
              "    messages=messages,"]
    lines += [_assign(f"    {key}=", value) + "," for key, value in request.params.items()]
    lines += [_assign("    extra_body=", request.extra) + ",", ")", "print(response.model_dump_json(indent=2))"]
    return "\n".join(lines)


def _assign(prefix: str, value: Any) -> str:
    """``prefix`` and ``value`` (JSON data) as a Python literal, its continuation lines aligned under it."""
    text = pprint.pformat(value, width=max(40, 116 - len(prefix)), sort_dicts=False)
    return prefix + text.replace("\n", "\n" + " " * len(prefix))


def _where_lines(request: ChatRequest) -> list[str]:
    """Comment lines (shell and Python alike): where the request goes, and what its local media need."""
    if request.endpoint:
        lines = [f"# Sent to the server at {request.endpoint} (the studio's remote mode streamed it)."]
    else:
        lines = ["# Made in-process; a server of the same model gets the same prompt:",
                 f"#   vllm serve {request.model} {SERVE_FLAGS}"]
    files = [m for m in request.media if m.size is not None]
    if files:
        total = sum(m.size or 0 for m in files)
        lines.append(f"# {len(files)} local media file(s), {total:,} bytes, as file:// URLs; the JSON needs a "
                     f"server started with --allowed-local-media-path (the Python form sends them inline).")
    return lines


def fence(text: str, language: str) -> str:
    """``text`` as a Markdown code block whose fence no backtick run inside it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


def _file_url(url: str) -> tuple[str, int | None]:
    """A media URL as copied: a local path or ``file://`` URL as an absolute ``file://`` URL with the file's size;
    ``data:`` and ``http(s)`` URLs as they are."""
    if url.startswith(("data:", "http://", "https://")):
        return url, None
    path = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)) if url.startswith("file://") \
        else Path(url)
    path = path.absolute()
    try:
        size: int | None = os.path.getsize(path)
    except OSError:
        size = None
    return path.as_uri(), size


def _copied_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], tuple[SentMedia, ...]]:
    """The messages with every URL media part as :func:`_file_url` gives it, and those parts."""
    copied: list[dict[str, Any]] = []
    media: list[SentMedia] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            copied.append(dict(message))
            continue
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            value = part.get(kind) if kind in URL_PARTS else None
            url = value.get("url") if isinstance(value, dict) else value
            if kind is None or not isinstance(url, str):
                parts.append(part)
                continue
            url, size = _file_url(url)
            media.append(SentMedia(kind.removesuffix("_url"), url, size))
            parts.append({"type": kind, kind: {"url": url}})
        copied.append({**message, "content": parts})
    return copied, tuple(media)


def chat_request(turn: TurnRequest, model: str, *, mm_kwargs: bool = True, endpoint: str | None = None) -> ChatRequest:
    """``turn`` as a chat-completions request for ``model``. The video budget (``mm_processor_kwargs``) goes only
    with a video, and only while the server takes it (``mm_kwargs``); tool choice "required" is one call of the
    tools, forced by ``structured_outputs`` (the server's own "required" needs a JSON-schema call format); else the
    sampling's ``structured_outputs`` (an eval item's ``choice``) goes as that field."""
    settings = turn.sampling
    params: dict[str, Any] = {"temperature": settings.temperature, "top_p": settings.top_p,
                              "max_tokens": settings.max_tokens}
    if settings.seed is not None:
        params["seed"] = settings.seed
    if turn.tools:
        params["tools"] = turn.tools
        params["tool_choice"] = "auto"
    extra: dict[str, Any] = {
        "repetition_penalty": settings.repetition_penalty,
        "skip_special_tokens": False,
        # the server returns the prompt it built (ids and text): the prompt view, and the check of its tokens by
        # modality against the inspector's plan (issue 21 §1-2)
        "return_token_ids": True,
        "return_prompt_text": True,
    }
    if mm_kwargs and has_video(turn.messages):
        extra["mm_processor_kwargs"] = turn.mm_processor_kwargs()
    if turn.tool_choice == "required":
        extra["structured_outputs"] = {"regex": tool_call_regex(turn.tools)}
    elif settings.structured_outputs is not None:
        extra["structured_outputs"] = {"choice": list(settings.structured_outputs.choice)}
    if settings.top_k and settings.top_k > 0:
        extra["top_k"] = settings.top_k
    messages, media = _copied_messages(turn.messages)
    return ChatRequest(model=model, messages_json=_json(messages), params_json=_json(params), extra_json=_json(extra),
                       media=media, endpoint=endpoint)


def _json(value: Any) -> str:
    """``value`` as JSON text; what JSON cannot hold (an ``image_pil`` part's PIL image, which the in-process
    engine takes) is named rather than failing the turn."""
    return json.dumps(value, ensure_ascii=False, default=lambda o: f"<{type(o).__name__} in memory: not copyable>")
