"""Export and Import of a browser session (issue 12 §3), through the app's wired events: a real conversation
over the scripted engine double with a generated clip inspected by the real inspector, exported as the zip
and the HTML report, imported into a fresh session (the conversation, answers, ratings, settings and the
panels' files), then regenerated from any reply; bad files leave the session as it was."""

from __future__ import annotations

import asyncio
import filecmp
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest

from dots3_demo.core.records import CompareRound, CompareSide, ReplyRating, TurnSetting
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import StudioState, new_session
from dots3_demo.core.turns import new_media
from dots3_demo.engine.protocol import SamplingSettings
from dots3_demo.inspection import inspect_file
from dots3_demo.inspection.video import VideoSettings
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import build_interface, chat, layout, session_files
from dots3_demo.ui.record_page import IMPORT_OUTPUTS
from dots3_demo.workbench.compare import CompareSession, new_compare_session
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.ui.test_chat import TOOL_SCRIPT

SEQ = 8192
BUDGET = VideoSettings(seq=SEQ, output_reserve=1024, max_new_tokens=256, audio_cap=0.5, k_mode="whole")


def _script(engine_input):
    last = engine_input["conversation"][-1]
    if last["role"] == "tool":
        return ["It is 21 °C", " in Paris."]
    text = " ".join(p.get("text", "") for p in last["content"] if p.get("type") == "text")
    return TOOL_SCRIPT if "weather" in text else [f"Reply to {text}."]


def _last(agen) -> chat.ChatView:
    async def main():
        return [view async for view in agen][-1]

    return asyncio.run(main())


@pytest.fixture(scope="module")
def double():
    return ScriptedAsyncLLM(_script)


@pytest.fixture(scope="module")
def engine(double):
    return scripted_engine(double)


@pytest.fixture(scope="module")
def demo(profile, engine):
    return build_interface(profile, engine, seq=SEQ)


@pytest.fixture(scope="module")
def fns(demo):
    return {f.api_name: f for f in demo.fns.values() if f.api_name}


@pytest.fixture(scope="module")
def settings() -> ChatSettings:
    return ChatSettings(system_prompt="Be brief.", tools_json=json.dumps(EXAMPLE_TOOLS), min_interval_s=0.0,
                             sampling=SamplingSettings(temperature=0.2, top_k=20, max_tokens=256, seed=7),
                             tool_choice="auto")


@pytest.fixture(scope="module")
def controls(settings) -> tuple:
    s = settings.sampling
    return layout.ChatControls.ordered({
        "system_prompt": settings.system_prompt, "tools_json": settings.tools_json, "temperature": s.temperature,
        "top_p": s.top_p, "top_k": s.top_k, "max_tokens": s.max_tokens, "seed": s.seed,
        "repetition_penalty": s.repetition_penalty, "tool_choice": settings.tool_choice})


@pytest.fixture(scope="module")
def studio(clip_with_audio, profile) -> StudioState:
    report = inspect_file(str(clip_with_audio), profile, BUDGET, expected="video")
    return StudioState(settings=BUDGET, video_path=str(clip_with_audio), video=report)


@pytest.fixture(scope="module")
def session(engine, studio, settings):
    """The clip and a question, a tool call answered by the example tool, a final reply, another turn; rated."""
    one = _last(chat.send_message(engine, studio, new_session(), "weather in Paris?", settings)).session
    two = _last(chat.send_tool_results(engine, studio, one, settings, run_examples=True)).session
    three = _last(chat.send_message(engine, studio, two, "thanks", settings)).session
    rated = chat.note_reply(chat.rate_reply(chat.rate_reply(three, 1, "up"), 2, "down"), 2, "too short")
    assert rated.reply_count == 3 and len(rated.answers) == 3 and len(rated.reply_marks) == 3
    return rated


@pytest.fixture(scope="module")
def compared(session) -> CompareSession:
    """One compare round of the browser session (compare's own State), judged."""
    side = CompareSide("A", TurnSetting(BUDGET, SamplingSettings(temperature=0.0)), verdict="up")
    other = CompareSide("B", TurnSetting(replace(BUDGET, seq=4096), SamplingSettings()))
    round_ = CompareRound(question="weather?", media=session.media[:1], a=side, b=other, preset="half the budget",
                          preference="A")
    return CompareSession(session_id="compare-1", rounds=(round_,))


@pytest.fixture(scope="module")
def exported(fns, studio, session, compared, controls):
    zip_button, html_button, line = fns["export_session"].fn(studio, session, compared, *controls)
    assert zip_button.visible is True and html_button.visible is True
    return Path(zip_button.value["path"]), Path(html_button.value["path"]), line  # the buttons' files


def _imported(fns, path, into=None) -> dict:
    outputs = fns["import_session"].fn(into or new_session(), new_compare_session(), str(path))
    return dict(zip(IMPORT_OUTPUTS, outputs, strict=True))


def test_export_gives_the_zip_and_the_report_as_downloads(exported, fns, clip_with_audio):
    zip_path, html_path, line = exported
    assert zip_path.suffix == ".zip" and html_path.suffix == ".html" and zip_path.parent == html_path.parent
    assert "Exported 3 replies and 1 media file" in line and zip_path.name in line
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
        media = [n for n in names if n.startswith("media/")]
        assert "session.json" in names and "report.html" in names and len(media) == 1
        assert archive.read(media[0]) == clip_with_audio.read_bytes()  # the file as uploaded
        recorded = json.loads(archive.read("session.json"))
    assert [r["verdict"] for r in recorded["transcript"]["ratings"]] == ["up", "down"]
    assert recorded["chat"]["system_prompt"] == "Be brief." and recorded["budget"]["k_mode"] == "whole"
    assert [r["preference"] for r in recorded["compare"]] == ["A"]  # compare's rounds are in the record
    page = html_path.read_text(encoding="utf-8")
    assert "too short" in page and "<script" not in page.lower()
    outputs = fns["export_session"].outputs
    assert [getattr(b, "elem_id", None) for b in outputs] == ["export-zip", "export-html", "record-status"]
    for block, path in zip(outputs[:2], (zip_path, html_path), strict=True):
        assert Path(block.postprocess(str(path)).path).read_bytes() == path.read_bytes()


def test_import_restores_the_conversation_ratings_settings_and_panels(exported, fns, session, clip_with_audio):
    zip_path, _, _ = exported
    into = new_session()
    out = _imported(fns, zip_path, into)
    restored = out["session"]
    assert restored.session_id == into.session_id  # this browser session's, not the exported one's
    assert restored.ratings == (ReplyRating(1, "up", ""), ReplyRating(2, "down", "too short"))
    assert [a.text for a in restored.answers] == [a.text for a in session.answers]
    assert [a.finish_reason for a in restored.answers] == ["tool_calls", "stop", "stop"]
    assert restored.reply_marks == session.reply_marks and restored.regen_mark == session.regen_mark
    assert [m["role"] for m in restored.messages] == [m["role"] for m in session.messages]
    assert out["chatbot"] == list(restored.display) and len(out["chatbot"]) == len(session.display)
    assert out["tool_panel"][0][:3] == ["get_weather", '{"city": "Paris"}', "✓ answered"]
    assert out["reply_picker"].value == 2 and len(out["reply_picker"].choices) == 3
    assert out["rating_note"] == "too short"  # the latest reply's note, in the note box
    (round_,) = out["compare_session"].rounds
    assert (round_.preference, round_.preset, round_.a.verdict) == ("A", "half the budget", "up")
    assert out["compare_rounds"].startswith("1 round(s) in this session · 1 rated")
    assert "Imported" in out["record_status"] and "3 replies (2 rated)" in out["record_status"]
    # the panel gets the clip as uploaded, at the path Gradio gives that upload: the conversation names the same
    video = out["video"]
    assert filecmp.cmp(video, clip_with_audio, shallow=False) and restored.media[0].path == video
    assert restored.messages[0]["content"][0]["video_url"]["url"] == video
    assert (out["images"], out["audio_file"], out["audio_mic"]) == (None, None, None)  # panels it did not use: cleared
    budget = {name: out[name] for name in layout.BudgetControls.names()}
    assert budget == {"seq": SEQ, "reserve_auto": False, "reserve": 1024, "max_new_tokens": 256, "audio_cap": 0.5,
                      "k_mode": "whole"}
    assert (out["system_prompt"], out["temperature"], out["top_k"], out["seed"], out["max_tokens"]) == \
        ("Be brief.", 0.2, 20, 7, 256)
    assert json.loads(out["tools_json"]) == EXAMPLE_TOOLS
    for block, value in zip(fns["import_session"].outputs,
                            fns["import_session"].fn(new_session(), new_compare_session(), str(zip_path)), strict=True):
        if not isinstance(block, gr.State) and not (isinstance(value, dict) and value.get("__type__")) \
                and not isinstance(value, gr.components.Component):
            block.postprocess(value)  # every value is one its component shows


def test_after_import_the_chat_goes_on_and_regenerates_from_any_reply(exported, fns, engine, double, profile,
                                                                      settings):
    restored = _imported(fns, exported[0])["session"]
    video = restored.media[0].path
    # the panel shows the imported clip (inspected again): it was sent already, so it is not attached again
    studio = StudioState(settings=BUDGET, video_path=video,
                         video=inspect_file(video, profile, BUDGET, expected="video"))
    assert new_media(studio, restored) == []
    again = _last(chat.regenerate_from(engine, studio, restored, 1, settings)).session
    assert [m["role"] for m in again.messages] == ["user", "assistant", "tool", "assistant"]
    assert again.messages[-1]["content"] == "It is 21 °C in Paris." and again.ratings == ()
    sent = double.renderer.calls[-1]["prompt_extras"]["multi_modal_data"]
    assert list(sent) == ["video"] and len(sent["video"]) == 1  # the imported clip went to the engine, once
    on = _last(chat.send_message(engine, studio, restored, "and tomorrow?", settings)).session
    assert on.reply_count == 4 and on.ratings == restored.ratings and on.media == restored.media


def test_a_bad_file_says_so_in_one_line_and_changes_nothing(fns, tmp_path, session):
    not_zip = tmp_path / "notes.zip"
    not_zip.write_text("not a zip at all")
    slip = tmp_path / "slip.zip"
    with zipfile.ZipFile(slip, "w") as archive:
        archive.writestr("../../evil.txt", "x")
        archive.writestr("session.json", "{}")
    for path, reason in ((not_zip, "notes.zip is not a zip file"), (slip, "points outside its folder")):
        with pytest.warns(UserWarning, match="Not imported"):  # the toast (a warning outside a live page)
            out = _imported(fns, path, session)
        line = out.pop("record_status")
        assert line.startswith("⚠ Not imported:") and reason in line and "\n" not in line
        assert all(value == gr.skip() for value in out.values())  # the conversation and the panels are kept
    assert not (tmp_path.parent / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    assert fns["import_session"].fn(session, new_compare_session(), None) == tuple(gr.skip() for _ in IMPORT_OUTPUTS)


def test_a_session_whose_file_is_gone_is_not_exported(fns, profile, session, controls, tmp_path, clip_with_audio):
    compared = new_compare_session()
    gone = tmp_path / "gone.mp4"
    gone.write_bytes(clip_with_audio.read_bytes())
    report = inspect_file(str(gone), profile, BUDGET, expected="video")
    studio = StudioState(settings=BUDGET, video_path=str(gone), video=report)
    gone.unlink()
    with pytest.warns(UserWarning, match="no longer on the server"):
        zip_button, html_button, line = fns["export_session"].fn(studio, session, compared, *controls)
    assert zip_button.visible is False and html_button.visible is False
    assert line.startswith("⚠ Not exported: gone.mp4 is no longer on the server")


def test_import_of_a_record_whose_bubbles_do_not_match_says_regenerate_from_is_off(exported, tmp_path, session):
    """A record edited by hand (a bubble less): the conversation comes in, replies are not regenerated one by one."""
    zip_path, _, _ = exported
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(zip_path) as source, zipfile.ZipFile(edited, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "session.json":
                recorded = json.loads(data)
                recorded["transcript"]["display"] = recorded["transcript"]["display"][:-1]
                data = json.dumps(recorded).encode()
            target.writestr(item, data)
    imported = session_files.import_session(edited, new_session(), dest_dir=tmp_path / "imports")
    assert imported.session.reply_marks == () and imported.session.reply_count == 3
    assert "cannot be regenerated one by one" in imported.summary
    assert "There is no reply 1" in chat.reply_missing(imported.session, 0) or "No reply" in chat.reply_missing(
        imported.session, 0)
    assert replace(imported.session, display=(), reply_marks=()).ratings == session.ratings
