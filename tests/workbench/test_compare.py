"""Compare's plain logic (``workbench.compare``): presets, each side's plan against the inspector, two answers
streamed at once over the scripted engine double, Stop aborting both, one side refused, the ratings."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from dots3_demo.core.records import TurnSetting
from dots3_demo.core.state import StudioState, initial_state
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.workbench import compare
from dots3_demo.workbench.compare import CompareSession, ReadSetting, new_compare_session
from support.doubles import ScriptedAsyncLLM, scripted_engine
from support.uploads import Page
from tests.workbench.stopping import stop_and_wait_for_aborts

SEQ = 4096  # the 8 s clip fits it at full quality; half of it makes the solver degrade


def setting(seq: int = SEQ, *, audio_cap: float = 1.0, k_mode: str = "eval_ek", temperature: float = 0.7,
            system: str = "You are a helpful assistant.", max_tokens: int = 256) -> ReadSetting:
    """A side's controls as the page sends them (by ``read_setting``'s names)."""
    return compare.read_setting(seq=seq, reserve_auto=True, reserve=0, max_new_tokens=max_tokens,
                                audio_cap=audio_cap, k_mode=k_mode, temperature=temperature, top_p=0.95, top_k=-1,
                                seed=7, repetition_penalty=1.0, system_prompt=system)


@pytest.fixture(scope="module")
def studio(profile, clip_with_audio) -> StudioState:
    """The upload panels holding the 8 s clip, inspected as the video panel does (the studio's Budget tab)."""
    outcome = Page(profile, initial_state(SEQ)).video(str(clip_with_audio), VideoSettings(seq=SEQ))
    assert outcome.error is None and outcome.state.video is not None
    return outcome.state


def run(agen) -> list[compare.CompareView]:
    async def main():
        async with __import__("contextlib").aclosing(agen) as views:
            return [view async for view in views]

    return asyncio.run(main())


def answer_by_system(engine_input) -> list[str]:
    """The double answers per side: the system prompt's last word, counted; "refuse" makes vLLM refuse it."""
    system = engine_input["conversation"][0]["content"]
    word = system.split()[-1]
    if word == "refuse":
        raise ValueError("This model's maximum context length is 8192 tokens (scripted refusal)")
    return [f"{word}-{i} " for i in range(1, 6)]


# ---------------------------------------------------------------- settings and presets
def test_read_setting_ties_max_new_tokens_to_max_tokens_and_names_bad_controls():
    read = compare.read_setting(seq=16384, reserve_auto=False, reserve=2048, max_new_tokens=512, audio_cap=0.5,
                                k_mode="whole", temperature=0.2, top_p=0.9, top_k=20, seed=-1,
                                repetition_penalty=1.1, system_prompt="Be brief.")
    assert read.problem == ""
    assert read.setting.video == VideoSettings(seq=16384, output_reserve=2048, max_new_tokens=512, audio_cap=0.5,
                                               k_mode="whole")
    assert read.setting.sampling == SamplingSettings(temperature=0.2, top_p=0.9, top_k=20, max_tokens=512, seed=None,
                                                     repetition_penalty=1.1)
    assert read.setting.system_prompt == "Be brief."
    bad = compare.read_setting(seq=None, reserve_auto=True, reserve=0, max_new_tokens="", audio_cap=1.0,
                               k_mode="eval_ek", temperature=float("nan"), top_p=0.95, top_k=-1, seed=-1,
                               repetition_penalty=1.0, system_prompt="")
    assert "seq is empty" in bad.problem and "max new tokens is empty" in bad.problem
    assert "temperature is not a number" in bad.problem and "\n" not in bad.problem


def test_presets_from_the_studios_setting(studio):
    base = compare.base_setting(replace(studio, settings=VideoSettings(seq=SEQ, audio_cap=0.6, k_mode="logk")),
                                SamplingSettings(temperature=0.3, max_tokens=300), "Sys.")
    assert base.video == VideoSettings(seq=SEQ, audio_cap=0.6, k_mode="logk", max_new_tokens=300)
    assert base.sampling.max_tokens == 300 and base.system_prompt == "Sys."
    made = {p.key: p.make(base) for p in compare.PRESETS}
    assert made["studio"] == (base, base)
    a, b = made["half"]
    assert a == base and b.video == replace(base.video, seq=SEQ // 2) and b.sampling == base.sampling
    a, b = made["no_sound"]
    assert a == base and b.video == replace(base.video, audio_cap=0.0)
    a, b = made["k_mode"]
    assert (a.video.k_mode, b.video.k_mode) == ("whole", "eval_ek")
    assert replace(a.video, k_mode="logk") == base.video == replace(b.video, k_mode="logk")
    a, b = made["temperature"]
    assert (a.sampling.temperature, b.sampling.temperature) == (0.0, 0.8) and a.video == b.video == base.video
    with pytest.raises(KeyError, match="half"):
        compare.preset("double")


# ---------------------------------------------------------------- plans
def test_each_sides_plan_is_the_inspectors_for_its_budget(profile, studio, clip_with_audio):
    a, b = setting(SEQ), setting(SEQ // 2)
    view = asyncio.run(compare.preview_round(profile, studio, new_compare_session(), "What happens?", a, b))
    plan_a, plan_b = view.plans
    for plan, read in ((plan_a, a), (plan_b, b)):
        expected = inspect_file(clip_with_audio, profile, read.setting.video, expected="video")
        assert plan.error == "" and plan.studio.video.to_dict() == expected.to_dict()
        figures = plan.figures
        assert (figures.frames, figures.patch_cap, figures.frame_size) == (
            len(expected.frames), expected.solver.patch_cap, expected.frames[0].decoded_size)
        assert figures.fps == expected.solver.effective_fps
        assert (figures.text, figures.image, figures.audio) == (
            expected.text_tokens, expected.image_pad_tokens, expected.audio_pad_tokens)
        assert figures.media == expected.prompt_tokens and figures.seq == read.setting.video.seq
        (item,) = plan.media  # what the side's figures line checks the engine against
        assert (item.tokens, item.frame_tokens, item.audio_tokens) == (
            expected.prompt_tokens, expected.image_pad_tokens, expected.audio_pad_tokens)
    assert plan_b.figures.media < plan_a.figures.media  # halving seq costs this clip tokens
    round_ = view.round
    assert round_.question == "What happens?" and round_.a.answer is None and round_.b.answer is None
    assert round_.a.setting == a.setting and round_.b.setting == b.setting
    assert [m.path for m in round_.media] == [str(clip_with_audio)]
    assert view.done and view.new_plans and "Preview" in view.status


def test_without_the_sound_track_b_has_no_audio_tokens(profile, studio):
    a, b = (replace(s, sampling=s.sampling) for s in compare.preset("no_sound").make(
        compare.base_setting(studio, SamplingSettings(max_tokens=256), "")))
    view = asyncio.run(compare.preview_round(profile, studio, new_compare_session(), "", ReadSetting(a),
                                             ReadSetting(b)))
    fa, fb = (p.figures for p in view.plans)
    assert fa.audio > 0 and fa.sound_kept
    assert fb.audio == 0 and not fb.sound_kept and fb.sound == "audio_cap is 0: frames only"


def test_bad_settings_refuse_one_side_only(profile, studio):
    b = compare.read_setting(seq=2048, reserve_auto=False, reserve=4096, max_new_tokens=256, audio_cap=1.0,
                             k_mode="eval_ek", temperature=0.7, top_p=0.95, top_k=-1, seed=-1,
                             repetition_penalty=1.0, system_prompt="")
    view = asyncio.run(compare.preview_round(profile, studio, new_compare_session(), "q", setting(), b))
    plan_a, plan_b = view.plans
    assert plan_a.error == "" and plan_a.figures.frames > 0
    assert plan_b.studio is None and plan_b.error.startswith("Settings not usable: output reserve 4096")
    assert view.replies[1].answer.error == plan_b.error and view.replies[0].answer.error == ""
    assert "B cannot be planned" in view.status


def test_preview_without_media_plans_the_question_alone(profile):
    view = asyncio.run(compare.preview_round(profile, initial_state(SEQ), new_compare_session(), "hi",
                                             setting(), setting(SEQ // 2)))
    assert all(p.figures.media == 0 and p.figures.frames == 0 for p in view.plans)
    assert "No media" in view.status


# ---------------------------------------------------------------- answers
def test_both_sides_stream_at_once_each_under_its_setting(profile, studio):
    async def main():
        double = ScriptedAsyncLLM(answer_by_system, hold_at=2)
        engine = scripted_engine(double)
        a, b = setting(SEQ, system="Answer as alpha", temperature=0.0), setting(SEQ // 2, system="Answer as beta")
        views = []

        async def consume():
            async with __import__("contextlib").aclosing(compare.run_round(
                    engine, profile, studio, new_compare_session(), "What happens?", a, b)) as steps:
                async for view in steps:
                    views.append(view)

        task = asyncio.create_task(consume())

        async def both_held():  # each side streamed two deltas and is held: both requests run at once
            while not views or [r.answer.text for r in views[-1].replies] != ["alpha-1 alpha-2 ", "beta-1 beta-2 "]:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(both_held(), 30)
        assert len(double.generated) == 2 and double.aborted == []
        double.released.set()
        await asyncio.wait_for(task, 30)
        return double, views, a, b

    double, views, a, b = asyncio.run(main())
    final = views[-1]
    assert final.done and final.status == "✓ Both answered."
    texts = [r.answer.text for r in final.replies]
    assert texts == ["".join(f"alpha-{i} " for i in range(1, 6)), "".join(f"beta-{i} " for i in range(1, 6))]
    round_ = final.round
    assert (round_.a.answer.text, round_.b.answer.text) == tuple(texts)
    assert round_.a.answer.finish_reason == round_.b.answer.finish_reason == "stop"
    assert round_.a.answer.stats.ttft_s == 0.25 and round_.b.answer.stats.prompt.total == 16
    # each answer keeps the setting it ran with; each side keeps its own plan (its numbers and media)
    assert (round_.a.answer.setting, round_.b.answer.setting) == (a.setting, b.setting)
    assert (round_.a.plan, round_.b.plan) == (final.plans[0].figures, final.plans[1].figures)
    assert round_.b.plan.seq == SEQ // 2 and round_.a.plan.frames > 0 and round_.b.plan.image > 0
    assert (round_.a.plan_media, round_.b.plan_media) == (final.plans[0].media, final.plans[1].media)
    by_system = {call["conversations"][0][0]["content"]: call["prompt_extras"]["mm_processor_kwargs"]
                 for call in double.renderer.calls}
    assert by_system["Answer as alpha"] == a.setting.video.mm_processor_kwargs(max_new_tokens=256)
    assert by_system["Answer as beta"]["seq"] == SEQ // 2
    temperatures = sorted(params.temperature for _, params, _ in double.generated)
    assert temperatures == [0.0, 0.7]
    ids = [request_id for _, _, request_id in double.generated]
    assert len(set(ids)) == 2 and all(i.startswith(final.session.session_id) for i in ids)
    assert len(final.session.rounds) == 1 and double.aborted == []


def test_stop_aborts_both_requests(profile, studio):
    async def main():
        double = ScriptedAsyncLLM(answer_by_system, hold_at=2)
        engine = scripted_engine(double)
        seen = []

        async def consume():
            async with __import__("contextlib").aclosing(compare.run_round(
                    engine, profile, studio, new_compare_session(), "q", setting(system="x alpha"),
                    setting(system="x beta"))) as steps:
                async for view in steps:
                    seen.append(view)

        task = asyncio.create_task(consume())
        while len(double.generated) < 2 or not seen or not all(r.answer.text for r in seen[-1].replies):
            await asyncio.sleep(0.01)
        aborted = await stop_and_wait_for_aborts(task, double)  # what Gradio's Stop (cancels=[...]) does
        return double, seen, aborted

    double, seen, aborted = asyncio.run(main())
    assert sorted(aborted) == sorted(request_id for _, _, request_id in double.generated)
    session = seen[-1].session  # the session keeps what was shown; settle calls the unfinished sides stopped
    assert [r.state for r in compare.settled(session)] == ["stopped", "stopped"]
    assert session.last.a.answer.text.startswith("alpha-1") and session.last.a.answer.finish_reason is None


def test_a_closed_tab_closes_both_requests(profile, studio):
    async def main():
        double = ScriptedAsyncLLM(lambda i: [f"w{n} " for n in range(200)], delay_s=0.005)
        steps = compare.run_round(scripted_engine(double), profile, studio, new_compare_session(), "q",
                                  setting(), setting(SEQ // 2))
        async for view in steps:
            if all(r.answer.text for r in view.replies):
                break
        await steps.aclose()  # GeneratorExit at the yield: what Gradio does when the tab closes
        return double, list(double.aborted)

    double, aborted = asyncio.run(main())
    assert len(double.generated) == 2
    assert sorted(aborted) == sorted(request_id for _, _, request_id in double.generated)


def test_one_side_refused_by_the_engine_the_other_answers(profile, studio):
    double = ScriptedAsyncLLM(answer_by_system)
    views = run(compare.run_round(scripted_engine(double), profile, studio, new_compare_session(), "q",
                                  setting(system="as gamma"), setting(system="please refuse")))
    final = views[-1]
    a, b = final.replies
    assert a.state == "done" and a.answer.text.startswith("gamma-1") and a.answer.error == ""
    assert b.state == "failed" and b.answer.text == ""
    assert b.answer.error.startswith("Refused — not an engine failure") and "maximum context length" in b.answer.error
    assert final.status == "⚠ B did not answer (see the column)."
    assert final.round.b.answer.error == b.answer.error


def test_bad_settings_on_one_side_send_only_the_other(profile, studio):
    double = ScriptedAsyncLLM(answer_by_system)
    bad = compare.read_setting(seq="", reserve_auto=True, reserve=0, max_new_tokens=64, audio_cap=1.0,
                               k_mode="eval_ek", temperature=0.7, top_p=0.95, top_k=-1, seed=-1,
                               repetition_penalty=1.0, system_prompt="as delta")
    views = run(compare.run_round(scripted_engine(double), profile, studio, new_compare_session(), "q",
                                  bad, setting(system="as epsilon")))
    a, b = views[-1].replies
    assert a.state == "refused" and a.answer.error == "Check the settings: seq is empty."
    assert b.state == "done" and b.answer.text.startswith("epsilon-1")
    assert len(double.generated) == 1


def test_without_an_engine_run_says_to_preview(profile, studio):
    (view,) = run(compare.run_round(None, profile, studio, new_compare_session(), "q", setting(), setting()))
    assert view.done and "Preview plans" in view.status and view.session.rounds == ()


# ---------------------------------------------------------------- ratings
def test_ratings_are_stored_in_the_last_round_and_an_unjudged_preview_is_a_draft(profile, studio):
    session, message = compare.rate_side(new_compare_session(), "A", "up", "x")
    assert session.rounds == () and message == compare.NO_ROUND
    first = asyncio.run(compare.preview_round(profile, studio, session, "one", setting(), setting(SEQ // 2))).session
    second = asyncio.run(compare.preview_round(profile, studio, first, "two", setting(), setting(SEQ // 2))).session
    assert [r.question for r in second.rounds] == ["two"]  # nobody judged "one": it was a draft
    rated, _ = compare.rate_side(second, "B", "down", "  misses the dog ")
    rated, _ = compare.rate_side(rated, "A", "up", "")
    rated, message = compare.prefer(rated, "A")
    assert message == ""
    last = rated.last
    assert (last.a.verdict, last.a.note, last.b.verdict, last.b.note, last.preference) == (
        "up", "", "down", "misses the dog", "A")
    third = asyncio.run(compare.preview_round(profile, studio, rated, "three", setting(), setting())).session
    assert [r.question for r in third.rounds] == ["two", "three"]  # a judged round stays
    assert third.rounds[0] == last
    cleared, _ = compare.prefer(third, None)
    assert cleared.last.preference is None and isinstance(cleared, CompareSession)
    # a round read again takes ratings too: round 1 (index 0), the last left as it was
    late, message = compare.rate_side(cleared, "A", "down", " on second thought ", at=0)
    late, _ = compare.prefer(late, "B", at=0)
    assert message == "" and late.rounds[1] == cleared.rounds[1]
    assert (late.rounds[0].a.verdict, late.rounds[0].a.note, late.rounds[0].preference) == (
        "down", "on second thought", "B")
    assert compare.rate_side(late, "A", "up", "", at=5) == (late, compare.NO_ROUND)


def test_compare_setting_is_the_records_shape():
    read = setting()
    assert isinstance(read.setting, TurnSetting) and read.setting.sampling.max_tokens == 256
