"""Compare (issue 12 §1–2): one question and the upload panels' media, planned and answered under two settings,
A and B, side by side, and what the researcher judged of it. Plain functions and frozen dataclasses, no Gradio:
``ui.compare`` lays the page out and wires it, tests call these directly.

* a setting (:class:`~dots3_demo.core.records.TurnSetting`) is read from a column's controls by
  :func:`read_setting`; :data:`PRESETS` fill both columns from the studio's own settings;
* :func:`plan_side` plans the panels' media under one setting with the studio's inspector (``inspect_file``, the
  call the video panel makes), so each column's frames, fps, patch cap and tokens are the inspector's own;
* :func:`preview_round` is a round of plans only (no engine needed); :func:`run_round` also streams both answers at
  once, two engine requests merged into one stream (:func:`merge_streams`). Closing it (Stop, a closed tab) closes
  both requests, so the engine aborts both; a side that cannot run (bad settings, the engine refused it) says why
  in its own column and the other side goes on;
* a browser session's rounds are a :class:`CompareSession`; :func:`rate_side` and :func:`prefer` record the
  judgements (👍/👎 and a note per side, A better / B better / tie per round) in a round (the last unless told
  which: the page rates the round it shows). Each round keeps both sides' settings, plans (their numbers and the
  media with each side's inspector numbers) and answers (each with the setting it ran with), so it reads again
  later, in the session and from a session file.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from dots3_demo.core.counts import totals
from dots3_demo.core.pacing import StreamPacer
from dots3_demo.core.records import (
    Answer,
    CompareRound,
    CompareSide,
    PlanFigures,
    Preference,
    Side,
    TurnSetting,
    Verdict,
)
from dots3_demo.core.reply import Reply, ReplyState
from dots3_demo.core.settings import chat_settings_from_controls, control_number, video_settings_from_controls
from dots3_demo.core.state import MediaItem, StudioState
from dots3_demo.core.turns import (
    DEFAULT_SYSTEM_PROMPT,
    build_turn,
    engine_start,
    panel_media,
    user_message,
)
from dots3_demo.engine.media import check_media_limits
from dots3_demo.engine.protocol import (
    ChatEngine,
    EngineUnavailable,
    RequestRefused,
    SamplingSettings,
    TurnDelta,
    TurnRejected,
    TurnRequest,
)
from dots3_demo.inspection import InspectionError, inspect_file
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.profiles import Profile

logger = logging.getLogger(__name__)

SIDES: tuple[Side, Side] = ("A", "B")
T = TypeVar("T")


# ---------------------------------------------------------------- settings
@dataclass(frozen=True)
class ReadSetting:
    """A column's controls read as a setting; ``problem`` (one line) when a control held no usable value."""

    setting: TurnSetting
    problem: str = ""


def read_setting(seq: float, reserve_auto: bool, reserve: float, max_new_tokens: float | str | None,
                 audio_cap: float, k_mode: str | None, temperature: float, top_p: float, top_k: float | str | None,
                 seed: float | str | None, repetition_penalty: float, system_prompt: str | None) -> ReadSetting:
    """One column's controls (``ui.compare.SettingControls``, by these names) as a setting. Never raises: a
    control that holds no usable number (emptied, or ``null`` from an API call) is named in ``problem``.

    ``max_new_tokens`` is both the video budget's max new tokens and the sampling's max tokens: the engine plans
    the video with the request's max tokens (``TurnRequest.mm_processor_kwargs``), so the plan shown is the one
    the engine makes. ``system_prompt`` is sent as it is ("" = none).
    """
    problems: list[str] = []
    max_new = max(1, int(control_number(max_new_tokens, "max new tokens", 1024, problems)))
    video = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                            max_new_tokens=max_new, audio_cap=audio_cap, k_mode=k_mode or "")
    if video.problem:
        problems.append(video.problem.removeprefix("Budget controls not usable: "))
    sampled = chat_settings_from_controls(system_prompt, "", temperature, top_p, top_k, max_new, seed,
                                          repetition_penalty)
    if sampled.problem:
        problems.append(sampled.problem.removeprefix("Check the Sampling panel: ").rstrip("."))
    setting = TurnSetting(video=replace(video, problem=""), sampling=sampled.sampling,
                          system_prompt=system_prompt or "")
    return ReadSetting(setting, f"Check the settings: {'; '.join(problems)}." if problems else "")


def base_setting(studio: StudioState, sampling: SamplingSettings, system_prompt: str) -> TurnSetting:
    """The studio's own setting: the Budget tab's video budget (as last applied) and the chat's sampling and system
    prompt, with one max new tokens for both (the chat's max tokens, which the engine plans the video with)."""
    max_new = max(1, int(sampling.max_tokens))
    video = replace(studio.settings, max_new_tokens=max_new, problem="", question="")
    return TurnSetting(video=video, sampling=replace(sampling, max_tokens=max_new), system_prompt=system_prompt)


@dataclass(frozen=True)
class Preset:
    """A usual question, as two settings made from the studio's own (``base``)."""

    key: str
    label: str
    make: Callable[[TurnSetting], tuple[TurnSetting, TurnSetting]]


def _video(setting: TurnSetting, **changes: Any) -> TurnSetting:
    return replace(setting, video=replace(setting.video, **changes))


def _sampling(setting: TurnSetting, **changes: Any) -> TurnSetting:
    return replace(setting, sampling=replace(setting.sampling, **changes))


PRESETS: tuple[Preset, ...] = (
    Preset("studio", "the studio's settings on both sides", lambda s: (s, s)),
    Preset("half", "half the budget (B: seq ÷ 2)", lambda s: (s, _video(s, seq=s.video.seq // 2))),
    Preset("no_sound", "without the sound track (B: audio cap 0)", lambda s: (s, _video(s, audio_cap=0.0))),
    Preset("k_mode", "k_mode whole (A) vs eval_ek (B)",
           lambda s: (_video(s, k_mode="whole"), _video(s, k_mode="eval_ek"))),
    Preset("temperature", "temperature 0 (A) vs 0.8 (B)",
           lambda s: (_sampling(s, temperature=0.0), _sampling(s, temperature=0.8))),
)


def preset(key: str) -> Preset:
    """The preset called ``key`` (``KeyError`` names the known ones)."""
    for p in PRESETS:
        if p.key == key:
            return p
    raise KeyError(f"no preset {key!r}; presets: {', '.join(p.key for p in PRESETS)}")


# ---------------------------------------------------------------- plans
@dataclass(frozen=True)
class SidePlan:
    """One column's plan: the upload panels under the side's video budget, as the inspector planned them."""

    side: Side
    setting: TurnSetting
    studio: StudioState | None = None  # the panels' reports, the video's under this side's budget; None: refused
    error: str = ""  # one line: why this side cannot be planned (bad settings, the inspector refused the video)

    @property
    def media(self) -> tuple[MediaItem, ...]:
        """The panels' media with this side's inspector numbers (what its figures line checks the engine against)."""
        return tuple(panel_media(self.studio)) if self.studio is not None else ()

    @property
    def figures(self) -> PlanFigures | None:
        state = self.studio
        if state is None:
            return None
        counts = totals(state)
        video = state.video
        settings = state.settings
        return PlanFigures(
            frames=len(video.frames) if video else 0, fps=video.solver.effective_fps if video else 0.0,
            patch_cap=video.solver.patch_cap if video else 0,
            frame_size=video.frames[0].decoded_size if video else (0, 0),
            text=counts["text"], image=counts["image"], audio=counts["audio"],
            reserve=settings.effective_reserve, seq=settings.seq,
            sound_kept=bool(video and video.audio.kept), sound=video.audio.reason if video else "",
            chosen_scale=video.solver.chosen_scale if video else 1.0,
        )


def plan_side(profile: Profile, studio: StudioState, side: Side, read: ReadSetting, *,
              limits: UploadLimits = UploadLimits()) -> SidePlan:
    """Plan the panels' media under ``read``'s setting: the video through ``inspect_file`` with the side's video
    budget (the studio's own report when it was made with the same budget); images and audio as the studio
    inspected them (no video budget touches them)."""
    setting = read.setting
    if read.problem:
        return SidePlan(side, setting, error=read.problem)
    try:
        setting.video.validate()
    except InspectionError as exc:
        return SidePlan(side, setting, error=f"Settings not usable: {exc}")
    report = studio.video
    if studio.video_path and (report is None or report.settings != setting.video):
        try:
            report = inspect_file(studio.video_path, profile, setting.video, expected="video", limits=limits)
        except InspectionError as exc:
            return SidePlan(side, setting, error=f"Video {Path(studio.video_path).name}: {exc}")
    return SidePlan(side, setting, studio=replace(studio, settings=setting.video, video=report))


async def plan_sides(profile: Profile, studio: StudioState, a: ReadSetting, b: ReadSetting, *,
                     limits: UploadLimits = UploadLimits()) -> tuple[SidePlan, SidePlan]:
    """Both plans, side by side in worker threads (each may decode the video)."""
    plan_a, plan_b = await asyncio.gather(
        asyncio.to_thread(plan_side, profile, studio, "A", a, limits=limits),
        asyncio.to_thread(plan_side, profile, studio, "B", b, limits=limits))
    return plan_a, plan_b


# ---------------------------------------------------------------- a session's rounds
@dataclass(frozen=True)
class CompareSession:
    """One browser session's compare rounds (kept in ``gr.State``; the session record exports ``rounds``)."""

    session_id: str
    rounds: tuple[CompareRound, ...] = ()

    @property
    def last(self) -> CompareRound | None:
        return self.rounds[-1] if self.rounds else None


def new_compare_session() -> CompareSession:
    """A fresh session (``gr.State(new_compare_session)`` calls it once per browser session)."""
    return CompareSession(session_id=uuid.uuid4().hex[:12])


def judged(round_: CompareRound) -> bool:
    return bool(round_.preference or round_.a.verdict or round_.b.verdict or round_.a.note or round_.b.note)


def is_preview(round_: CompareRound) -> bool:
    return round_.a.answer is None and round_.b.answer is None


def with_round(session: CompareSession, round_: CompareRound, *, new: bool) -> CompareSession:
    """``round_`` as the session's last round: a new one (it replaces a preview nobody judged: a draft), or the
    last one updated."""
    rounds = session.rounds
    if new and not (rounds and is_preview(rounds[-1]) and not judged(rounds[-1])):
        return replace(session, rounds=rounds + (round_,))
    return replace(session, rounds=rounds[:-1] + (round_,))


NO_ROUND = "Preview or run a round first: ratings belong to the round shown."


def _at(session: CompareSession, at: int | None) -> int | None:
    """The index of round ``at`` (None: the last), or None when the session has no such round."""
    index = len(session.rounds) - 1 if at is None else at
    return index if 0 <= index < len(session.rounds) else None


def with_round_at(session: CompareSession, index: int, round_: CompareRound) -> CompareSession:
    """``round_`` in place of the session's ``index``-th round."""
    rounds = session.rounds
    return replace(session, rounds=rounds[:index] + (round_,) + rounds[index + 1:])


def rate_side(session: CompareSession, side: Side, verdict: Verdict | None,
              note: str | None, *, at: int | None = None) -> tuple[CompareSession, str]:
    """Record 👍/👎 (``None``: no verdict) and a note for ``side`` of round ``at`` (0-based; None: the last);
    (session, message)."""
    index = _at(session, at)
    if index is None:
        return session, NO_ROUND
    round_ = session.rounds[index]
    key = "a" if side == "A" else "b"
    judged_side = replace(getattr(round_, key), verdict=verdict if verdict in ("up", "down") else None,
                          note=(note or "").strip())
    return with_round_at(session, index, replace(round_, **{key: judged_side})), ""


def prefer(session: CompareSession, preference: Preference | None, *,
           at: int | None = None) -> tuple[CompareSession, str]:
    """Record A better / B better / tie (``None``: undecided) for round ``at`` (None: the last); (session,
    message)."""
    index = _at(session, at)
    if index is None:
        return session, NO_ROUND
    value = preference if preference in ("A", "B", "tie") else None
    return with_round_at(session, index, replace(session.rounds[index], preference=value)), ""


# ---------------------------------------------------------------- replies
@dataclass(frozen=True)
class CompareView:
    """One step of a round, for the page: the session (its last round is this one), both plans, both replies."""

    session: CompareSession
    plans: tuple[SidePlan, SidePlan] | None  # None: still planning
    replies: tuple[Reply, Reply]
    status: str  # one line (Markdown) about the round as a whole
    done: bool = False
    new_plans: bool = False  # the plans changed in this step (the page redraws them)

    @property
    def round(self) -> CompareRound | None:
        return self.session.last


def _round(question: str, studio: StudioState, plans: tuple[SidePlan, SidePlan], replies: tuple[Reply, Reply]
           | None, preset_key: str) -> CompareRound:
    """The round as the session keeps it: each side's setting and plan (its numbers, and the panels' media with
    its inspector numbers, so the round reads again later without inspecting anything) and its answer."""
    a, b = (CompareSide(p.side, p.setting, answer=r.answer if r is not None else None, plan=p.figures,
                        plan_media=p.media, plan_error=p.error)
            for p, r in zip(plans, replies or (None, None), strict=True))
    return CompareRound(question=question, media=tuple(panel_media(studio)), a=a, b=b, preset=preset_key)


def _first_replies(plans: tuple[SidePlan, SidePlan], state: ReplyState) -> tuple[Reply, Reply]:
    """Before any answer: a side that cannot be planned is refused (why, in its column); the other is ``state``.
    Each answer starts with its side's setting: the answer keeps what it ran with."""
    a, b = (Reply(Answer(setting=p.setting)).failed(p.error, "refused") if p.error
            else Reply(Answer(setting=p.setting), state=state) for p in plans)
    return a, b


def _answered(round_: CompareRound, replies: tuple[Reply, Reply]) -> CompareRound:
    return replace(round_, a=replace(round_.a, answer=replies[0].answer), b=replace(round_.b, answer=replies[1].answer))


def _plan_status(plans: tuple[SidePlan, SidePlan], studio: StudioState) -> str:
    if not panel_media(studio):
        return "No media in the upload panels: the plans hold the question alone."
    bad = [p.side for p in plans if p.error]
    if bad:
        return f"⚠ {' and '.join(bad)} cannot be planned (see {'its' if len(bad) == 1 else 'their'} column)."
    return "✓ Plans of A and B from the inspector."


async def preview_round(profile: Profile, studio: StudioState, session: CompareSession, question: str | None,
                        a: ReadSetting, b: ReadSetting, *, preset_key: str = "",
                        limits: UploadLimits = UploadLimits()) -> CompareView:
    """Plans only (no engine): the panels' media under A and B side by side, recorded as a round without answers."""
    plans = await plan_sides(profile, studio, a, b, limits=limits)
    round_ = _round((question or "").strip(), studio, plans, None, preset_key)
    replies = _first_replies(plans, "planned")
    return CompareView(with_round(session, round_, new=True), plans, replies,
                       "Preview: " + _plan_status(plans, studio), done=True, new_plans=True)


@dataclass(frozen=True)
class SideEvent:
    """What one side's stream said: a delta, or why it ended early (``error``, one line)."""

    delta: TurnDelta | None = None
    error: str = ""


async def side_events(engine: ChatEngine, turn: TurnRequest) -> AsyncGenerator[SideEvent, None]:
    """``engine.stream_turn(turn)`` as events; a refusal or failure is this side's last event, never an exception
    (so the other side goes on). Closing it closes the engine stream, which aborts the request."""
    try:
        async with contextlib.aclosing(engine.stream_turn(turn)) as stream:
            async for delta in stream:
                yield SideEvent(delta=delta)
    except (RequestRefused, TurnRejected) as exc:
        yield SideEvent(error=f"Refused — not an engine failure: {exc}")
    except EngineUnavailable as exc:
        yield SideEvent(error=f"The engine is not available: {exc}")
    except Exception as exc:
        logger.exception("compare request %s failed", turn.request_id)
        yield SideEvent(error=f"The engine failed: {str(exc).strip() or type(exc).__name__}")


@dataclass(frozen=True)
class _Ended:
    """A stream's end in the merge's queue (``error``: what it raised)."""

    error: BaseException | None = None


async def merge_streams(streams: Mapping[T, AsyncGenerator[Any, None]]) -> AsyncGenerator[tuple[T, Any], None]:
    """The items of several async generators as they arrive, each tagged with its key.

    Each stream is consumed by its own task, inside ``aclosing``. When this generator is closed or cancelled
    before the streams end (Stop, a closed tab) every task is cancelled and awaited, so every stream is closed (an
    engine stream aborts its request) before this one is.
    """
    queue: asyncio.Queue[tuple[T, Any]] = asyncio.Queue()

    async def pump(key: T, stream: AsyncGenerator[Any, None]) -> None:
        error: BaseException | None = None
        try:
            async with contextlib.aclosing(stream) as items:
                async for item in items:
                    await queue.put((key, item))
        except Exception as exc:  # noqa: BLE001 - raised again by the merge, once every stream is closed
            error = exc
        finally:
            queue.put_nowait((key, _Ended(error)))

    tasks = [asyncio.create_task(pump(key, stream)) for key, stream in streams.items()]
    try:
        running = len(tasks)
        while running:
            key, item = await queue.get()
            if isinstance(item, _Ended):
                running -= 1
                if item.error is not None:
                    raise item.error
                continue
            yield key, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def side_turn(session: CompareSession, plan: SidePlan, question: str, default_system: str) -> TurnRequest:
    """The engine request of one side: the panels' media and the question, under the side's setting."""
    studio = plan.studio
    if studio is None:
        raise ValueError(f"side {plan.side} has no plan: {plan.error}")
    system = plan.setting.system_prompt if plan.setting.system_prompt is not None else default_system
    return build_turn(session_id=f"{session.session_id}-{plan.side.lower()}", system=system,
                      messages=[user_message(question, plan.media)], sampling=plan.setting.sampling,
                      video=plan.setting.video)


async def run_round(engine: ChatEngine | None, profile: Profile, studio: StudioState, session: CompareSession,
                    question: str | None, a: ReadSetting, b: ReadSetting, *, preset_key: str = "",
                    default_system: str = DEFAULT_SYSTEM_PROMPT, limits: UploadLimits = UploadLimits(),
                    pacer: StreamPacer | None = None) -> AsyncGenerator[CompareView, None]:
    """Plan A and B, then stream both answers at once (two engine requests). Each step is a complete snapshot;
    closing this generator (Stop, a closed tab) closes both engine requests."""
    text = (question or "").strip()
    idle = (Reply(), Reply())
    if engine is None:
        yield CompareView(session, None, idle, "No engine attached: **Preview plans** shows A and B without "
                          "answers; attach an engine to run them.", done=True)
        return
    if not text and not panel_media(studio):
        yield CompareView(session, None, idle, "Type a question (or upload media) first.", done=True)
        return
    yield CompareView(session, None, (Reply(state="waiting"), Reply(state="waiting")), "⏳ planning A and B…")
    plans = await plan_sides(profile, studio, a, b, limits=limits)
    replies = _first_replies(plans, "waiting")
    round_ = _round(text, studio, plans, replies, preset_key)
    session = with_round(session, round_, new=True)
    runnable = [p for p in plans if not p.error]
    turns = {p.side: side_turn(session, p, text, default_system) for p in runnable}
    try:  # media this engine will not take is refused before any wait (both sides hold the same media)
        for turn in turns.values():
            check_media_limits(turn.messages, engine.mm_limits)
    except TurnRejected as exc:
        replies = (replies[0] if replies[0].state == "refused" else replies[0].failed(str(exc), "refused"),
                   replies[1] if replies[1].state == "refused" else replies[1].failed(str(exc), "refused"))
        turns = {}
    pair = replies
    session = with_round(session, _answered(round_, pair), new=False)
    yield CompareView(session, plans, pair, _plan_status(plans, studio) + (" ⏳ sending…" if turns else ""),
                      done=not turns, new_plans=True)
    if not turns:
        return
    try:
        async with contextlib.aclosing(engine_start(engine)) as loading:
            async for stage in loading:
                yield CompareView(session, plans, pair, f"⏳ waiting for the engine to load ({html.escape(stage)}); "
                                  "A and B are sent as soon as the model is ready")
    except EngineUnavailable as exc:
        problem = f"The engine is not available: {exc}"
        pair = (pair[0] if pair[0].state == "refused" else pair[0].failed(problem),
                pair[1] if pair[1].state == "refused" else pair[1].failed(problem))
        session = with_round(session, _answered(session.rounds[-1], pair), new=False)
        yield CompareView(session, plans, pair, f"⚠ {html.escape(problem)}", done=True)
        return
    pacer = pacer or StreamPacer(min_interval_s=0.0, max_updates_per_s=float("inf"), render_chars_per_s=float("inf"))
    index = {"A": 0, "B": 1}
    last_shown = 0.0
    current = list(pair)
    streams = {side: side_events(engine, turn) for side, turn in turns.items()}
    with contextlib.ExitStack() as counted:
        for _ in turns:
            counted.enter_context(pacer.streaming())
        async with contextlib.aclosing(merge_streams(streams)) as merged:
            async for side, event in merged:
                i = index[side]
                before = current[i]
                current[i] = before.add(event.delta) if event.delta is not None else before.failed(event.error)
                now = time.monotonic()
                if not (current[i].structural(before)
                        or now - last_shown >= pacer.interval(max(r.size() for r in current))):
                    continue
                last_shown = now
                pair = (current[0], current[1])
                session = with_round(session, _answered(session.rounds[-1], pair), new=False)
                yield CompareView(session, plans, pair, "⏳ A and B are answering…")
    pair = (current[0], current[1])
    session = with_round(session, _answered(session.rounds[-1], pair), new=False)
    failed = [side for side, r in zip(SIDES, pair, strict=True) if r.answer.error]
    status = "✓ Both answered." if not failed else f"⚠ {' and '.join(failed)} did not answer (see the column)."
    yield CompareView(session, plans, pair, status, done=True)


def recorded_reply(side: CompareSide) -> Reply:
    """A side of a round as the session keeps it, as its column shows it: planned (a preview), refused (it could
    not be planned or sent), done, failed, or stopped (it neither finished nor failed)."""
    answer = side.answer
    if answer is None:
        return Reply(Answer(error=side.plan_error), "refused") if side.plan_error else Reply()
    if side.plan_error or (answer.error and answer.stats is None and not (answer.text or answer.reasoning)):
        return Reply(answer, "refused" if side.plan_error else "failed")
    state: ReplyState = "done" if answer.finish_reason else "failed" if answer.error else "stopped"
    return Reply(answer, state)


def settled(session: CompareSession) -> tuple[Reply, Reply]:
    """After a round's event ended or was stopped: each side's reply as the session kept it (a side that neither
    finished nor failed was stopped)."""
    last = session.last
    if last is None or is_preview(last):
        return Reply(), Reply()
    return recorded_reply(last.a), recorded_reply(last.b)
