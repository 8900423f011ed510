"""Compare (issue 12 §1–2) on the page: one question and the upload panels' media under settings A and B, side by
side. Layout (:func:`render_compare`) apart from wiring (:func:`setup_compare_events`); the work is in
``dots3_demo.workbench.compare`` (no Gradio), what the columns show is drawn here from its plans and replies.

Each column shows its own plan, from the inspector under that side's video budget: the frames the model gets
(thumbnails with the timestamp vLLM puts before each), fps and patch cap, tokens by modality (the studio's summary
table, for that side); under it the answer as it streams and its figures line (``chat_views.figures_md``), then
👍/👎 and a note. A table above the columns sets the two plans' numbers against each other.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import gradio as gr

from dots3_demo.budget import VideoSettings
from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.records import CompareRound, CompareSide, PlanFigures, Side, TurnSetting
from dots3_demo.core.reply import Reply
from dots3_demo.core.settings import chat_settings_from_controls
from dots3_demo.core.state import MediaItem, StudioState
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.video import K_MODES, VideoReport
from dots3_demo.profiles import Profile
from dots3_demo.ui import chat_views, views
from dots3_demo.ui.figures import COLORS
from dots3_demo.ui.layout import ChatControls, Record
from dots3_demo.workbench import compare
from dots3_demo.workbench.compare import CompareSession, CompareView, ReadSetting, SidePlan

if TYPE_CHECKING:
    from gradio.components.chatbot import MessageDict

T = TypeVar("T")

THUMB_HEIGHT = 54  # px of a frame's thumbnail in a column's strip
THUMBS_SHOWN = 96  # a strip shows at most this many frames (and says how many more the model gets)
VERDICTS = [("👍", "up"), ("👎", "down")]
PREFERENCES = [("A better", "A"), ("B better", "B"), ("tie", "tie")]
PLACEHOLDER = ('<div class="d3-cmp-empty">Press <b>Preview plans</b> to see what side {side} gives the model '
               "(no engine needed), or <b>Run A and B</b> to have both answer.</div>")

CSS = """
/* ---- compare */
#compare-accordion .d3-cmp-head { display: flex; align-items: baseline; gap: 8px; flex-wrap: wrap; font-size: .8rem;
  color: var(--body-text-color-subdued); margin-bottom: 4px; }
.d3-cmp-side { display: inline-block; min-width: 1.6em; text-align: center; font-weight: 800; font-size: .95rem;
  border-radius: 6px; padding: 0 6px; color: #fff; background: #4f46e5; }
.d3-cmp-side.d3-cmp-b { background: #0891b2; }
.d3-cmp-stats { display: flex; flex-wrap: wrap; gap: 4px 6px; margin: 4px 0 6px; }
.d3-cmp-stats span { font-size: .78rem; padding: 1px 8px; border-radius: 999px; white-space: nowrap;
  border: 1px solid var(--border-color-primary); background: var(--background-fill-secondary);
  font-variant-numeric: tabular-nums; }
.d3-cmp-strip { display: flex; gap: 4px; overflow-x: auto; padding: 2px 0 6px; }
.d3-cmp-strip figure { margin: 0; flex: 0 0 auto; text-align: center; }
.d3-cmp-strip img { height: 54px; border-radius: 4px; display: block; border: 1px solid var(--border-color-primary); }
.d3-cmp-strip figcaption { font-size: .66rem; color: var(--body-text-color-subdued); font-variant-numeric: tabular-nums;
  line-height: 1.25; margin-top: 1px; }
.d3-cmp-more { align-self: center; font-size: .74rem; color: var(--body-text-color-subdued); padding: 0 6px; }
.d3-cmp-empty { font-size: .84rem; color: var(--body-text-color-subdued); padding: 6px 2px; }
.d3-cmp-plan .d3-summary { font-size: .8rem; }
.d3-cmp-plan .d3-table, .d3-cmp-plan .d3-table th, .d3-cmp-plan .d3-table td, #compare-diff .d3-table,
#compare-diff .d3-table th, #compare-diff .d3-table td { border-left: 0 !important; border-right: 0 !important;
  border-top: 0; background: transparent !important; }
.d3-cmp-plan .d3-table, #compare-diff .d3-table { border: 0 !important; margin: 0; }
.d3-cmp-plan .d3-table tr, #compare-diff .d3-table tr { border: 0 !important; background: transparent !important; }
#compare-diff .d3-table td, #compare-diff .d3-table th { padding: 2px 8px; font-size: .8rem; line-height: 1.2; }
#compare-diff .d3-table th { white-space: nowrap; }
#compare-diff tr.d3-cmp-delta td { color: var(--body-text-color-subdued);
  border-top: 1px solid var(--border-color-primary); }
#compare-diff small { font-size: .7rem; }
.d3-cmp-plan details { font-size: .8rem; margin-top: 4px; }
.d3-cmp-plan summary { cursor: pointer; color: var(--body-text-color-subdued); }
#compare-status p, #compare-rounds p { margin: 0; }
.d3-cmp-past { font-size: .8rem; color: var(--body-text-color-subdued); padding: 2px 0 4px; }
#compare-status, #compare-rounds { font-size: .84rem; }
#compare-rounds { color: var(--body-text-color-subdued); }
#compare-figures-a, #compare-figures-b { font-size: .76rem; color: var(--body-text-color-subdued);
  font-variant-numeric: tabular-nums; padding: 4px 8px; border-radius: 8px;
  background: var(--background-fill-secondary); border: 1px solid var(--border-color-primary); }
#compare-figures-a:not(:has(p)), #compare-figures-b:not(:has(p)) { display: none !important; }
#compare-figures-a p, #compare-figures-b p { margin: 1px 0; }
#compare-figures-a code, #compare-figures-b code { font-size: .72rem; }
.d3-cmp-col { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 8px !important; }
.d3-cmp-rate { align-items: center; }
"""


# ---------------------------------------------------------------- records
@dataclass(frozen=True)
class SettingControls(Record, Generic[T]):
    """One column's controls (or their values); field names = ``workbench.compare.read_setting``'s parameters."""

    seq: T
    reserve_auto: T
    reserve: T
    max_new_tokens: T
    audio_cap: T
    k_mode: T
    temperature: T
    top_p: T
    top_k: T
    seed: T
    repetition_penalty: T
    system_prompt: T


@dataclass(frozen=True)
class SideColumn:
    """What one side (A or B) shows and takes."""

    controls: SettingControls[Any]
    plan: gr.HTML
    answer: gr.Chatbot
    figures: gr.Markdown
    verdict: gr.Radio
    note: gr.Textbox


@dataclass(frozen=True)
class ComparePanel:
    """Every component of the compare section."""

    session: gr.State
    question: gr.Textbox
    preset: gr.Dropdown
    preview: gr.Button
    run: gr.Button
    stop: gr.Button
    status: gr.Markdown
    diff: gr.HTML
    a: SideColumn
    b: SideColumn
    preference: gr.Radio
    rounds: gr.Markdown
    picker: gr.Dropdown  # the round the columns show (every round of the session reads again; ratings apply to it)


@dataclass(frozen=True)
class CompareStream(Record, Generic[T]):
    """What a round's event updates, in its output order (components when wired, values when a step yields)."""

    session: T
    status: T
    rounds: T
    diff: T
    plan_a: T
    plan_b: T
    answer_a: T
    answer_b: T
    figures_a: T
    figures_b: T
    verdict_a: T
    verdict_b: T
    note_a: T
    note_b: T
    preference: T
    picker: T


@dataclass(frozen=True)
class RoundShown(Generic[T]):
    """What showing a kept round updates (a round picked again, or the last round of an imported session): the
    round's step outputs, its question and both columns' settings."""

    stream: CompareStream[T]
    question: T
    a: SettingControls[T]
    b: SettingControls[T]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return (*CompareStream.names(), "question", *(f"a_{n}" for n in SettingControls.names()),
                *(f"b_{n}" for n in SettingControls.names()))

    def components(self) -> list[T]:
        return [*self.stream.components(), self.question, *self.a.components(), *self.b.components()]


@dataclass(frozen=True)
class Locks(Record, Generic[T]):
    """What a running round locks: a preview or a rating written meanwhile would be overwritten by its next step."""

    run: T
    preview: T
    verdict_a: T
    verdict_b: T
    note_a: T
    note_b: T
    preference: T
    picker: T


def _stream(panel: ComparePanel) -> CompareStream[Any]:
    a, b = panel.a, panel.b
    return CompareStream(session=panel.session, status=panel.status, rounds=panel.rounds, diff=panel.diff,
                         plan_a=a.plan, plan_b=b.plan, answer_a=a.answer, answer_b=b.answer, figures_a=a.figures,
                         figures_b=b.figures, verdict_a=a.verdict, verdict_b=b.verdict, note_a=a.note, note_b=b.note,
                         preference=panel.preference, picker=panel.picker)


def round_outputs(panel: ComparePanel) -> RoundShown[Any]:
    """The components :func:`show_round`'s values go to."""
    return RoundShown(stream=_stream(panel), question=panel.question, a=panel.a.controls, b=panel.b.controls)


def _locks(panel: ComparePanel) -> Locks[Any]:
    return Locks(run=panel.run, preview=panel.preview, verdict_a=panel.a.verdict, verdict_b=panel.b.verdict,
                 note_a=panel.a.note, note_b=panel.b.note, preference=panel.preference, picker=panel.picker)


# ---------------------------------------------------------------- layout
def _render_controls(side: Side, values: SettingControls[Any]) -> SettingControls[Any]:
    key = side.lower()

    def eid(name: str) -> str:
        return f"compare-{key}-{name}"

    with gr.Row(equal_height=True):
        seq = gr.Number(values.seq, label="seq", precision=0, min_width=90, elem_id=eid("seq"))
        max_new = gr.Number(values.max_new_tokens, label="max new tokens", precision=0, min_width=90,
                            elem_id=eid("max-new"))
        reserve = gr.Number(values.reserve, label="output reserve", precision=0, min_width=90,
                            interactive=not values.reserve_auto, elem_id=eid("reserve"))
        reserve_auto = gr.Checkbox(values.reserve_auto, label="auto reserve (seq ÷ 4, at least max new)", min_width=90,
                                   elem_id=eid("reserve-auto"))
    with gr.Row(equal_height=True):
        audio_cap = gr.Number(values.audio_cap, label="audio cap", minimum=0, step=0.05, min_width=80,
                              elem_id=eid("audio-cap"))
        k_mode = gr.Dropdown(list(K_MODES), value=values.k_mode, label="k_mode", min_width=90, elem_id=eid("k-mode"))
        temperature = gr.Number(values.temperature, label="temperature", minimum=0, step=0.1, min_width=80,
                                elem_id=eid("temperature"))
        top_p = gr.Number(values.top_p, label="top-p", minimum=0, maximum=1, step=0.05, min_width=80,
                          elem_id=eid("top-p"))
    with gr.Accordion("More: top-k, seed, repetition penalty, system prompt", open=False,
                      elem_id=eid("more")):
        with gr.Row():
            top_k = gr.Number(values.top_k, label="top-k (-1 = off)", precision=0, min_width=80, elem_id=eid("top-k"))
            seed = gr.Number(values.seed, label="seed (-1 = random)", precision=0, min_width=80, elem_id=eid("seed"))
            repetition = gr.Number(values.repetition_penalty, label="repetition penalty", step=0.05, min_width=80,
                                   elem_id=eid("rep-penalty"))
        system = gr.Textbox(values.system_prompt, label="system prompt (empty: none)", lines=1, max_lines=4,
                            elem_id=eid("system"))
    return SettingControls(seq=seq, reserve_auto=reserve_auto, reserve=reserve, max_new_tokens=max_new,
                           audio_cap=audio_cap, k_mode=k_mode, temperature=temperature, top_p=top_p, top_k=top_k,
                           seed=seed, repetition_penalty=repetition, system_prompt=system)


def _render_side(side: Side, values: SettingControls[Any]) -> SideColumn:
    key = side.lower()
    with gr.Column(min_width=420, elem_classes=["d3-cmp-col"], elem_id=f"compare-col-{key}"):
        with gr.Accordion(f"Setting {side}", open=True, elem_id=f"compare-{key}-setting"):
            controls = _render_controls(side, values)
        plan = gr.HTML(PLACEHOLDER.format(side=side), elem_id=f"compare-plan-{key}", elem_classes=["d3-cmp-plan"])
        answer = gr.Chatbot([], show_label=False, height=260, buttons=["copy"], elem_id=f"compare-answer-{key}",
                            placeholder=f"{side}'s answer streams here (Run A and B).")
        figures = gr.Markdown("", elem_id=f"compare-figures-{key}")
        with gr.Row(equal_height=True, elem_classes=["d3-cmp-rate"]):
            verdict = gr.Radio(VERDICTS, value=None, label=f"{side}: verdict", min_width=120, scale=1,
                               elem_id=f"compare-verdict-{key}")
            note = gr.Textbox(label=f"note on {side}", lines=1, scale=3, placeholder="what is right or wrong in it",
                              elem_id=f"compare-note-{key}")
    return SideColumn(controls=controls, plan=plan, answer=answer, figures=figures, verdict=verdict, note=note)


def initial_values(seq: int, max_tokens: int) -> SettingControls[Any]:
    """A column's first values: the studio's defaults (the Budget tab's seq, the chat's max tokens)."""
    reserve = auto_reserve(seq, max_tokens)
    return SettingControls(seq=int(seq), reserve_auto=True, reserve=reserve, max_new_tokens=int(max_tokens),
                           audio_cap=1.0, k_mode=K_MODES[0], temperature=0.7, top_p=0.95, top_k=-1, seed=-1,
                           repetition_penalty=1.0, system_prompt=DEFAULT_SYSTEM_PROMPT)


def render_compare(engine: ChatEngine | None, *, seq: int, max_tokens: int) -> ComparePanel:
    """The compare section's body (call it inside the accordion or tab that holds it)."""
    session = gr.State(compare.new_compare_session)
    with gr.Row(equal_height=True):
        question = gr.Textbox(label="Question (the upload panels' media are attached)", lines=1, scale=5,
                              placeholder="What happens in this clip?", elem_id="compare-question")
        preset = gr.Dropdown([(p.label, p.key) for p in compare.PRESETS], value=None, label="Preset (fills A and B)",
                             scale=3, min_width=220, elem_id="compare-preset")
        preview = gr.Button("Preview plans", scale=1, min_width=140, elem_id="compare-preview")
        run = gr.Button("Run A and B", variant="primary", scale=1, min_width=140, interactive=engine is not None,
                        elem_id="compare-run")
        stop = gr.Button("Stop", variant="stop", scale=1, min_width=70, interactive=engine is not None,
                         elem_id="compare-stop")
    status = gr.Markdown("Both columns plan the media in the upload panels; the table sets their numbers side by "
                         "side." + ("" if engine is not None else " No engine: Preview plans works, Run needs one."),
                         elem_id="compare-status")
    diff = gr.HTML("", elem_id="compare-diff")
    values = initial_values(seq, max_tokens)
    with gr.Row(equal_height=False):
        a = _render_side("A", values)
        b = _render_side("B", values)
    with gr.Row(equal_height=True):
        preference = gr.Radio(PREFERENCES, value=None, label="This round: which is better?", scale=2,
                              elem_id="compare-preference")
        picker = gr.Dropdown([], value=None, label="Round shown (pick one to read it again)", scale=2, min_width=260,
                             interactive=True, elem_id="compare-round-pick")
        rounds = gr.Markdown(rounds_md(None), elem_id="compare-rounds")
    return ComparePanel(session=session, question=question, preset=preset, preview=preview, run=run, stop=stop,
                        status=status, diff=diff, a=a, b=b, preference=preference, rounds=rounds, picker=picker)


# ---------------------------------------------------------------- what the columns show
def _thumb(report: VideoReport, index: int) -> str:
    """One frame, as vLLM produced it, as a small JPEG ``data:`` URL."""
    image = report.frames[index].image.convert("RGB")
    width = max(1, round(image.width * THUMB_HEIGHT * 2 / image.height))
    small = image.resize((width, THUMB_HEIGHT * 2))  # twice the shown height: sharp on a HiDPI screen
    buffer = io.BytesIO()
    small.save(buffer, "JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def frame_strip_html(report: VideoReport, profile: Profile) -> str:
    """The frames the model gets, in order, each with the timestamp vLLM puts before it and its tokens."""
    ai = views.approx(profile, "image")
    figures = [f'<figure><img src="{_thumb(report, f.index)}" alt="frame {f.index + 1}">'
               f"<figcaption>{views.esc(f.timestamp.removeprefix('00:'))}<br>{ai}{f.tokens} tok</figcaption></figure>"
               for f in report.frames[:THUMBS_SHOWN]]
    more = len(report.frames) - THUMBS_SHOWN
    tail = f'<span class="d3-cmp-more">… and {more} more</span>' if more > 0 else ""
    return f'<div class="d3-cmp-strip">{"".join(figures)}{tail}</div>'


def setting_line(setting: TurnSetting) -> str:
    """``seq 4,096 · reserve 1,024 · max new 256 · audio cap 1 · eval_ek · T 0.7`` (escaped)."""
    v, s = setting.video, setting.sampling
    reserve = f"reserve {v.effective_reserve:,}" + (" (auto)" if v.output_reserve is None else "")
    parts = [f"seq {v.seq:,}", reserve, f"max new {v.max_new_tokens:,}", f"audio cap {v.audio_cap:g}", v.k_mode,
             f"T {s.temperature:g}", f"top-p {s.top_p:g}"]
    if s.top_k > 0:
        parts.append(f"top-k {s.top_k}")
    if s.seed is not None:
        parts.append(f"seed {s.seed}")
    return views.esc(" · ".join(parts))


def plan_html(plan: SidePlan, profile: Profile) -> str:
    """A column's plan: the side's setting, fps and patch cap, the frame strip, tokens by modality."""
    key = "d3-cmp-b" if plan.side == "B" else ""
    head = (f'<div class="d3-cmp-head"><span class="d3-cmp-side {key}">{plan.side}</span>'
            f"<span>{setting_line(plan.setting)}</span></div>")
    if plan.error or plan.studio is None:
        return head + f'<div class="d3-incomplete" role="alert">⚠ {views.esc(plan.error)}</div>'
    state = plan.studio
    video = state.video
    stats = ""
    strip = ""
    if video is not None:
        s = video.solver
        first = video.frames[0]
        chips = [f"<b>{len(video.frames)}</b> frames", f"<b>{s.effective_fps:.2f}</b> fps",
                 f"patch cap <b>{s.patch_cap}</b>", f"<b>{first.decoded_size[0]}×{first.decoded_size[1]}</b> px",
                 f"scale {s.chosen_scale:.2f}"]
        stats = f'<div class="d3-cmp-stats">{"".join(f"<span>{c}</span>" for c in chips)}</div>'
        strip = frame_strip_html(video, profile)
        if video.notes:
            strip += "".join(f'<div class="d3-note">{views.esc(n)}</div>' for n in video.notes)
    tokens = tokens_html(plan.figures, profile)
    table = f"<details><summary>the budget table</summary>{views.summary_html(state, profile)}</details>"
    return head + stats + strip + tokens + table


def tokens_html(figures: PlanFigures | None, profile: Profile) -> str:
    """Tokens by modality (the studio's totals for a side's plan) and whether the sound track is in the prompt."""
    if figures is None:
        return ""
    at, ai = views.approx(profile, "text"), views.approx(profile, "image")
    mark = at or ai
    dot = '<i class="d3-dot" style="background:{}"></i>'
    chips = [f"{dot.format(COLORS['image'])}image <b>{ai}{figures.image:,}</b>",
             f"{dot.format(COLORS['audio'])}audio <b>{figures.audio:,}</b>",
             f"{dot.format(COLORS['text'])}text <b>{at}{figures.text:,}</b>",
             f"media <b>{mark}{figures.media:,}</b> of {figures.seq - figures.reserve:,}",
             f"{dot.format(COLORS['free'])}free <b>{mark}{figures.free:,}</b>"]
    line = f'<div class="d3-cmp-stats">{"".join(f"<span>{c}</span>" for c in chips)}</div>'
    if figures.sound:
        cls = "d3-ok" if figures.sound_kept else "d3-warnline"
        label = "Sound track" if figures.sound.startswith(("kept", "dropped")) else (
            "Sound track kept:" if figures.sound_kept else "Sound track not in the prompt:")
        line += f'<div class="d3-audio-reason {cls}"><b>{label}</b> {views.esc(figures.sound)}</div>'
    return line


def _delta(a: float, b: float, *, digits: int = 0) -> str:
    """``−1,072`` and ``−45%`` (B against A)."""
    diff = b - a
    if round(diff, digits) == 0:
        return "="
    text = f"{diff:+,.{digits}f}".replace("-", "−")
    if a:
        text += f"<br><small>{100 * diff / a:+.0f}%</small>".replace("-", "−")
    return text


def diff_html(plans: tuple[SidePlan, SidePlan] | None) -> str:
    """The two plans' numbers side by side (both from the inspector): a row for A, one for B, one for B − A."""
    if plans is None:
        return ""
    return figures_diff_html(plans[0].figures, plans[1].figures)


def figures_diff_html(fa: PlanFigures | None, fb: PlanFigures | None) -> str:
    """:func:`diff_html` from the plans' numbers (a kept round's plans)."""
    if fa is None or fb is None:
        return ""
    size = (f"{fa.frame_size[0]}×{fa.frame_size[1]}", f"{fb.frame_size[0]}×{fb.frame_size[1]}")
    columns: list[tuple[str, str, str, str]] = []
    if fa.frames or fb.frames:
        columns += [
            ("frames", f"{fa.frames:,}", f"{fb.frames:,}", _delta(fa.frames, fb.frames)),
            ("fps", f"{fa.fps:.2f}", f"{fb.fps:.2f}", _delta(fa.fps, fb.fps, digits=2)),
            ("patch cap", f"{fa.patch_cap:,}", f"{fb.patch_cap:,}", _delta(fa.patch_cap, fb.patch_cap)),
            ("frame px", *size, "=" if size[0] == size[1] else "≠"),
        ]
    columns += [
        ("image tok", f"{fa.image:,}", f"{fb.image:,}", _delta(fa.image, fb.image)),
        ("audio tok", f"{fa.audio:,}", f"{fb.audio:,}", _delta(fa.audio, fb.audio)),
        ("text tok", f"{fa.text:,}", f"{fb.text:,}", _delta(fa.text, fb.text)),
        ("media tok", f"<b>{fa.media:,}</b>", f"<b>{fb.media:,}</b>", _delta(fa.media, fb.media)),
        ("reserve", f"{fa.reserve:,}", f"{fb.reserve:,}", _delta(fa.reserve, fb.reserve)),
        ("seq", f"{fa.seq:,}", f"{fb.seq:,}", _delta(fa.seq, fb.seq)),
        ("free", f"{fa.free:,}", f"{fb.free:,}", _delta(fa.free, fb.free)),
    ]
    if fa.sound or fb.sound:
        columns.append(("sound track", "kept" if fa.sound_kept else "dropped", "kept" if fb.sound_kept else "dropped",
                        "=" if fa.sound_kept == fb.sound_kept else "≠"))
    head = "".join(f'<th class="d3-num">{views.esc(label)}</th>' for label, *_ in columns)
    rows = "".join(
        f'<tr class="{cls}"><td>{side}</td>' + "".join(f'<td class="d3-num">{c[i]}</td>' for c in columns) + "</tr>"
        for i, side, cls in ((1, '<span class="d3-cmp-side">A</span>', ""),
                             (2, '<span class="d3-cmp-side d3-cmp-b">B</span>', ""), (3, "B − A", "d3-cmp-delta")))
    return (f'<table class="d3-table"><thead><tr><th>plan (inspector)</th>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def answer_messages(reply: Reply) -> list[MessageDict]:
    """A column's answer as chat bubbles (the chat's, ``chat_views.answer_bubbles``), and why it ended early."""
    a = reply.answer
    shown = [cast("MessageDict", bubble) for bubble in chat_views.answer_bubbles(reply)]
    if a.error:
        title = "⚠ Not sent to the model" if reply.state == "refused" else "⚠ No answer"
        shown.append({"role": "assistant", "content": a.error, "metadata": {"title": title, "status": "done"}})
    elif reply.state == "stopped":
        shown.append({"role": "assistant", "content": "Stopped: what arrived before Stop is kept in the round.",
                      "metadata": {"title": "⏹ Stopped", "status": "done"}})
    return shown


def figures_line(reply: Reply, media: tuple[MediaItem, ...] = ()) -> str:
    """The side's per-reply figures (the chat's figures line), its prompt tokens against its own plan's ``media``
    (the panels' media with the side's inspector numbers)."""
    if reply.state in ("planned", "refused", "waiting") or reply.answer.stats is None:
        return ""
    return chat_views.figures_md(reply, media, stopped=reply.state == "stopped")


def rounds_md(session: CompareSession | None) -> str:
    rounds = session.rounds if session is not None else ()
    if not rounds:
        return "No rounds yet: ratings are kept with each round in the session."
    judged = sum(1 for r in rounds if compare.judged(r))
    return f"{len(rounds)} round(s) in this session · {judged} rated · ratings apply to the round shown"


PREFERENCE_SHOWN = {"A": "A better", "B": "B better", "tie": "tie"}


def round_label(index: int, round_: CompareRound) -> str:
    """``round 2 · What is in the room? · A better`` (the picker's line for a round; a round of plans only says
    ``preview``)."""
    question = round_.question if len(round_.question) <= 48 else round_.question[:47] + "…"
    judgement = PREFERENCE_SHOWN.get(round_.preference or "", "not judged")
    kind = "preview · " if compare.is_preview(round_) else ""
    return f"round {index + 1} · {question or '(media only)'} · {kind}{judgement}"


def picker_update(session: CompareSession, shown: int | None = None) -> Any:
    """The picker listing every round, showing ``shown`` (None: the last)."""
    rounds = session.rounds
    value = (len(rounds) - 1 if shown is None else shown) if rounds else None
    return gr.Dropdown(choices=[(round_label(i, r), i) for i, r in enumerate(rounds)], value=value)


def _picked(session: CompareSession, picked: Any) -> int | None:
    """The round index the picker holds (None: none, or one the session does not have)."""
    try:
        index = int(picked)
    except (TypeError, ValueError):
        return None
    return index if 0 <= index < len(session.rounds) else None


def recorded_plan_html(side: CompareSide, profile: Profile) -> str:
    """A kept round's column plan: the side's setting, its frames' numbers and tokens by modality, from the plan
    the round kept (the frame thumbnails are shown while a round is the one just planned)."""
    key = "d3-cmp-b" if side.side == "B" else ""
    head = (f'<div class="d3-cmp-head"><span class="d3-cmp-side {key}">{side.side}</span>'
            f"<span>{setting_line(side.setting)}</span></div>")
    if side.plan_error:
        return head + f'<div class="d3-incomplete" role="alert">⚠ {views.esc(side.plan_error)}</div>'
    f = side.plan
    if f is None:
        return head + '<div class="d3-cmp-empty">This round\'s plan was not kept (a session file of format 1).</div>'
    stats = ""
    if f.frames:
        chips = [f"<b>{f.frames}</b> frames", f"<b>{f.fps:.2f}</b> fps", f"patch cap <b>{f.patch_cap}</b>",
                 f"<b>{f.frame_size[0]}×{f.frame_size[1]}</b> px", f"scale {f.chosen_scale:.2f}"]
        stats = f'<div class="d3-cmp-stats">{"".join(f"<span>{c}</span>" for c in chips)}</div>'
    return head + stats + tokens_html(f, profile)


def show_round(profile: Profile, session: CompareSession, index: int | None = None) -> RoundShown[Any]:
    """Round ``index`` of the session (None: the last) in the columns, read again: its question, both settings
    (in the controls: Run starts a new round with them), both plans, answers, figures, ratings and verdict. No
    round: nothing changes."""
    skip = gr.skip()
    at = len(session.rounds) - 1 if index is None else index
    if not 0 <= at < len(session.rounds):
        names = SettingControls.names()
        kept = {n: skip for n in CompareStream.names()} | {"session": session, "rounds": rounds_md(session),
                                                           "picker": picker_update(session)}
        return RoundShown(stream=CompareStream(**kept), question=skip, a=SettingControls(*(skip for _ in names)),
                          b=SettingControls(*(skip for _ in names)))
    r = session.rounds[at]
    ra, rb = compare.recorded_reply(r.a), compare.recorded_reply(r.b)
    last = at == len(session.rounds) - 1
    status = (f"Round {at + 1} of {len(session.rounds)}, read again"
              + ("" if last else " (not the latest)") + ": its settings are in the columns (Run starts a new round "
              "with them); ratings apply to it.")
    stream = CompareStream(
        session=session, status=status, rounds=rounds_md(session), diff=figures_diff_html(r.a.plan, r.b.plan),
        plan_a=recorded_plan_html(r.a, profile), plan_b=recorded_plan_html(r.b, profile),
        answer_a=answer_messages(ra), answer_b=answer_messages(rb), figures_a=figures_line(ra, r.a.plan_media),
        figures_b=figures_line(rb, r.b.plan_media), verdict_a=r.a.verdict, verdict_b=r.b.verdict, note_a=r.a.note,
        note_b=r.b.note, preference=r.preference, picker=picker_update(session, at))
    return RoundShown(stream=stream, question=r.question, a=controls_of(r.a.setting), b=controls_of(r.b.setting))


# ---------------------------------------------------------------- callbacks
def _split(values: Sequence[Any]) -> tuple[ReadSetting, ReadSetting]:
    """The A then B controls' values an event passed, read as two settings."""
    n = len(SettingControls.names())
    if len(values) != 2 * n:
        raise TypeError(f"compare takes {2 * n} control values, got {len(values)}")
    return (compare.read_setting(**SettingControls.named(values[:n])),
            compare.read_setting(**SettingControls.named(values[n:])))


def _preset_key(key: str | None) -> str:
    return key if key in {p.key for p in compare.PRESETS} else ""


async def _view_values(view: CompareView, profile: Profile, *, first: bool) -> tuple[Any, ...]:
    """One step of a round as the event's outputs (``CompareStream`` order); plans only when they changed."""
    plans = view.plans
    skip = gr.skip()
    if view.new_plans and plans is not None:
        plan_a, plan_b = await _plans_html(plans, profile)
        diff = diff_html(plans)
    elif first:
        waiting = '<div class="d3-cmp-empty">⏳ planning…</div>'
        plan_a = plan_b = waiting if not view.done else skip
        diff = "" if not view.done else skip
    else:
        plan_a = plan_b = diff = skip
    ra, rb = view.replies
    fresh = view.new_plans  # a new round: its ratings start empty
    step = CompareStream(
        session=view.session, status=view.status, rounds=rounds_md(view.session), diff=diff, plan_a=plan_a,
        plan_b=plan_b, answer_a=answer_messages(ra), answer_b=answer_messages(rb),
        figures_a=figures_line(ra, plans[0].media if plans else ()),
        figures_b=figures_line(rb, plans[1].media if plans else ()),
        verdict_a=None if fresh else skip, verdict_b=None if fresh else skip, note_a="" if fresh else skip,
        note_b="" if fresh else skip, preference=None if fresh else skip,
        picker=picker_update(view.session) if fresh or view.done else skip)
    return tuple(step.components())


async def _plans_html(plans: tuple[SidePlan, SidePlan], profile: Profile) -> tuple[str, str]:
    # the thumbnails are encoded in worker threads, off the server's event loop
    a, b = await asyncio.gather(asyncio.to_thread(plan_html, plans[0], profile),
                                asyncio.to_thread(plan_html, plans[1], profile))
    return a, b


async def on_preview(profile: Profile, limits: UploadLimits, studio: StudioState, session: CompareSession,
                     question: str | None, preset_key: str | None, *values: Any) -> tuple[Any, ...]:
    a, b = _split(values)
    view = await compare.preview_round(profile, studio, session, question, a, b, preset_key=_preset_key(preset_key),
                                       limits=limits)
    return await _view_values(view, profile, first=True)


async def on_run(engine: ChatEngine | None, profile: Profile, limits: UploadLimits, pacer: StreamPacer,
                 studio: StudioState, session: CompareSession, question: str | None, preset_key: str | None,
                 *values: Any) -> AsyncGenerator[tuple[Any, ...], None]:
    a, b = _split(values)
    steps = compare.run_round(engine, profile, studio, session, question, a, b, preset_key=_preset_key(preset_key),
                              limits=limits, pacer=pacer)
    first = True
    async with contextlib.aclosing(steps) as views_:
        async for view in views_:
            yield await _view_values(view, profile, first=first)
            first = False


def on_settle(engine: ChatEngine | None, session: CompareSession) -> tuple[Any, ...]:
    """After a round's event ended or was stopped: a stopped side says so, and the controls it locked are free."""
    unlocked = Locks(run=gr.Button(interactive=engine is not None), preview=gr.Button(interactive=True),
                     verdict_a=gr.Radio(interactive=True), verdict_b=gr.Radio(interactive=True),
                     note_a=gr.Textbox(interactive=True), note_b=gr.Textbox(interactive=True),
                     preference=gr.Radio(interactive=True), picker=gr.Dropdown(interactive=True))
    skip = gr.skip()
    replies = compare.settled(session)
    stopped = [r.state == "stopped" for r in replies]
    last = session.last
    if last is None or compare.is_preview(last) or not any(stopped):
        return (*(skip for _ in CompareStream.names()), *unlocked.components())
    step = CompareStream(
        session=session, status="⏹ Stopped: both requests were aborted; what arrived is kept in the round.",
        rounds=rounds_md(session), diff=skip, plan_a=skip, plan_b=skip,
        answer_a=answer_messages(replies[0]) if stopped[0] else skip,
        answer_b=answer_messages(replies[1]) if stopped[1] else skip,
        figures_a=figures_line(replies[0], last.a.plan_media) if stopped[0] else skip,
        figures_b=figures_line(replies[1], last.b.plan_media) if stopped[1] else skip,
        verdict_a=skip, verdict_b=skip, note_a=skip, note_b=skip, preference=skip, picker=picker_update(session))
    return (*step.components(), *unlocked.components())


def lock_round() -> tuple[Any, ...]:
    """Before a round runs: no second round and no rating until it ends (its steps write the session)."""
    locked = Locks(run=gr.Button(interactive=False), preview=gr.Button(interactive=False),
                   verdict_a=gr.Radio(interactive=False), verdict_b=gr.Radio(interactive=False),
                   note_a=gr.Textbox(interactive=False), note_b=gr.Textbox(interactive=False),
                   preference=gr.Radio(interactive=False), picker=gr.Dropdown(interactive=False))
    return tuple(locked.components())


def on_preset(studio: StudioState, preset_key: str | None, *chat_values: Any) -> tuple[Any, ...]:
    """A preset fills A and B from the studio's settings (the Budget tab, the chat's sampling and system prompt);
    outputs: the status line, then A's and B's controls."""
    names = SettingControls.names()
    skip = (gr.skip(),) * (2 * len(names))
    if not _preset_key(preset_key):
        return ("", *skip)
    chosen = compare.preset(str(preset_key))
    chat_settings = chat_settings_from_controls(**ChatControls.named(chat_values))
    if chat_settings.problem:
        return (f"⚠ {views.esc(chat_settings.problem)}", *skip)
    a, b = chosen.make(compare.base_setting(studio, chat_settings.sampling, chat_settings.system_prompt))
    return (f"Preset **{views.esc(chosen.label)}**: A and B filled from the studio's settings; edit either side.",
            *controls_of(a).components(), *controls_of(b).components())


def controls_of(setting: TurnSetting) -> SettingControls[Any]:
    """A setting as its column's control values (the inverse of ``read_setting``)."""
    v, s = setting.video, setting.sampling
    auto = v.output_reserve is None
    return SettingControls(seq=v.seq, reserve_auto=auto, reserve=v.effective_reserve if auto else v.configured_reserve,
                           max_new_tokens=s.max_tokens, audio_cap=v.audio_cap, k_mode=v.k_mode,
                           temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                           seed=-1 if s.seed is None else s.seed, repetition_penalty=s.repetition_penalty,
                           system_prompt=setting.system_prompt or "")


def auto_reserve(seq: float | str | None, max_new_tokens: float | str | None) -> int:
    """The output reserve the plan uses when auto reserve is on: vLLM's default (seq ÷ 4), at least max new
    tokens — ``VideoSettings.effective_reserve``, the number the plan is made with."""
    return VideoSettings(seq=int(float(seq or 0)), max_new_tokens=max(0, int(float(max_new_tokens or 0)))
                         ).effective_reserve


def on_reserve(seq: float | None, reserve_auto: bool, reserve: float | None,
               max_new_tokens: float | None = None) -> gr.Number:
    """The reserve box shows the reserve the plan uses while auto reserve is on (:func:`auto_reserve`: it follows
    seq and max new tokens) and takes a value when off."""
    if not reserve_auto:
        return gr.Number(interactive=True)
    try:
        auto = auto_reserve(seq, max_new_tokens)
    except (TypeError, ValueError, OverflowError):
        return gr.Number(interactive=False)
    return gr.Number(value=auto, interactive=False)


def _verdict(value: str | None) -> Any:
    return "up" if value == "up" else "down" if value == "down" else None


def on_rate(side: Side, session: CompareSession, picked: Any, verdict: str | None, note: str | None
            ) -> tuple[Any, ...]:
    """👍/👎 or a note changed, for the round shown (the picker's): (session, status, rounds line, picker)."""
    at = _picked(session, picked)
    if session.rounds and at is None:
        return session, "Pick the round to rate.", gr.skip(), gr.skip()
    updated, message = compare.rate_side(session, side, _verdict(verdict), note, at=at)
    return updated, (message or gr.skip()), rounds_md(updated), picker_update(updated, at) if at is not None \
        else gr.skip()


def on_prefer(session: CompareSession, picked: Any, preference: str | None) -> tuple[Any, ...]:
    at = _picked(session, picked)
    if session.rounds and at is None:
        return session, "Pick the round to judge.", gr.skip(), gr.skip()
    updated, message = compare.prefer(session, "A" if preference == "A" else "B" if preference == "B"
                                      else "tie" if preference == "tie" else None, at=at)
    return updated, (message or gr.skip()), rounds_md(updated), picker_update(updated, at) if at is not None \
        else gr.skip()


def on_pick(profile: Profile, session: CompareSession, picked: Any) -> tuple[Any, ...]:
    """A round picked: it fills the columns again (:func:`show_round`)."""
    at = _picked(session, picked)
    return tuple(show_round(profile, session, at if at is not None else -1).components())


# ---------------------------------------------------------------- wiring
def setup_compare_events(panel: ComparePanel, *, studio: gr.State, chat_controls: ChatControls, profile: Profile,
                         engine: ChatEngine | None, limits: UploadLimits, pacer: StreamPacer,
                         concurrency: int | None, inspect_workers: int) -> None:
    """Wire the compare section: presets, Preview, Run and Stop, the ratings.

    A round runs at most ``concurrency`` at a time with the chat's replies (``concurrency_id="chat"``); a preview
    inspects with the uploads' workers (``concurrency_id="inspect"``). While a round runs, Run, Preview and the
    ratings are locked (its steps write the session), and unlocked when it ends or is stopped.
    """
    a_controls, b_controls = panel.a.controls.components(), panel.b.controls.components()
    for controls in (panel.a.controls, panel.b.controls):
        gr.on([controls.seq.change, controls.reserve_auto.change, controls.max_new_tokens.change], on_reserve,
              [controls.seq, controls.reserve_auto, controls.reserve, controls.max_new_tokens], controls.reserve,
              api_visibility="private", queue=False, show_progress="hidden")
    panel.preset.input(on_preset, [studio, panel.preset, *chat_controls.components()],
                       [panel.status, *a_controls, *b_controls], api_visibility="private", queue=False)
    outputs = _stream(panel).components()
    inputs = [studio, panel.session, panel.question, panel.preset]
    panel.preview.click(partial(on_preview, profile, limits), [*inputs, *a_controls, *b_controls], outputs,
                        api_name="compare_preview", concurrency_limit=inspect_workers, concurrency_id="inspect",
                        show_progress="minimal")
    locks = _locks(panel).components()
    run = panel.run.click(lock_round, None, locks, queue=False, api_visibility="private", show_progress="hidden")
    event = run.then(partial(on_run, engine, profile, limits, pacer),
                     [*inputs, *a_controls, *b_controls], outputs, api_name="compare_run",
                     concurrency_limit=concurrency, concurrency_id="chat", show_progress="minimal")
    event.then(partial(on_settle, engine), panel.session, [*outputs, *locks], queue=False, api_visibility="private",
               show_progress="hidden")
    panel.stop.click(None, None, None, cancels=[event], api_visibility="private")
    rated = [panel.session, panel.status, panel.rounds, panel.picker]
    columns: tuple[tuple[Side, SideColumn], ...] = (("A", panel.a), ("B", panel.b))
    for side, column in columns:
        rate_in = [panel.session, panel.picker, column.verdict, column.note]
        column.verdict.input(partial(on_rate, side), rate_in, rated, api_visibility="private", queue=False)
        gr.on([column.note.blur, column.note.submit], partial(on_rate, side), rate_in, rated,
              api_visibility="private", queue=False)
    panel.preference.input(on_prefer, [panel.session, panel.picker, panel.preference], rated,
                           api_visibility="private", queue=False)
    panel.picker.input(partial(on_pick, profile), [panel.session, panel.picker],
                       list(round_outputs(panel).components()), api_name="compare_show_round", queue=False,
                       show_progress="hidden")
