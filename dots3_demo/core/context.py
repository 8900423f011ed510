"""The context meter (no Gradio): a turn's prompt tokens, counted before it is sent, against the engine's context
(``max_model_len``) and the reply's max tokens.

The count is the length of the ``prompt_token_ids`` the engine will get, built from vLLM's own parts:

* the text: the messages as vLLM's chat parser hands them to a string-format chat template (each media part
  becomes the model's placeholder, before the message's text, joined by ``\\n``: vLLM's
  ``_get_full_multimodal_text_prompt``; tool-call arguments parsed as vLLM's ``_postprocess_messages`` does),
  rendered by vLLM's ``safe_apply_chat_template`` with the model's tokenizer and chat template
  (``add_generation_prompt``, the tools), and tokenized without special tokens (the renderer's chat tokenize
  parameters);
* the media: vLLM's Dots processor replaces each placeholder (``<|img|><|imgpad|><|endofimg|>``,
  ``<|audio_comp_start|><|audio_comp_pad|><|audio_comp_end|>``, ``<|video_pad|>``) with the item's whole
  expansion, whose length the inspector plans (``core.counts.inspector_tokens``' units: an image's or a clip's
  embeddings plus its two markers, a video's whole span).

The engine refuses a prompt of ``max_model_len`` tokens or more (vLLM's ``_validate_prompt_len``: the prompt plus
at least one output token must fit); a prompt under that is served, and a reply that would pass the context ends
there (``context full``). :func:`measure` says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dots3_demo import vllm_compat
from dots3_demo.core.counts import MARKERS_PER_ITEM
from dots3_demo.core.records import MediaItem
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import ChatSession, StudioState
from dots3_demo.core.turns import build_turn, new_media, user_message
from dots3_demo.engine.media import modality_of

Fit = Literal["fits", "reply cut", "will not fit", "unknown"]


@dataclass(frozen=True)
class ContextCount:
    """A turn's prompt as the engine will count it, against its context.

    ``prompt``: the engine's prompt tokens (``text`` + ``media``); ``max_model_len`` None: the context is not known
    (no engine attached and none given)."""

    prompt: int
    text: int
    media: int
    max_tokens: int
    max_model_len: int | None

    @property
    def fit(self) -> Fit:
        if not self.max_model_len:
            return "unknown"
        if self.prompt >= self.max_model_len:
            return "will not fit"
        if self.prompt + self.max_tokens > self.max_model_len:
            return "reply cut"
        return "fits"

    @property
    def reply_room(self) -> int | None:
        """The most tokens the reply can have (None: the context is not known)."""
        if not self.max_model_len:
            return None
        return max(0, min(self.max_tokens, self.max_model_len - self.prompt))

    def message(self) -> str:
        """What the meter says, in plain words."""
        total = f"{self.prompt:,} prompt tokens ({self.text:,} text, {self.media:,} media)"
        if not self.max_model_len:
            return f"{total} · the engine's context is not known yet"
        context = f"the context holds {self.max_model_len:,} (max_model_len)"
        if self.fit == "will not fit":
            over = self.prompt - self.max_model_len + 1
            return (f"This turn will not fit: {total}; {context}, and the engine refuses a prompt that leaves no "
                    f"room for one reply token ({over:,} token(s) too many).")
        if self.fit == "reply cut":
            return (f"{total} + {self.max_tokens:,} max tokens: {context}, so the reply can be at most "
                    f"{self.reply_room:,} tokens (context full before max tokens).")
        return f"{total} + {self.max_tokens:,} max tokens of {self.max_model_len:,}"


def _placeholders() -> dict[str, str]:
    """The model's placeholder per modality (``Dots3NoteForCausalLM.get_placeholder_str``'s strings)."""
    pm = vllm_compat.processor_module()
    return {"image": f"{pm.IMAGE_START}{pm.IMAGE_PAD}{pm.IMAGE_END}",
            "audio": f"{pm.AUDIO_START}{pm.AUDIO_PAD}{pm.AUDIO_END}",
            "video": pm.VIDEO_PLACEHOLDER}


def template_conversation(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as vLLM's chat parser gives them to a string-format template: each message's text parts joined by
    ``\\n``, its media parts as the model's placeholders before them (vLLM's own joiner), tool-call arguments parsed
    (vLLM's own post-processing)."""
    from vllm.renderers.chat_utils import _get_full_multimodal_text_prompt, _postprocess_messages

    placeholders = _placeholders()
    conversation: list[dict[str, Any]] = []
    for message in messages:
        out = {k: v for k, v in message.items() if k != "content"}
        content = message.get("content")
        if isinstance(content, list):
            storage: dict[str, list[str]] = {}
            texts: list[str] = []
            for part in content:
                modality = modality_of(part) if isinstance(part, dict) else None
                if modality is not None:
                    storage.setdefault(modality, []).append(placeholders[modality])
                elif isinstance(part, dict) and part.get("type") == "text":
                    texts.append(str(part.get("text", "")))
            out["content"] = _get_full_multimodal_text_prompt(storage, texts, False)
        else:
            out["content"] = content if content is not None else ""
        conversation.append(out)
    _postprocess_messages(conversation)  # type: ignore[arg-type]
    return conversation


def text_token_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] = ()) -> list[int]:
    """The chat template's prompt for ``messages`` tokenized, with one placeholder per media item (before the
    multimodal processor expands them): what vLLM's renderer tokenizes."""
    from vllm.renderers.hf import safe_apply_chat_template

    template = tokenizer.get_chat_template(None, tools=list(tools) or None)
    text = safe_apply_chat_template(None, tokenizer, template_conversation(messages),  # type: ignore[call-overload]
                                    tools=[dict(t) for t in tools] or None, chat_template=template,
                                    tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def media_expansion(media: Sequence[MediaItem]) -> dict[str, int]:
    """Each modality's prompt tokens in the engine's units (an image's or a clip's markers included)."""
    out = {"image": 0, "audio": 0, "video": 0}
    for item in media:
        out[item.kind] += item.tokens + MARKERS_PER_ITEM.get(item.kind, 0)
    return out


def media_item(path: str, report: Any) -> MediaItem:
    """One inspected file as the chat's media item, with the inspector's tokens (a video's whole span)."""
    from dots3_demo.inspection.audio import AudioReport
    from dots3_demo.inspection.video import VideoReport

    if isinstance(report, VideoReport):
        return MediaItem("video", str(path), tokens=report.prompt_tokens, frame_tokens=report.image_pad_tokens,
                         audio_tokens=report.audio_pad_tokens)
    kind = "audio" if isinstance(report, AudioReport) else "image"
    return MediaItem(kind, str(path), tokens=int(report.tokens))


def measure(tokenizer: Any, messages: Sequence[Mapping[str, Any]], media: Sequence[MediaItem], *,
            tools: Sequence[Mapping[str, Any]] = (), max_tokens: int, max_model_len: int | None) -> ContextCount:
    """Count the prompt of ``messages`` (the whole request: system prompt, history, the new turn; ``media``: every
    media item in it, in order, with the inspector's tokens) as the engine will, against ``max_model_len``."""
    ids = text_token_ids(tokenizer, messages, tools)
    placeholder_len = {m: len(tokenizer(p, add_special_tokens=False)["input_ids"])
                       for m, p in _placeholders().items()}
    expanded = media_expansion(media)
    placeholders = sum(placeholder_len[m.kind] for m in media)
    media_tokens = sum(expanded.values())
    total = len(ids) - placeholders + media_tokens
    return ContextCount(prompt=total, text=total - media_tokens, media=media_tokens, max_tokens=int(max_tokens),
                        max_model_len=int(max_model_len) if max_model_len else None)


def next_turn(tokenizer: Any, studio: StudioState, session: ChatSession, text: str | None, settings: ChatSettings,
              max_model_len: int | None) -> ContextCount | None:
    """The meter for the chat's next turn: the conversation so far, the message typed and the panel media not yet
    sent, with the chat's system prompt and tools, as ``chat.send_message`` would build it (``core.turns``), against
    ``max_model_len`` and the settings' max tokens. None when the tools JSON is not usable (the turn is refused for
    that, in its own words)."""
    from dots3_demo.tools import ToolSchemaError, parse_tools_json

    try:
        tools = parse_tools_json(settings.tools_json)
    except ToolSchemaError:
        return None
    media = new_media(studio, session)
    words = (text or "").strip()
    messages = list(session.messages)
    if words or media:
        messages.append(user_message(words, media))
    turn = build_turn(session_id=session.session_id, system=settings.system_prompt, messages=messages, tools=tools,
                      sampling=settings.sampling)
    return measure(tokenizer, turn.messages, [*session.media, *media], tools=turn.tools,
                   max_tokens=settings.sampling.max_tokens, max_model_len=max_model_len)
