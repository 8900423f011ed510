"""The session record's format version 2: each reply keeps the settings it ran with, each compare side its own
plan, in the session, the zip and the report; a record of version 1 (``fixtures/v1-session.zip``, written by
the code before version 2) still imports, and says what it did not keep."""

from __future__ import annotations

import asyncio
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest

from dots3_demo.core.records import TurnSetting
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import StudioState, initial_state, new_session
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.ui import chat, record_page
from dots3_demo.ui import compare as compare_ui
from dots3_demo.workbench import compare
from dots3_demo.workbench import record as rec
from dots3_demo.workbench.compare import new_compare_session
from support.doubles import ScriptedAsyncLLM, scripted_engine
from support.uploads import Page
from tests.workbench.htmlcheck import assert_inert

V1 = Path(__file__).parent / "fixtures" / "v1-session.zip"
SEQ = 4096


def _last(agen) -> chat.ChatView:
    async def main():
        return [view async for view in agen][-1]

    return asyncio.run(main())


def _reply_blocks(page: str) -> list[str]:
    """The report's reply blocks, in order (each from its heading to the next)."""
    return page.split("<h3>reply ")[1:]


@pytest.fixture(scope="module")
def studio(profile, clip_with_audio) -> StudioState:
    outcome = Page(profile, initial_state(SEQ)).video(str(clip_with_audio), VideoSettings(seq=SEQ))
    return outcome.state


@pytest.fixture(scope="module")
def two_replies(studio):
    """Two replies: max tokens 2,000, temperature 0.2 and "Be brief." for the first; 200, 0.9, "Be long." and
    tool choice "required" (with a tool) for the second."""
    engine = scripted_engine(ScriptedAsyncLLM(lambda _input: ["Fine", " words."]))
    first = ChatSettings(system_prompt="Be brief.", min_interval_s=0.0,
                              sampling=SamplingSettings(temperature=0.2, max_tokens=2000, seed=7))
    tool = [{"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}]
    second = replace(first, system_prompt="Be long.", tools_json=json.dumps(tool), tool_choice="required",
                     sampling=SamplingSettings(temperature=0.9, max_tokens=200))
    video_only = replace(studio, images=(), audio_path=None, audio=None)
    one = _last(chat.send_message(engine, video_only, new_session(), "What happens?", first)).session
    two = _last(chat.send_message(engine, video_only, one, "Again.", second)).session
    return two, first, second


def test_each_reply_keeps_the_settings_it_ran_with(two_replies, studio):
    session, first, second = two_replies
    a, b = (answer.setting for answer in session.answers)
    assert a == TurnSetting(video=replace(studio.settings, max_new_tokens=2000), sampling=first.sampling,
                            system_prompt="Be brief.", tool_choice="auto")
    assert b == TurnSetting(video=replace(studio.settings, max_new_tokens=200), sampling=second.sampling,
                            system_prompt="Be long.", tool_choice="required")


def test_the_record_and_its_report_show_each_replys_own_settings(two_replies, studio, profile, tmp_path):
    session, _, second = two_replies
    record = rec.build_record(session, studio, rec.chat_setup(second), profile=profile, model="scripted")
    assert record.version == 2
    exported = rec.export_zip(record, tmp_path / "out")
    with zipfile.ZipFile(exported) as archive:
        data = json.loads(archive.read(rec.SESSION_JSON))
    assert data["version"] == 2
    assert [a["setting"]["sampling"]["max_tokens"] for a in data["transcript"]["answers"]] == [2000, 200]
    imported = rec.import_zip(exported, tmp_path / "in")
    assert [a.setting for a in imported.transcript.answers] == [a.setting for a in session.answers]
    page = rec.report_page(imported)
    assert_inert(page)
    one, two = _reply_blocks(page)
    assert "max tokens 2,000" in one and "temperature 0.2" in one and "Be brief." in one and "auto" in one
    assert "max tokens 200" in two and "temperature 0.9" in two and "Be long." in two and "required" in two
    assert "max tokens 2,000" not in two and "max new tokens 200" in two  # the engine planned its video with 200


def test_a_compare_round_keeps_each_sides_plan_in_the_record_and_report(studio, profile, tmp_path):
    a = compare.read_setting(seq=SEQ, reserve_auto=True, reserve=0, max_new_tokens=256, audio_cap=1.0,
                             k_mode="eval_ek", temperature=0.7, top_p=0.95, top_k=-1, seed=-1,
                             repetition_penalty=1.0, system_prompt="A")
    b = replace(a, setting=replace(a.setting, video=replace(a.setting.video, seq=SEQ // 2)))
    view = asyncio.run(compare.preview_round(profile, studio, new_compare_session(), "What happens?", a, b))
    round_ = view.session.last
    fa, fb = view.plans[0].figures, view.plans[1].figures
    assert (round_.a.plan, round_.b.plan) == (fa, fb) and fa.media != fb.media
    record = rec.build_record(new_session(), studio, rec.ChatSetup(), profile=profile, compare=view.session.rounds)
    exported = rec.export_zip(record, tmp_path / "out")
    imported = rec.import_zip(exported, tmp_path / "in")
    (kept,) = imported.compare
    assert (kept.a.plan, kept.b.plan) == (fa, fb)
    assert [m.tokens for m in kept.b.plan_media] == [m.tokens for m in round_.b.plan_media]
    assert all(Path(m.path).is_file() and Path(m.path).parent.parent == Path(imported.media[0].path).parent.parent
               for m in kept.b.plan_media)  # the imported file, not the exporting machine's path
    page = rec.report_page(imported)
    assert_inert(page)
    compare_part = page.split('id="compare"')[1]
    for f in (fa, fb):
        assert f"media {f.media:,} of {f.seq - f.reserve:,} (seq {f.seq:,} − reserve {f.reserve:,})" in compare_part
        assert f"{f.frames:,} · {f.fps:.2f} fps · patch cap {f.patch_cap:,}" in compare_part
        assert f"<td>{f.sound}</td>" in compare_part  # the inspector's reason, which says kept or dropped itself


def test_a_version_1_record_still_imports_and_says_what_it_did_not_keep(tmp_path, profile):
    with zipfile.ZipFile(V1) as archive:
        assert json.loads(archive.read(rec.SESSION_JSON))["version"] == 1  # as the old code wrote it
    record = rec.import_zip(V1, tmp_path)
    assert record.version == 1 and record.chat.sampling.max_tokens == 200
    assert [a.text for a in record.transcript.answers] == ["A gradient picture."] * 2
    assert all(a.setting is None for a in record.transcript.answers)
    (round_,) = record.compare
    assert (round_.a.verdict, round_.a.note, round_.b.verdict, round_.preference) == ("up", "plain", "down", "A")
    assert round_.a.plan is None and round_.b.setting.system_prompt == "Terse."
    restored = rec.restore_session(record, new_session())
    assert restored.reply_count == 2 and restored.ratings[0].note == "short enough"
    page = rec.report_page(record)
    assert_inert(page)
    assert page.count("ran with: not recorded") == 2 and "not recorded (a session file of format version 1)" in page
    # what is exported again is of the version this studio writes, each reply's setting still unknown
    again = rec.build_record(restored, StudioState(), record.chat, profile=profile, compare=record.compare)
    assert again.version == rec.VERSION == 2


def test_importing_puts_the_last_compare_round_back_in_the_columns(profile):
    outputs = record_page.on_import(profile, new_session(), new_compare_session(), str(V1))
    out = dict(zip(record_page.IMPORT_OUTPUTS, outputs, strict=True))
    assert len(out["compare_session"].rounds) == 1
    assert (out["compare_a_seq"], out["compare_b_seq"]) == (8192, 4096)
    assert (out["compare_a_temperature"], out["compare_b_system_prompt"]) == (0.0, "Terse.")
    assert out["compare_question"] == "What is this?"
    assert (out["compare_verdict_a"], out["compare_note_a"], out["compare_verdict_b"], out["compare_preference"]) \
        == ("up", "plain", "down", "A")
    assert "A gradient." in str(out["compare_answer_a"]) and "Colours." in str(out["compare_answer_b"])
    assert "not kept" in out["compare_plan_a"] and out["compare_diff"] == ""
    picker = out["compare_picker"]
    assert isinstance(picker, gr.Dropdown) and picker.value == 0
    assert picker.choices == [("round 1 · What is this? · A better", 0)]
    assert out["compare_status"].startswith("Round 1 of 1")
    # picking a round shows it; the columns' reserve box shows the reserve its plan uses
    shown = compare_ui.on_pick(profile, out["compare_session"], 0)
    assert dict(zip(compare_ui.RoundShown.names(), shown, strict=True))["b_reserve"] == \
        VideoSettings(seq=4096, max_new_tokens=256).effective_reserve
