"""The bad-input corpus: every panel's plain handler fed bad or extreme input.

Each case runs on session A, which already has a successful history (a video, an image and an
audio clip inspected; or a chat turn answered), while session B chats on the same engine at the
same time (B has an image attached, so its media load in a worker thread like A's inspection).
For every case:

* the message is clear (``corpus.assert_clear``: not empty, no traceback or bare class name, and it
  names what is wrong);
* A's earlier state is kept: a refused input leaves the state object itself (inspection) or the
  conversation the model sees (chat) unchanged, an accepted one changes only its own panel;
* B is unaffected: its reply is complete and tagged with its own session id, its history intact,
  and nothing is left running in the engine (every request finished or was aborted).

The chat cases use ``corpus.SessionEchoLLM`` (the tests' scripted vLLM double behind the real
``InProcessEngine``). Case ids carry a running number: ``pytest --collect-only -q`` counts them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dots3_demo.core.settings import ChatSettings, chat_settings_from_controls, video_settings_from_controls
from dots3_demo.core.state import ChatSession, initial_state, new_session
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.tools import EXAMPLE_TOOLS
from dots3_demo.ui import chat, chat_views, handlers
from dots3_demo.ui.handlers import StudioState
from support.uploads import Page, Shown
from tests.hardening import corpus

SEQ = 32768
T = TypeVar("T")
SETTINGS = ChatSettings(min_interval_s=0.0, tools_json=json.dumps(EXAMPLE_TOOLS))
OTHER_FIRST, OTHER_SECOND = "first from B", "still there?"


# ---------------------------------------------------------------- shared setup
@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every corpus file, plus a path that does not exist and a directory."""
    root = tmp_path_factory.mktemp("corpus")
    files = corpus.build_media(root)
    files["<missing>"] = root / "gone" / "nothing here.mp4"
    files["<directory>"] = root
    return files


def _ok(outcome: Shown) -> StudioState:
    assert outcome.error is None, outcome.error
    return outcome.state


@pytest.fixture(scope="module")
def studios(profile, media, tmp_path_factory: pytest.TempPathFactory) -> dict[str, StudioState]:
    """Studio states the cases start from, each built by uploads run as the page runs them."""
    empty = initial_state(SEQ)
    video = _ok(Page(profile, empty).video(str(media["clip.mp4"])))
    full_page = Page(profile, video)  # the image, then the audio clip, on the video's page
    _ok(full_page.images([str(media["photo.png"])]))
    full = _ok(full_page.audio(str(media["tone.wav"])))
    image = _ok(Page(profile, empty).images([str(media["photo.png"])]))
    vanished_path = tmp_path_factory.mktemp("vanished") / "deleted after upload.png"
    shutil.copy(media["photo.png"], vanished_path)
    vanished = _ok(Page(profile, empty).images([str(vanished_path)]))
    vanished_path.unlink()  # Gradio's cache was cleaned between the upload and the message
    return {
        "plain": empty,
        "full": full,  # session A of the inspection cases: video + image + audio
        "video": video,
        "video_b": _ok(Page(profile, empty).video(str(media["clip_b.mp4"]))),
        "video_image": _ok(Page(profile, video).images([str(media["photo.png"])])),
        "video_audio": _ok(Page(profile, video).audio(str(media["tone.wav"]))),
        "nine_images": _ok(Page(profile, empty).images([str(media["photo.png"])] * 9)),
        "image": image,  # session B
        "vanished": vanished,
    }


@dataclass
class World:
    """One case's engine (fresh per case) and the shared media and studio states."""

    media: dict[str, Path]
    studios: dict[str, StudioState]
    profile: Any
    llm: corpus.SessionEchoLLM = field(default_factory=corpus.SessionEchoLLM)
    engine: InProcessEngine = field(init=False)

    def __post_init__(self) -> None:
        self.engine = InProcessEngine(corpus.stub_args(), engine_factory=lambda args: self.llm)


async def _collect(views: AsyncIterator[chat.ChatView]) -> list[chat.ChatView]:
    return [view async for view in views]


async def _final(views: AsyncIterator[chat.ChatView]) -> chat.ChatView:
    collected = await _collect(views)
    assert collected, "the event yielded nothing"
    return collected[-1]


def _assistant_texts(session: ChatSession) -> list[str]:
    return [m["content"] for m in session.messages if m["role"] == "assistant"]


async def alongside_other_session(world: World, action: Callable[[], Awaitable[T]]) -> T:
    """Run session A's ``action`` while session B (an image attached) sends a message on the same
    engine; check B's answer and history, and that the engine holds no open request afterwards."""
    studio_b = world.studios["image"]
    before = (await _final(chat.send_message(world.engine, studio_b, new_session(), OTHER_FIRST,
                                             SETTINGS))).session
    result, views_b = await asyncio.gather(
        action(), _collect(chat.send_message(world.engine, studio_b, before, OTHER_SECOND, SETTINGS)))
    after = views_b[-1].session
    assert views_b[-1].done and "finish `stop`" in views_b[-1].figures
    assert after.messages[: len(before.messages)] == before.messages
    assert after.display[: len(before.display)] == before.display
    assert _assistant_texts(after)[-1] == f"[{before.session_id}] echo: {OTHER_SECOND}"
    assert all(text.startswith(f"[{before.session_id}]") for text in _assistant_texts(after))
    assert not world.engine.active_requests
    requests = {request_id for _, _, request_id in world.llm.generated}
    assert requests <= set(world.llm.closed_streams) | set(world.llm.aborted), "an engine request was left open"
    return result


def _numbered(cases: list[Any], start: int) -> list[Any]:
    """``pytest.param``s with ids numbered across the whole corpus (``start`` = this group's first)."""
    return [pytest.param(case, id=f"{number:03d}-{case.id}") for number, case in enumerate(cases, start=start)]


# ---------------------------------------------------------------- upload panels
@dataclass(frozen=True)
class FileCase:
    id: str
    panel: str  # "video" | "images" | "audio" | "microphone"
    files: tuple[str, ...]  # keys of the ``media`` fixture
    verdict: str  # "refused" | "accepted" | "partial" (some images kept, the others reported)
    mentions: tuple[str, ...]


FILE_CASES = [
    FileCase("video-zero-byte", "video", ("zero.mp4",), "refused", ("empty (0 bytes)",)),
    FileCase("video-truncated", "video", ("half.mp4",), "refused", ("truncated",)),
    FileCase("video-corrupt", "video", ("corrupt.mp4",), "refused", ("corrupt",)),
    FileCase("video-text-named-mp4", "video", ("notes.mp4",), "refused", ("text file",)),
    FileCase("video-random-bytes-mkv", "video", ("random.mkv",), "refused", ("not a media file",)),
    FileCase("video-audio-only-mp4", "video", ("audio_only.mp4",), "refused", ("no video stream",)),
    FileCase("video-subtitles-only-mkv", "video", ("subs_only.mkv",), "refused", ("no audio or video stream",)),
    FileCase("video-png-named-mp4", "video", ("photo_named.mp4",), "refused", ("image, not video",)),
    FileCase("video-animated-gif", "video", ("anim.gif",), "refused", ("not video",)),
    FileCase("video-missing-path", "video", ("<missing>",), "refused", ("no such file",)),
    FileCase("video-directory-path", "video", ("<directory>",), "refused", ("not a regular file",)),
    FileCase("video-unicode-space-name", "video", ("unicode.mp4",), "accepted", ("ünïcödé 日本 (1).mp4",)),
    FileCase("image-1x1", "images", ("one_pixel.png",), "refused", ("at least 7 px",)),
    FileCase("image-aspect-500-to-1", "images", ("wide.png",), "refused", ("aspect ratio",)),
    FileCase("image-aspect-1-to-300", "images", ("tall.png",), "refused", ("aspect ratio",)),
    FileCase("image-truncated-png", "images", ("truncated.png",), "refused", ("truncated",)),
    FileCase("image-zero-byte", "images", ("zero.png",), "refused", ("empty (0 bytes)",)),
    FileCase("image-text-named-png", "images", ("notes.png",), "refused", ("text file",)),
    FileCase("image-decompression-bomb", "images", ("bomb.png",), "refused", ("megapixels",)),
    FileCase("image-video-in-image-panel", "images", ("clip.mp4",), "refused", ("use the video panel",)),
    FileCase("image-missing-path", "images", ("<missing>",), "refused", ("no such file",)),
    FileCase("image-directory-path", "images", ("<directory>",), "refused", ("not a regular file",)),
    FileCase("image-animated-gif", "images", ("anim.gif",), "accepted", ("only the first frame",)),
    FileCase("image-cmyk-jpeg", "images", ("cmyk.jpg",), "accepted", ("CMYK",)),
    FileCase("image-16-bit-png", "images", ("gray16.png",), "accepted", ("16/32-bit",)),
    FileCase("image-grayscale", "images", ("gray.png",), "accepted", ("100×80 L",)),
    FileCase("image-alpha", "images", ("rgba.png",), "accepted", ("transparency",)),
    FileCase("image-unicode-rtl-name", "images", ("unicode.png",), "accepted", ("фото 写真",)),
    FileCase("image-good-and-bad", "images", ("photo.png", "notes.png"), "partial", ("notes.png", "text file")),
    FileCase("image-nine-over-limit", "images", ("photo.png",) * 9, "accepted", ("8 images per prompt",)),
    FileCase("audio-zero-length-wav", "audio", ("empty.wav",), "refused", ("zero length",)),
    FileCase("audio-nan-samples", "audio", ("nan.wav",), "refused", ("NaN",)),
    FileCase("audio-text-named-wav", "audio", ("notes.wav",), "refused", ("text file",)),
    FileCase("audio-truncated-wav", "audio", ("truncated.wav",), "refused", ("corrupted",)),
    FileCase("audio-png-named-wav", "audio", ("photo_named.wav",), "refused", ("image, not audio",)),
    FileCase("audio-video-in-audio-panel", "audio", ("clip.mp4",), "refused", ("use the video panel",)),
    FileCase("audio-missing-path", "audio", ("<missing>",), "refused", ("no such file",)),
    FileCase("audio-silent", "audio", ("silent.wav",), "accepted", ("1.00 s",)),
    FileCase("audio-8-khz", "audio", ("rate8k.wav",), "accepted", ("resampled 8000 Hz",)),
    FileCase("audio-96-khz", "audio", ("rate96k.wav",), "accepted", ("resampled 96000 Hz",)),
    FileCase("audio-8-channels", "audio", ("ch8.wav",), "accepted", ("8 channels mixed down",)),
    FileCase("microphone-30-ms", "microphone", ("short.wav",), "accepted", ("shorter than one audio token",)),
]

# The studio fields each panel owns; an accepted upload may change only its own.
OWNED = {"video": {"video", "video_path", "settings"}, "images": {"images"},
         "audio": {"audio", "audio_path", "audio_source"}, "microphone": {"audio", "audio_path", "audio_source"}}
STUDIO_FIELDS = ("settings", "video_path", "video", "images", "audio_path", "audio", "audio_source")


def _upload(profile, state: StudioState, case: FileCase, media: dict[str, Path]) -> Shown:
    paths = [str(media[name]) for name in case.files]
    page = Page(profile, state)
    if case.panel == "video":
        return page.video(paths[0], state.settings)
    if case.panel == "images":
        return page.images(paths)
    return page.audio(paths[0], "microphone" if case.panel == "microphone" else "file")


def _shown_text(outcome: Shown) -> str:
    """The status line and every text view the event sets (where notes about the file appear)."""
    texts = [outcome.status] + [v for v in outcome.views.values() if isinstance(v, str)]
    return "\n".join(texts)


def _assert_only_own_panel_changed(before: StudioState, after: StudioState, owned: set[str]) -> None:
    for name in STUDIO_FIELDS:
        if name not in owned:
            assert getattr(after, name) is getattr(before, name), f"{name} changed"


@pytest.mark.parametrize("case", _numbered(FILE_CASES, 1))
def test_upload(case: FileCase, media, studios, profile):
    world = World(media, studios, profile)
    before = studios["full"]
    outcome = asyncio.run(alongside_other_session(
        world, lambda: asyncio.to_thread(_upload, profile, before, case, media)))
    if case.verdict == "refused":
        corpus.assert_clear(outcome.error, case.mentions)
        corpus.assert_clear(outcome.status, ())
        assert "⚠" in outcome.status
        assert outcome.state is before and outcome.views == {}  # every panel keeps its result
    elif case.verdict == "partial":
        corpus.assert_clear(outcome.error, case.mentions)
        assert [Path(p).name for p, _ in outcome.state.images] == [case.files[0]]
        _assert_only_own_panel_changed(before, outcome.state, OWNED[case.panel])
    else:
        assert outcome.error is None
        corpus.assert_clear(_shown_text(outcome), case.mentions)
        _assert_only_own_panel_changed(before, outcome.state, OWNED[case.panel])
    # session B's next inspection is what it would have been without A's bad input
    again = Page(profile, studios["plain"]).images([str(media["photo.png"])])
    assert again.error is None and again.state.images[0][1].tokens == studios["image"].images[0][1].tokens


# ---------------------------------------------------------------- budget controls
@dataclass(frozen=True)
class SettingsCase:
    id: str
    controls: tuple[Any, ...]  # seq, reserve auto, reserve, max new tokens, audio cap, k_mode
    verdict: str  # "refused" | "accepted"
    mentions: tuple[str, ...]


NAN, INF = float("nan"), float("inf")
SETTINGS_CASES = [
    SettingsCase("seq-min", (handlers.SEQ_MIN, True, 0, 0, 1.0, "eval_ek"), "accepted", ("seq 1,024",)),
    SettingsCase("seq-max", (handlers.SEQ_MAX, True, 0, 0, 1.0, "eval_ek"), "accepted", ("seq 131,072",)),
    SettingsCase("seq-zero", (0, True, 0, 0, 1.0, "eval_ek"), "refused", ("seq must be positive",)),
    SettingsCase("seq-negative", (-4096, True, 0, 0, 1.0, "eval_ek"), "refused", ("seq must be positive",)),
    SettingsCase("seq-nan", (NAN, True, 0, 0, 1.0, "eval_ek"), "refused", ("seq is not a number",)),
    SettingsCase("seq-none", (None, True, 0, 0, 1.0, "eval_ek"), "refused", ("seq is empty",)),
    SettingsCase("seq-infinite", (INF, True, 0, 0, 1.0, "eval_ek"), "refused", ("seq is not a number",)),
    SettingsCase("seq-text", ("lots", True, 0, 0, 1.0, "eval_ek"), "refused", ("seq is not a number",)),
    SettingsCase("reserve-above-seq", (4096, False, 8192, 0, 1.0, "eval_ek"), "refused", ("leaves no room",)),
    SettingsCase("reserve-negative", (4096, False, -64, 0, 1.0, "eval_ek"), "refused", ("reserve must be",)),
    SettingsCase("reserve-empty", (4096, False, None, 0, 1.0, "eval_ek"), "refused", ("output reserve is empty",)),
    SettingsCase("reserve-zero", (8192, False, 0, 0, 1.0, "eval_ek"), "accepted", ("seq 8,192",)),
    SettingsCase("max-new-above-seq", (4096, True, 0, 8192, 1.0, "eval_ek"), "refused", ("leaves no room",)),
    SettingsCase("max-new-nan", (4096, True, 0, NAN, 1.0, "eval_ek"), "refused", ("max new tokens is not a number",)),
    SettingsCase("audio-cap-zero", (SEQ, True, 0, 0, 0.0, "eval_ek"), "accepted", ("audio_cap is 0",)),
    SettingsCase("audio-cap-one", (SEQ, True, 0, 0, 1.0, "eval_ek"), "accepted", ("1 audio segments",)),
    SettingsCase("audio-cap-negative", (SEQ, True, 0, 0, -0.5, "eval_ek"), "refused", ("audio cap must be",)),
    SettingsCase("audio-cap-nan", (SEQ, True, 0, 0, NAN, "eval_ek"), "refused", ("audio cap is not a number",)),
    SettingsCase("audio-cap-none", (SEQ, True, 0, 0, None, "eval_ek"), "refused", ("audio cap is empty",)),
    SettingsCase("k-mode-unknown", (SEQ, True, 0, 0, 1.0, "bogus"), "refused", ("k_mode must be one of",)),
]


@pytest.mark.parametrize("case", _numbered(SETTINGS_CASES, 1 + len(FILE_CASES)))
def test_budget_controls(case: SettingsCase, media, studios, profile):
    world = World(media, studios, profile)
    before = studios["full"]

    def move_slider() -> Shown:
        return Page(profile, before).settings(video_settings_from_controls(*case.controls))

    outcome = asyncio.run(alongside_other_session(world, lambda: asyncio.to_thread(move_slider)))
    if case.verdict == "refused":
        corpus.assert_clear(outcome.error, case.mentions)
        corpus.assert_clear(outcome.status, ())
        assert outcome.state is before and outcome.views == {}
    else:
        assert outcome.error is None
        corpus.assert_clear(_shown_text(outcome), case.mentions)
        assert outcome.state.video.solver.seq == outcome.state.settings.seq == int(case.controls[0])
        _assert_only_own_panel_changed(before, outcome.state, OWNED["video"])
    # a video uploaded with the same controls is refused for the same reason, or inspected
    settings = video_settings_from_controls(*case.controls)
    upload = Page(profile, before).video(str(media["clip.mp4"]), settings)
    assert (upload.error is None) == (case.verdict == "accepted")


# ---------------------------------------------------------------- tools JSON
@dataclass(frozen=True)
class ToolsCase:
    id: str
    text: str
    mentions: tuple[str, ...]


def _tool(**function: Any) -> dict[str, Any]:
    return {"type": "function", "function": function}


def _props(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


TOOLS_CASES = [
    ToolsCase("not-json", "[{name: get_weather}", ("not valid JSON",)),
    ToolsCase("not-a-list-number", "42", ("must be a JSON array, got number",)),
    ToolsCase("not-a-list-null", "null", ("must be a JSON array, got null",)),
    ToolsCase("not-a-list-string", '"get_weather"', ("must be a JSON array, got string",)),
    ToolsCase("tool-is-array", "[[1, 2]]", ("must be an object, got array",)),
    ToolsCase("missing-name", json.dumps([_tool(description="no name")]), ("name is missing",)),
    ToolsCase("name-not-string", json.dumps([_tool(name=7)]), ("name must be a string, got number",)),
    ToolsCase("name-with-spaces", json.dumps([_tool(name="get weather")]), ("letters, digits",)),
    ToolsCase("type-not-function", json.dumps([{"type": "retrieval"}]), ('type must be "function"',)),
    ToolsCase("parameters-string", json.dumps([_tool(name="a", parameters="city")]), ("parameters must be",)),
    ToolsCase("parameters-type-array", json.dumps([_tool(name="a", parameters={"type": "array"})]),
              ("parameters.type must be",)),
    ToolsCase("properties-list", json.dumps([_tool(name="a", parameters={"type": "object", "properties": []})]),
              ("properties must be an object",)),
    ToolsCase("property-unknown-type", json.dumps([_tool(name="a", parameters=_props(n={"type": "float"}))]),
              ("unknown type",)),
    ToolsCase("property-not-schema", json.dumps([_tool(name="a", parameters=_props(n="number"))]),
              ("must be a schema object",)),
    ToolsCase("required-not-list", json.dumps([_tool(name="a", parameters={**_props(n={"type": "number"}),
                                                                       "required": "n"})]),
              ("required must be a list",)),
    ToolsCase("required-unknown", json.dumps([_tool(name="a", parameters={**_props(), "required": ["city"]})]),
              ("required names no property",)),
    ToolsCase("duplicate-names", json.dumps([_tool(name="a"), _tool(name="a")]), ("duplicate tool name",)),
    ToolsCase("description-number", json.dumps([_tool(name="a", description=5)]), ("description must be",)),
    ToolsCase("unknown-field", json.dumps([_tool(name="a", returns={"type": "string"})]), ("unknown function field",)),
    ToolsCase("nested-100k-deep", "[" * 100_000 + "]" * 100_000, ("nested too deeply",)),
    ToolsCase("integer-5000-digits", '[{"name": "a", "parameters": {"type": "object", "properties": {"n": '
              '{"type": "number", "default": ' + "9" * 5000 + "}}}}]", ("cannot be read",)),
    ToolsCase("nan-constant", '[{"name": "a", "parameters": {"type": "object", "properties": {"n": '
              '{"type": "number", "default": NaN}}}}]', ("NaN",)),
]


@pytest.mark.parametrize("case", _numbered(TOOLS_CASES, 1 + len(FILE_CASES) + len(SETTINGS_CASES)))
def test_tools_json(case: ToolsCase, media, studios, profile):
    status = chat_views.validate_tools_md(case.text)
    assert status.startswith("⚠")
    corpus.assert_clear(status, case.mentions)

    async def main() -> tuple[ChatSession, chat.ChatView]:
        world = World(media, studios, profile)
        before = (await _final(chat.send_message(world.engine, studios["plain"], new_session(), "hello",
                                                 SETTINGS))).session
        settings = replace(SETTINGS, tools_json=case.text)
        final = await alongside_other_session(world, lambda: _final(chat.send_message(
            world.engine, studios["plain"], before, "use a tool", settings)))
        assert len(world.llm.generated) == 3  # A's first turn and B's two: the bad tools never reached it
        return before, final

    before, final = asyncio.run(main())
    _assert_refused(before, final, ("tools JSON is not usable",) + case.mentions)


def test_tools_status_line_stays_short():
    tools = [_tool(name=f"tool_{i}", description="d" * 100) for i in range(2000)]
    status = chat_views.validate_tools_md(json.dumps(tools))
    assert status.startswith("✓ 2000 tool(s)") and "… and 1,988 more" in status and len(status) < 400


# ---------------------------------------------------------------- chat
@dataclass(frozen=True)
class ChatCase:
    id: str
    verdict: str  # "refused" | "answered" | "failed" (the engine broke after some text)
    mentions: tuple[str, ...]
    act: Callable[[World, ChatSession], AsyncIterator[chat.ChatView]]
    setup: tuple[str, ...] = ("hello",)  # user messages that build A's history first
    setup_studio: str = "plain"
    tolerate: tuple[str, ...] = ()  # markers accepted in this message (see the case)


def _send(text: str, studio: str = "plain", **settings: Any):
    def act(world: World, session: ChatSession) -> AsyncIterator[chat.ChatView]:
        return chat.send_message(world.engine, world.studios[studio], session, text, replace(SETTINGS, **settings))
    return act


def _send_broken_engine(world: World, session: ChatSession) -> AsyncIterator[chat.ChatView]:
    def no_gpu(args: Any) -> Any:
        raise RuntimeError("CUDA out of memory while loading the weights")

    broken = InProcessEngine(corpus.stub_args(), engine_factory=no_gpu)
    return chat.send_message(broken, world.studios["plain"], session, "hello?", SETTINGS)


def _tool_result(result: str | None, run_examples: bool = False):
    def act(world: World, session: ChatSession) -> AsyncIterator[chat.ChatView]:
        return chat.send_tool_results(world.engine, world.studios["plain"], session, SETTINGS, result=result,
                                      run_examples=run_examples)
    return act


def _regenerate(world: World, session: ChatSession) -> AsyncIterator[chat.ChatView]:
    return chat.regenerate(world.engine, world.studios["plain"], session, SETTINGS)


def _with_controls(**changes: Any):
    """Send "hello" with the chat controls as the UI passes them, some of them replaced."""
    controls = dict(system_prompt="", tools_json="", temperature=0.7, top_p=0.95, top_k=-1, max_tokens=256,
                    seed=-1, repetition_penalty=1.0)

    def act(world: World, session: ChatSession) -> AsyncIterator[chat.ChatView]:
        settings = chat_settings_from_controls(**{**controls, **changes}, min_interval_s=0.0)
        return chat.send_message(world.engine, world.studios["plain"], session, "hello", settings)
    return act


CONTROL_TEXT = "bell\x07 nul\x00 esc\x1b[31m red\x1b[0m bidi\u202e override\u202c zero\u200bwidth\r\nend"
EMOJI_RTL = "مرحبا 👋🏽 שלום 👩‍👩‍👧 ‏עברית‎ 🇫🇷"
HUGE_TOOLS = json.dumps([_tool(name=f"tool_{i}", description="d" * 100) for i in range(2000)])
CHAT_CASES = [
    ChatCase("empty-message", "refused", ("type a message",), _send("")),
    ChatCase("whitespace-only", "refused", ("type a message",), _send(" \n\t\u3000 ")),
    ChatCase("prompt-100-kB", "answered", (), _send("x" * 100_000)),
    ChatCase("prompt-1-MB", "refused", ("longer than the maximum model length", "not added"), _send("y" * 1_000_000)),
    ChatCase("control-characters", "answered", (), _send(CONTROL_TEXT)),
    ChatCase("emoji-rtl", "answered", (), _send(EMOJI_RTL)),
    ChatCase("two-videos", "refused", ("one video per request",), _send("and this one?", "video_b"),
             setup_studio="video"),
    ChatCase("video-and-image", "refused", ("cannot mix a video",), _send("compare", "video_image")),
    ChatCase("video-and-audio", "refused", ("cannot mix a video",), _send("compare", "video_audio")),
    ChatCase("nine-images", "refused", ("at most 8 image",), _send("all of them", "nine_images")),
    ChatCase("upload-deleted-before-send", "refused", ("cannot read", "deleted after upload.png"),
             _send("what is this?", "vanished")),
    ChatCase("engine-fails-mid-stream", "failed", ("illegal memory access", "Regenerate"),
             _send(f"please {corpus.MIDSTREAM_MARKER}")),
    # InProcessEngine.start keeps the class name in its status ("RuntimeError: CUDA out of …"),
    # after a sentence that says what happened: tolerated here.
    ChatCase("engine-cannot-start", "refused", ("engine is not available", "CUDA out of memory"),
             _send_broken_engine, tolerate=("RuntimeError",)),
    ChatCase("tools-2000-too-long-for-context", "refused", ("longer than the maximum model length",),
             _send("use a tool", tools_json=HUGE_TOOLS)),
    ChatCase("tool-result-none-waiting", "refused", ("no tool call is waiting",), _tool_result('{"temp": 21}')),
    ChatCase("run-tool-none-waiting", "refused", ("no tool call is waiting",), _tool_result(None, True)),
    ChatCase("tool-result-empty", "refused", ("type the result of `get_weather`",), _tool_result("  \n "),
             setup=(corpus.TOOL_MARKER,)),
    ChatCase("tool-result-not-json", "answered", (), _tool_result("{sunny, 21 °C"), setup=(corpus.TOOL_MARKER,)),
    ChatCase("regenerate-empty-history", "refused", ("nothing to regenerate",), _regenerate, setup=()),
    ChatCase("max-tokens-empty", "refused", ("max tokens is empty",), _with_controls(max_tokens=None)),
    ChatCase("temperature-nan", "refused", ("temperature is not a number",), _with_controls(temperature=NAN)),
    ChatCase("temperature-none", "refused", ("temperature is empty",), _with_controls(temperature=None)),
    ChatCase("seed-nan", "refused", ("seed is not a number",), _with_controls(seed=NAN)),
    ChatCase("top-k-infinite", "refused", ("top-k is not a number",), _with_controls(top_k=INF)),
]


def _message_of(before: ChatSession, final: chat.ChatView) -> str:
    """What the user reads: the figures line and any bubble the event added after the history."""
    added = [str(m["content"]) for m in final.session.display[len(before.display):] if m["role"] == "assistant"]
    return "\n".join([final.figures, *added[-1:]])


def _assert_refused(before: ChatSession, final: chat.ChatView, mentions: tuple[str, ...],
                    tolerate: tuple[str, ...] = ()) -> None:
    assert final.done
    message = _message_of(before, final)
    for marker in tolerate:
        message = message.replace(marker, "")
    corpus.assert_clear(message, ())
    for mention in mentions:  # every one of them, not just any
        corpus.assert_clear(message, (mention,))
    session = final.session
    assert session.messages == before.messages, "the conversation the model sees changed"
    assert (session.media, session.tools, session.regen_mark) == (before.media, before.tools, before.regen_mark)
    assert session.display[: len(before.display)] == before.display


@pytest.mark.parametrize("case", _numbered(CHAT_CASES, 1 + len(FILE_CASES) + len(SETTINGS_CASES) + len(TOOLS_CASES)))
def test_chat(case: ChatCase, media, studios, profile):
    async def main() -> tuple[ChatSession, chat.ChatView, World]:
        world = World(media, studios, profile)
        before = new_session()
        for text in case.setup:
            before = (await _final(chat.send_message(world.engine, studios[case.setup_studio], before, text,
                                                     SETTINGS))).session
        final = await alongside_other_session(world, lambda: _final(case.act(world, before)))
        return before, final, world

    before, final, world = asyncio.run(main())
    session = final.session
    if case.verdict == "refused":
        _assert_refused(before, final, case.mentions, case.tolerate)
        return
    assert final.done
    assert session.messages[: len(before.messages)] == before.messages
    assert session.display[: len(before.display)] == before.display
    replies = _assistant_texts(session)[len(_assistant_texts(before)):]
    assert replies and all(r.startswith(f"[{session.session_id}]") for r in replies)  # its own answer only
    if case.verdict == "failed":
        corpus.assert_clear(_message_of(before, final), case.mentions)
        for mention in case.mentions:
            corpus.assert_clear(_message_of(before, final), (mention,))
        assert "echo" in replies[-1]  # the text that arrived before the error is kept
        return
    assert "finish `stop`" in final.figures
    sent = [engine_input["conversation"] for engine_input, _, request_id in world.llm.generated
            if corpus.session_of(request_id) == session.session_id][-1]  # A's last request, not B's
    user = [m for m in sent if m["role"] in ("user", "tool")][-1]
    text = user["content"] if user["role"] == "tool" else user["content"][-1]["text"]
    asked = session.messages[len(before.messages)]
    expected = asked["content"] if asked["role"] == "tool" else asked["content"][-1]["text"]
    assert text == expected  # the engine got the text exactly as typed (nothing stripped inside)


def test_corpus_has_at_least_40_cases():
    assert len(FILE_CASES) + len(SETTINGS_CASES) + len(TOOLS_CASES) + len(CHAT_CASES) >= 40
    ids = [c.id for c in FILE_CASES + SETTINGS_CASES + TOOLS_CASES + CHAT_CASES]
    assert len(ids) == len(set(ids))
