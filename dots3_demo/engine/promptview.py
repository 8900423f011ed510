"""The prompt the engine got, token by token (issue 21 §1), and its tokens by modality read from the ids alone
(§2, :func:`dots3_demo.engine.stats.prompt_tokens_from_view`): one pure function from the engine's own prompt
token ids to a :class:`PromptView`.

A view is a tuple of :class:`PromptSpan`: a run of ordinary tokens (``text``, decoded as one piece so multi-byte
characters survive), one special token of the chat template (``special``), the markers and pad tokens of a media
item (``image``, ``audio``, ``video frame``, ``video sound``: a run of pad tokens is one span, ``<image pad> × 322``),
and a video frame's timestamp text (``<00:00:01.12>``, kind ``video frame``), which vLLM's dots3_note video
expansion puts before each frame. Nothing but the ids and the tokenizer is read, so the same function serves the
in-process engine (``RequestOutput.prompt_token_ids``), a server that returns ``prompt_token_ids`` and vLLM's
renderer run here.

How a video is told from images with the ids alone: vLLM's dots3_note processor puts ``<HH:MM:SS.ff>`` text
before every frame and nowhere else, and it refuses a request that mixes a video with images or audio; so a prompt
in which an image block follows a timestamp holds one video, and every image and audio block in it is the video's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

SpanKind = Literal["text", "special", "image", "audio", "video frame", "video sound", "tools"]
# Where the ids came from, for the view's caption.
ViewSource = Literal["engine", "server", "renderer"]

IMAGE_START, IMAGE_PAD, IMAGE_END = "<|img|>", "<|imgpad|>", "<|endofimg|>"
AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_comp_start|>", "<|audio_comp_pad|>", "<|audio_comp_end|>"
PAD_LABELS = {IMAGE_PAD: "<image pad>", AUDIO_PAD: "<audio pad>"}
TIMESTAMP = re.compile(r"<\d{2}:\d{2}:\d{2}\.\d{2}>$")
_TIMESTAMP_MAX_TOKENS = 32  # a timestamp is ~9 tokens in any byte-level BPE; bounds the suffix search


@dataclass(frozen=True)
class PromptSpan:
    """One chip of the prompt view. ``token_ids`` × ``repeat`` are its ids in order (a pad run keeps its one id
    and the run's length, so a record of a long video stays small); ``text`` is what it reads (a pad run: the pad
    token's text once)."""

    kind: SpanKind
    text: str
    token_ids: tuple[int, ...]
    repeat: int = 1
    pad: bool = False  # a run of media pad tokens (embeddings), folded to one chip

    @property
    def count(self) -> int:
        return len(self.token_ids) * self.repeat

    @property
    def label(self) -> str:
        """The chip's words: ``<image pad> × 322`` for a pad run, else the text."""
        if self.pad:
            return f"{PAD_LABELS.get(self.text, self.text)} × {self.repeat:,}"
        return self.text

    def ids(self) -> tuple[int, ...]:
        return self.token_ids * self.repeat


@dataclass(frozen=True)
class PromptView:
    """The rendered prompt as the engine got it: its spans, where the ids came from, and (a server's) the prompt
    text the server says its chat template produced."""

    spans: tuple[PromptSpan, ...]
    source: ViewSource
    note: str = ""  # e.g. why the renderer here was used rather than the server's own ids
    prompt_text: str | None = None
    flags: tuple[str, ...] = ()  # how the prompt differs from what this studio expects (another template, …)

    def token_ids(self) -> tuple[int, ...]:
        return tuple(i for span in self.spans for i in span.ids())

    @property
    def total(self) -> int:
        return sum(span.count for span in self.spans)

    def text(self) -> str:
        """The whole prompt as text (pad runs written out in full)."""
        return "".join(span.text * span.repeat if span.pad else span.text for span in self.spans)


def _runs(ids: Sequence[int], special: Mapping[int, str]) -> list[tuple[str, list[int]]]:
    """``ids`` cut into ("text", ordinary ids), ("special", [id]) and ("pad", [id × n]) runs."""
    pad_ids = {i for i, name in special.items() if name in PAD_LABELS}
    runs: list[tuple[str, list[int]]] = []
    for token in ids:
        kind = "pad" if token in pad_ids else "special" if token in special else "text"
        if runs and kind != "special" and runs[-1][0] == kind and (kind == "text" or runs[-1][1][0] == token):
            runs[-1][1].append(token)
        else:
            runs.append((kind, [token]))
    return runs


def _timestamp_suffix(ids: list[int], decode: Callable[[Sequence[int]], str]) -> int:
    """How many of ``ids``' last tokens spell a frame's timestamp text (0: the run does not end with one)."""
    if not TIMESTAMP.search(decode(ids[-_TIMESTAMP_MAX_TOKENS:])):
        return 0
    for k in range(1, min(len(ids), _TIMESTAMP_MAX_TOKENS) + 1):
        if TIMESTAMP.fullmatch(decode(ids[-k:])):
            return k
    return 0


def build_prompt_view(ids: Sequence[int], decode: Callable[[Sequence[int]], str], special: Mapping[int, str],
                      source: ViewSource, *, note: str = "", prompt_text: str | None = None) -> PromptView:
    """The view of ``ids``: ``decode`` turns ordinary ids into text (the tokenizer's, special tokens kept),
    ``special`` names each special token id (the tokenizer's added vocabulary, see :func:`special_tokens`)."""
    names = special
    runs = _runs(ids, special)
    spans: list[PromptSpan] = []
    block: str | None = None  # "image" / "audio" while inside a media item's markers
    for index, (kind, run) in enumerate(runs):
        name = names.get(run[0], "")
        if kind == "special":
            if name in (IMAGE_START, AUDIO_START):
                block = "image" if name == IMAGE_START else "audio"
            span_kind: SpanKind = block if block else "special"  # type: ignore[assignment]
            spans.append(PromptSpan(span_kind, name, (run[0],)))
            if name in (IMAGE_END, AUDIO_END):
                block = None
            continue
        if kind == "pad":
            spans.append(PromptSpan("image" if name == IMAGE_PAD else "audio", name, (run[0],), len(run), pad=True))
            continue
        followed_by_image = index + 1 < len(runs) and names.get(runs[index + 1][1][0]) == IMAGE_START
        stamp = _timestamp_suffix(run, decode) if followed_by_image else 0
        if stamp < len(run):
            spans.append(PromptSpan("text", decode(run[: len(run) - stamp]), tuple(run[: len(run) - stamp])))
        if stamp:
            spans.append(PromptSpan("video frame", decode(run[-stamp:]), tuple(run[-stamp:])))
    if any(span.kind == "video frame" for span in spans):  # one video: every media block is the video's
        moved = {"image": "video frame", "audio": "video sound"}
        spans = [PromptSpan(moved[s.kind], s.text, s.token_ids, s.repeat, s.pad) if s.kind in moved else s  # type: ignore[arg-type]
                 for s in spans]
    return PromptView(tuple(spans), source, note, prompt_text)


def special_tokens(tokenizer: Any) -> dict[int, str]:
    """The tokenizer's special (added) tokens by id: the chat template's markers and the media placeholders."""
    added = tokenizer.get_added_vocab()
    return {int(i): str(name) for name, i in added.items()}


def view_from_tokenizer(ids: Sequence[int], tokenizer: Any, source: ViewSource, *, note: str = "",
                        prompt_text: str | None = None, flags: tuple[str, ...] = ()) -> PromptView:
    """:func:`build_prompt_view` with a Hugging Face tokenizer's ``decode`` and added vocabulary."""
    decode_with = tokenizer.decode

    def decode(part: Sequence[int]) -> str:
        return str(decode_with(list(part), skip_special_tokens=False, clean_up_tokenization_spaces=False))

    view = build_prompt_view(ids, decode, special_tokens(tokenizer), source, note=note, prompt_text=prompt_text)
    return replace(view, flags=flags) if flags else view


VIDEO_PLACEHOLDER = "<|video_pad|>"
_PLACEHOLDERS = (f"{IMAGE_START}{IMAGE_PAD}{IMAGE_END}", f"{AUDIO_START}{AUDIO_PAD}{AUDIO_END}", VIDEO_PLACEHOLDER)


def _skeleton(text: str) -> str:
    """A prompt's text without media placeholders and whitespace: what a chat template decides."""
    for placeholder in _PLACEHOLDERS:
        text = text.replace(placeholder, "")
    return "".join(text.split())


def text_messages(messages: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """The messages with only their text parts (joined by a line feed), for rendering the template here."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content
                                if isinstance(p, dict) and p.get("type") == "text")
        out.append({**message, "content": content})
    return out


def server_prompt_flags(ids: Sequence[int], prompt_text: str | None, special: Mapping[int, str],
                        encode: Callable[[str], Sequence[int]], local_prompt_text: str) -> tuple[str, ...]:
    """What a server's own prompt says about how it differs from this studio's profile, in plain words.

    ``prompt_text`` is the text the server's chat template produced (before media expansion); ``encode`` is this
    profile's tokenizer; ``local_prompt_text`` the same messages (text parts) rendered with this profile's
    template. Another tokenizer (another model) shows as the server's ids not holding the special tokens this
    tokenizer reads in its text; another template as a different text once media placeholders and whitespace
    are left out."""
    flags: list[str] = []
    if prompt_text is None:
        return ("the server returned no prompt text (a server before vLLM 0.32): the template was not checked",)
    ignore = {i for i, name in special.items() if name in PAD_LABELS or name == VIDEO_PLACEHOLDER}
    theirs = [i for i in ids if i in special and i not in ignore]
    ours = [i for i in encode(prompt_text) if i in special and i not in ignore]
    if theirs != ours:
        flags.append("another model: the server's prompt ids do not hold the special tokens this profile's tokenizer "
                     "reads in the server's own prompt text (the server's tokenizer is not this profile's; --model "
                     "should name the checkpoint the server runs)")
    elif _skeleton(prompt_text) != _skeleton(local_prompt_text):
        flags.append("another chat template: the server's rendered prompt differs from this profile's template "
                     "(a server started with --chat-template, or another checkpoint's template)")
    return tuple(flags)
