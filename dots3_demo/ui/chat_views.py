"""The chat's presentation: plain functions that turn a conversation into what the page shows (no Gradio).

* the engine line (:func:`engine_status`; ``brief``: the header's badge);
* the chat's bubbles that are not model text (the welcome, notices, tool calls and their results);
* the tool panel's rows;
* the figures line under the chat (TTFT, rates, prompt tokens, engine against inspector);
* the tools editor's example text and its status line.

``chat`` streams the turns and calls these for every snapshot; ``app`` and ``layout`` call them for the
page's first values and for the engine watch.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dots3_demo.core.counts import mismatch_causes, token_pairs
from dots3_demo.core.records import MediaItem
from dots3_demo.core.reply import Reply
from dots3_demo.core.state import ChatSession, StudioState
from dots3_demo.core.text import show_controls
from dots3_demo.core.turns import loading_line
from dots3_demo.engine.protocol import ChatEngine, PromptTokens, SamplingSettings, ToolCall, TurnStats
from dots3_demo.engine.stats import finish_words
from dots3_demo.tools import EXAMPLE_TOOLS, ToolSchemaError, parse_tools_json
from dots3_demo.ui import prompt_view, views

if TYPE_CHECKING:
    from gradio.components.chatbot import MessageDict

TOOL_PANEL_COLUMNS = ["name", "arguments", "status", "result"]
TOOL_STATUS_SHOWN = {"writing": "writing…", "called": "waiting for result", "answered": "✓ answered"}
TOOL_NAMES_SHOWN = 12  # the tools status line names at most this many
EXAMPLE_TOOL_NAMES = tuple(t["function"]["name"] for t in EXAMPLE_TOOLS)
EXAMPLE_CHOICES = {
    "weather": ["get_weather"],
    "search": ["search"],
    "calculator": ["calculator"],
    "all three": list(EXAMPLE_TOOL_NAMES),
    "none": [],
}
WRITING_TOOL_CALL = "🛠 writing a tool call"  # the title of the bubble shown while a call is written

STATUS_ICON = {"idle": "○", "loading": "◌", "ready": "●", "failed": "✕", "stopped": "■"}

ENGINE_HELP = (
    "**No engine attached — preview mode.** The inspector above is real vLLM preprocessing, but "
    "nothing here generates answers, and this demo never invents one.\n\n"
    "To chat, start the studio on a GPU host with the checkpoint loaded in-process:\n\n"
    "```bash\npython app.py --model /path/to/Dots3-NOTE --engine inprocess --tensor-parallel-size 8\n```\n\n"
    "or point it at a running OpenAI-compatible server started with "
    "`vllm serve <model> --tool-call-parser dots`:\n\n"
    "```bash\npython app.py --model /path/to/Dots3-NOTE --endpoint http://host:8000/v1\n```"
)


# ---------------------------------------------------------------- engine status
def engine_status(engine: ChatEngine | None, *, brief: bool = False) -> str:
    """The chat's engine line: state, load stage and time, or why it failed (vLLM's lines in a fold).

    ``brief``: the header's badge, plain text (``engine: <label> · <state>``)."""
    if engine is None:
        if brief:
            return "no engine attached — preview mode"
        return "○ **no engine** — preview mode: the inspector works, the chat explains how to attach an engine."
    status = engine.status
    if brief:
        return f"engine: {engine.label} · {status.state}"
    icon = STATUS_ICON.get(status.state, "○")
    head = f"{icon} **engine {status.state}**"
    if status.state == "idle":
        head += " — starts on the first message"
    elif status.state == "loading":
        head += (f" — {views.esc(loading_line(status))}. The inspector works meanwhile; a message you send now "
                 "waits until the model is ready.")
    message = status.message if status.message not in ("", status.state) and status.state != "loading" else ""
    line = head + (f" · {views.esc(message)}" if message else "")
    line += f" · `{views.esc(engine.label)}` · up to {engine.capacity} concurrent replies"
    if status.state == "loading" and status.details:
        line += f"  \n<small>vLLM: {views.esc(status.details[-1][:160])}</small>"
    if status.state == "failed" and status.details:
        shown = views.esc("\n".join(status.details))
        line += f"\n\n<details><summary>vLLM's last lines</summary>\n\n<pre>{shown}</pre>\n\n</details>"
    return line


# ---------------------------------------------------------------- bubbles
def chat_welcome(engine: ChatEngine | None) -> list[MessageDict]:
    """The chat's first message."""
    if engine is None:
        return [{"role": "assistant", "content": ENGINE_HELP}]
    return []


def notice(text: str, title: str = "⚠ Not sent to the model") -> dict[str, Any]:
    """An assistant-side notice in the chat (not model output)."""
    return {"role": "assistant", "content": show_controls(text), "metadata": {"title": title, "status": "done"}}


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)  # escapes control bytes itself
    except (TypeError, ValueError):
        return show_controls(text)


def tool_call_bubble(call: ToolCall) -> dict[str, Any]:
    return {"role": "assistant", "content": f"```json\n{_pretty_json(call.arguments)}\n```",
            "metadata": {"title": f"🛠 {call.name}", "status": "done" if call.complete else "pending"}}


def user_bubbles(text: str, media: Sequence[MediaItem]) -> list[dict[str, Any]]:
    """One user turn in the chat: each upload as a file block (named), then the text (none when empty); the order
    of ``core.turns.user_message``."""
    shown: list[dict[str, Any]] = [{"role": "user", "content": {"path": m.path, "alt_text": views.name_of(m.path)}}
                                   for m in media]
    if text:
        shown.append({"role": "user", "content": show_controls(text)})
    return shown


def answer_bubbles(reply: Reply) -> list[dict[str, Any]]:
    """A reply as it stands, as bubbles: the engine's notices on how it was served, the reasoning (folded; pending
    while the model still thinks), the text, each tool call, a pending bubble while a call is being written. The
    chat's and compare's columns show replies so."""
    shown = [notice(text, "ℹ How this request was served") for text in reply.notices]
    if reply.reasoning:
        thinking = not reply.text and not reply.tool_calls and not reply.finished
        shown.append({"role": "assistant", "content": show_controls(reply.reasoning),
                      "metadata": {"title": "Thinking", "status": "pending" if thinking else "done"}})
    if reply.text:
        shown.append({"role": "assistant", "content": show_controls(reply.text)})
    shown += [tool_call_bubble(call) for call in reply.tool_calls]
    if reply.writing_tool_call:
        shown.append({"role": "assistant", "content": "…",
                      "metadata": {"title": WRITING_TOOL_CALL, "status": "pending"}})
    return shown


def tool_result_bubble(call: ToolCall) -> dict[str, Any]:
    return {"role": "assistant", "content": f"```json\n{_pretty_json(call.result)}\n```",
            "metadata": {"title": f"↩ {call.name} result (sent to the model)", "status": "done"}}


# ---------------------------------------------------------------- tool panel
def tool_rows(session: ChatSession) -> list[list[str]]:
    return [[t.name, _short(t.arguments), TOOL_STATUS_SHOWN[t.status], _short(t.result)] for t in session.tools]


def _short(text: str, limit: int = 48) -> str:
    """Keep the panel compact; the chat bubbles hold the full JSON."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- figures
def _n(value: int) -> str:
    return f"{value:,}"


def token_comparison(prompt: PromptTokens, media: tuple[MediaItem, ...]) -> list[str]:
    """``engine: image 1,037 · inspector: 1,037 ✓`` per modality present in the conversation."""
    lines = []
    for pair in token_pairs(prompt, media):
        note = f" ({_n(pair.inspector - pair.markers)} + {pair.markers} markers)" if pair.markers else ""
        mark = "✓" if pair.equal else "≠"
        lines.append(f"engine: {pair.label} {_n(pair.engine)} · inspector: {_n(pair.inspector)}{note} {mark}")
    return lines


def finish_md(finish_reason: str, stats: TurnStats | None) -> str:
    """``finish `length` · **context full (2,048)**``: how a reply finished, and for ``length`` which limit it
    ran into (``engine.stats.length_limit``), so a reply cut by the context does not look like one that
    reached max tokens."""
    reason, _, limit = finish_words(finish_reason, stats).partition(" · ")
    return f"finish `{views.esc(reason)}`" + (f" · **{views.esc(limit)}**" if limit else "")


STOPPED = "⏹ stopped"  # how the figures line begins for a reply stopped before its end (compare says the same)
STOPPED_BEFORE_REPLY = f"{STOPPED} before the model answered"


class Folds:
    """The figures line's two folds for one reply, each made once: the prompt as the engine got it and the request
    as sent do not change while the reply streams, and making them (the prompt token by token as HTML; the request
    as curl, Python and JSON) cost more than the rest of each streamed step's line. Keyed by the objects' identity:
    a reply's stats carry the same ones from its first output to its end."""

    def __init__(self) -> None:
        self._view: object = None
        self._view_md = ""
        self._request: object = None
        self._request_md = ""

    def fold_md(self, view: Any) -> str:
        if view is not self._view or view is None:
            self._view, self._view_md = view, prompt_view.fold_md(view)
        return self._view_md

    def request_md(self, request: Any) -> str:
        if request is not self._request or request is None:
            self._request, self._request_md = request, prompt_view.request_md(request)
        return self._request_md


def figures_md(reply: Reply, media: tuple[MediaItem, ...], *, budget_note: str = "",
               stopped: bool = False, folds: Folds | None = None) -> str:
    """The figures line under the chat: the engine's figures for ``reply``, its prompt tokens against the
    inspector's for ``media``, the reply's notices and ``budget_note``. ``stopped``: the line for the reply
    ending where it stands (Stop, a closed tab) — it begins ``⏹ stopped`` rather than ending ``streaming…``,
    unless the engine had in fact finished it (it gave a finish reason). ``folds``: the reply's folds, made once
    (:class:`Folds`; without it they are made here)."""
    s = reply.stats
    folds = folds or Folds()
    stopped = stopped and not reply.finish_reason
    parts = [STOPPED] if stopped else []
    parts.append(f"TTFT **{s.ttft_s:.2f} s**" if s.ttft_s is not None else "TTFT —")
    parts.append(f"**{s.tokens_per_s:.1f}** tok/s" if s.tokens_per_s else "tok/s —")
    parts.append(f"output **{_n(s.output_tokens)}** tok")
    if s.prompt is not None:
        p = s.prompt
        by = " · ".join(f"{k} {_n(v)}" for k, v in (("text", p.text), ("image", p.image), ("audio", p.audio),
                                                      ("video", p.video)) if v or k == "text")
        if not p.by_modality:
            by = "the server reports no split by modality"
        cached = f", {_n(p.cached)} cached" if p.cached else ""
        parts.append(f"prompt **{_n(p.total)}** ({by}{cached})")
    if not stopped:
        parts.append(finish_md(reply.finish_reason, s) if reply.finish_reason else
                     ("streaming…" if not reply.finished else "finish —"))
    if s.mtp:
        rate = s.mtp.get("draft_acceptance_rate")
        if rate is not None:
            parts.append(f"MTP acceptance **{100 * float(rate):.0f}%**")
    line = " · ".join(parts)
    if s.prompt is not None and s.prompt.by_modality and media:
        line += "  \n" + " · ".join(f"`{c}`" for c in token_comparison(s.prompt, media))
        line += "".join(f"  \n≠ {views.esc(cause)}" for cause in mismatch_causes(token_pairs(s.prompt, media)))
    line += prompt_view.flags_md(s.prompt_view)
    line += "".join(f"  \n⚠ {views.esc(text)}" for text in reply.notices)
    if budget_note:
        line += "  \n" + budget_note
    line += folds.fold_md(s.prompt_view)
    return line + (folds.request_md(s.request) if reply.finished or stopped else "")


def budget_note(studio: StudioState, sampling: SamplingSettings, media: tuple[MediaItem, ...]) -> str:
    """Say so when the engine's video reserve differs from the one the inspector planned with."""
    if not any(m.kind == "video" for m in media):
        return ""
    s = studio.settings
    engine_reserve = max(s.configured_reserve, int(sampling.max_tokens))
    if engine_reserve == s.effective_reserve:
        return ""
    return (f"⚠ the engine plans the video with reserve {_n(engine_reserve)} (max tokens "
            f"{_n(sampling.max_tokens)}), the inspector with {_n(s.effective_reserve)}: set the Budget tab's "
            "max new tokens to the sampling max tokens to see the same frames")


# ---------------------------------------------------------------- tools editor
def example_tools_json(choice: str | None) -> str:
    """The tools editor's text for one of ``EXAMPLE_CHOICES``."""
    names = EXAMPLE_CHOICES.get(choice or "", [])
    chosen = [t for t in EXAMPLE_TOOLS if t["function"]["name"] in names]
    return json.dumps(chosen, indent=2, ensure_ascii=False) if chosen else ""


def validate_tools_md(text: str | None) -> str:
    try:
        tools = parse_tools_json(text)
    except ToolSchemaError as exc:
        return f"⚠ **tools not usable:** {views.esc(exc)}"
    if not tools:
        return "No tools: the model answers in text."
    shown = TOOL_NAMES_SHOWN
    names = ", ".join(f"`{t['function']['name']}`" for t in tools[:shown])
    if len(tools) > shown:
        names += f" … and {len(tools) - shown:,} more"
    runnable = [t["function"]["name"] for t in tools if t["function"]["name"] in EXAMPLE_TOOL_NAMES]
    tail = f" · example executor for {', '.join(runnable)}" if runnable else ""
    return f"✓ {len(tools)} tool(s): {names}{tail}"


# ---------------------------------------------------------------- ratings
VERDICT_MARK = {"up": "👍", "down": "👎"}
REPLY_GIST_CHARS = 36  # how much of a reply its entry in the reply picker quotes


def _gist(message: dict[str, Any]) -> str:
    """A few words of an assistant message, for the reply picker."""
    text = " ".join(str(message.get("content") or "").split())
    if not text and message.get("tool_calls"):
        text = "🛠 " + ", ".join(str(c.get("function", {}).get("name", "")) for c in message["tool_calls"])
    return text if len(text) <= REPLY_GIST_CHARS else text[:REPLY_GIST_CHARS - 1] + "…"


def reply_number(reply: Any) -> int | None:
    """The reply picker's value as a reply number (an API call may send text or nothing)."""
    try:
        return int(reply)
    except (TypeError, ValueError):
        return None


def picked_reply(session: ChatSession, reply: int | None = None) -> int | None:
    """The reply the picker shows: ``reply`` when the conversation has it, else the latest (None: no reply)."""
    count = session.reply_count
    return reply if reply is not None and 0 <= reply < count else (count - 1 if count else None)


def note_of(session: ChatSession, reply: Any) -> str:
    """The note on reply ``reply`` (the picker's value), "" when it has none."""
    number = reply_number(reply)
    return next((r.note for r in session.ratings if r.reply == number), "")


def reply_choices(session: ChatSession) -> list[tuple[str, int]]:
    """The reply picker's entries (value: the 0-based reply number): ``reply 2 · 👍 ✎ · Paris is…``."""
    rated = {r.reply: r for r in session.ratings}
    replies = [m for m in session.messages if m.get("role") == "assistant"]
    choices = []
    for number, message in enumerate(replies):
        rating = rated.get(number)
        marks = ""
        if rating is not None:
            marks = " ".join(part for part in (VERDICT_MARK.get(rating.verdict or "", ""), "✎" if rating.note else "")
                             if part)
        choices.append((" · ".join(part for part in (f"reply {number + 1}", marks, _gist(message)) if part), number))
    return choices


def rating_md(session: ChatSession, reply: int | None) -> str:
    """What the rating controls say about reply ``reply``: its verdict, note and how it ended; then, for the
    page, ``picked_marker`` (shows nothing)."""
    if reply is None or not 0 <= int(reply) < session.reply_count:
        return "No reply to rate yet." if not session.reply_count else "Pick a reply to rate."
    number = int(reply)
    rating = next((r for r in session.ratings if r.reply == number), None)
    verdict = VERDICT_MARK.get(rating.verdict or "", "") if rating else ""
    parts = [f"**reply {number + 1}** of {session.reply_count}", verdict or "not rated"]
    if rating is not None and rating.note:
        parts.append(f"note: “{views.esc(rating.note)}”")
    if number < len(session.answers):
        answer = session.answers[number]
        finish = answer.finish_reason
        parts.append(finish_md(finish, answer.stats) if finish else "stopped before its end")
    return " · ".join(parts) + picked_marker(session, number)


NOT_A_REPLY = ("↩", "⚠")  # bubbles between replies: tool results, notices of refused turns and of errors


def reply_bubble(bubble: dict[str, Any]) -> bool:
    """A bubble a reply makes (``chat._Reply.display``): its notices, thinking, text, tool calls."""
    title = str((bubble.get("metadata") or {}).get("title", ""))
    return bubble.get("role") == "assistant" and not title.startswith(NOT_A_REPLY)


def reply_bubbles(session: ChatSession, reply: int) -> range:
    """Where reply ``reply`` is in ``session.display`` (the Chatbot's messages): the run of reply bubbles from its
    mark on (empty when the session has no mark for it)."""
    if not 0 <= reply < len(session.reply_marks):
        return range(0)
    start = end = session.reply_marks[reply][1]
    while end < len(session.display) and reply_bubble(session.display[end]):
        end += 1
    return range(start, end)


def regenerate_from_loses(session: ChatSession, reply: int) -> str:
    """What "↻ from this reply" on reply ``reply`` would drop that the researcher wrote (ratings and notes of it
    and the replies after it), as the question to confirm; "" when nothing rated would go."""
    lost = [r for r in session.ratings if r.reply >= reply and (r.verdict or r.note)]
    if not lost:
        return ""
    count = session.reply_count
    dropped = f"reply {reply + 1}" if reply + 1 == count else f"replies {reply + 1}–{count}"
    said = "; ".join(f"reply {r.reply + 1}: " + " ".join(
        part for part in (VERDICT_MARK.get(r.verdict or "", ""), f"note “{r.note}”" if r.note else "") if part)
        for r in lost)
    return (f"↻ from reply {reply + 1} generates it again: {dropped} go, with the rating{'s' if len(lost) > 1 else ''} "
            f"you gave ({said}). Generate again?")


def picked_marker(session: ChatSession, reply: int) -> str:
    """An empty, hidden element the page reads (``style.PAGE_JS``): the picked reply's verdict (👍/👎 show it
    pressed: ``d3-verdict-up``), its bubbles in the chat (``d3-first-4 d3-end-6``: marked, scrolled to when
    picked) and, as its title, what "↻ from this reply" asks to confirm. Classes and a title, because Gradio's
    Markdown keeps those and drops ``data-`` attributes."""
    rating = next((r for r in session.ratings if r.reply == reply), None)
    classes = ["d3-picked", f"d3-verdict-{(rating.verdict if rating else None) or 'none'}"]
    bubbles = reply_bubbles(session, reply)
    if bubbles:
        classes += [f"d3-first-{bubbles.start}", f"d3-end-{bubbles.stop}"]
    question = regenerate_from_loses(session, reply)
    title = f' title="{html.escape(question, quote=True)}"' if question else ""
    return f'<span class="{" ".join(classes)}" hidden{title}></span>'
