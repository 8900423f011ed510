"""Helpers for the bad-input corpus (tests only): odd media files, a session-aware engine double,
and the checks every case shares (a clear message, the session's earlier state kept).

Media are made with ``support.media_factory`` / PIL / numpy / the ``wave`` module and Debian FFmpeg
(no downloads). The engine double is the tests' ``ScriptedAsyncLLM`` (real vLLM ``RequestOutput``
objects behind the real ``InProcessEngine``) with three additions a corpus needs:

* every reply names the session it was generated for (``[<session id>] ...``, read from vLLM's
  request id), so an answer that reaches the wrong session is visible;
* the renderer counts prompt tokens from the text (about 4 characters a token), and ``generate``
  refuses a prompt longer than ``max_model_len`` with vLLM's own ``VLLMValidationError`` and
  message — what vLLM's input processor raises for a 1 MB prompt;
* a user message containing ``FAIL_MIDSTREAM`` makes the engine raise after two deltas, one
  containing ``CALL_TOOL`` gets a Dots call of the example ``get_weather`` tool.
"""

from __future__ import annotations

import contextlib
import html
import json
import shutil
import struct
import subprocess
import wave
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from PIL import Image

from support import media_factory
from support.doubles import RecordingRenderer, ScriptedAsyncLLM
from support.media_factory import png_claiming

# A message is not "clear" when it shows any of these (a traceback, a bare class name, a repr).
UNCLEAR_MARKERS = ("Traceback", "KeyError", "IndexError", "TypeError", "AttributeError", "RuntimeError",
                   "ValueError", "OSError", "NoneType", "Exception:", "<_io.", " object at 0x", "File \"")
MIDSTREAM_MARKER = "FAIL_MIDSTREAM"
TOOL_MARKER = "CALL_TOOL"  # a user message containing it gets a Dots call of the example get_weather tool
TOOL_CALL_XML = (" <dots_function_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
                 "</invoke>\n</dots_function_call>")
CHARS_PER_TOKEN = 4


def assert_clear(message: str | None, mentions: Iterable[str]) -> None:
    """``message`` is a non-empty human sentence that names what is wrong (any of ``mentions``).

    Markdown messages escape HTML (``&quot;``): they are read as the user sees them.
    """
    assert message and message.strip(), "no message at all"
    message = html.unescape(message)
    for marker in UNCLEAR_MARKERS:
        assert marker not in message, f"{marker!r} in {message!r}"
    low = message.lower()
    wanted = list(mentions)
    assert not wanted or any(m.lower() in low for m in wanted), f"{message!r} mentions none of {wanted}"


# ---------------------------------------------------------------- media


def write_pcm_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """16-bit PCM WAV of ``samples`` (float in [-1, 1], shape (n,) or (n, channels))."""
    data = np.asarray(samples, dtype=np.float32)
    channels = 1 if data.ndim == 1 else data.shape[1]
    pcm = (np.clip(data, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def write_float_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """Mono 32-bit float WAV (``WAVE_FORMAT_IEEE_FLOAT``), which can carry NaN samples."""
    body = np.asarray(samples, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    riff = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body
    path.write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    return path


def _tone(seconds: float, rate: int, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def build_media(root: Path) -> dict[str, Path]:
    """Write every file the corpus uploads under ``root``; keys are short names used by the cases."""
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def put(name: str, data: bytes) -> Path:
        files[name] = root / name
        files[name].write_bytes(data)
        return files[name]

    # ---- video
    clip = media_factory.make_video(root / "clip.mp4", seconds=2, width=160, height=120, fps=8, audio_rate=16000)
    files["clip.mp4"] = clip
    files["clip_b.mp4"] = media_factory.make_video(root / "clip_b.mp4", seconds=1, width=96, height=64, fps=4,
                                                   audio_rate=None)
    unicode_clip = root / "clip ünïcödé 日本 (1).mp4"
    shutil.copy(clip, unicode_clip)
    files["unicode.mp4"] = unicode_clip
    data = clip.read_bytes()
    put("zero.mp4", b"")
    put("half.mp4", data[: len(data) // 2])
    put("corrupt.mp4", data[:32] + np.random.default_rng(1).bytes(len(data) - 32))
    put("notes.mp4", b"this is a note, not a video\n" * 8)
    put("random.mkv", np.random.default_rng(0).bytes(4000))
    audio_only = media_factory.make_audio(root / "audio_only.m4a", seconds=1.0)
    shutil.copy(audio_only, root / "audio_only.mp4")
    files["audio_only.mp4"] = root / "audio_only.mp4"
    (root / "subs.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-i", str(root / "subs.srt"), str(root / "subs_only.mkv")],
                   check=True)
    files["subs_only.mkv"] = root / "subs_only.mkv"
    # ---- images
    photo = media_factory.make_image(root / "photo.png", width=128, height=96)
    files["photo.png"] = photo
    shutil.copy(photo, root / "photo_named.mp4")
    files["photo_named.mp4"] = root / "photo_named.mp4"
    shutil.copy(photo, root / "photo_named.wav")
    files["photo_named.wav"] = root / "photo_named.wav"
    unicode_photo = root / "фото 写真 \u200f(עברית).png"
    shutil.copy(photo, unicode_photo)
    files["unicode.png"] = unicode_photo
    files["one_pixel.png"] = media_factory.make_image(root / "one_pixel.png", width=1, height=1)
    files["wide.png"] = media_factory.make_image(root / "wide.png", width=6000, height=12)
    files["tall.png"] = media_factory.make_image(root / "tall.png", width=10, height=3000)
    files["cmyk.jpg"] = media_factory.make_image(root / "cmyk.jpg", width=100, height=80, mode="CMYK")
    files["gray16.png"] = media_factory.make_image(root / "gray16.png", width=100, height=80, mode="I;16")
    files["gray.png"] = media_factory.make_image(root / "gray.png", width=100, height=80, mode="L")
    files["rgba.png"] = media_factory.make_image(root / "rgba.png", width=100, height=80, mode="RGBA")
    frames = [Image.new("RGB", (64, 48), (60 * i, 0, 0)) for i in range(3)]
    frames[0].save(root / "anim.gif", save_all=True, append_images=frames[1:], duration=100)
    files["anim.gif"] = root / "anim.gif"
    big = media_factory.make_image(root / "big.png", width=600, height=500).read_bytes()
    put("truncated.png", big[: len(big) // 2])
    put("zero.png", b"")
    put("notes.png", b"not an image at all\n" * 8)
    put("bomb.png", png_claiming(100_000, 100_000))
    # ---- audio
    files["tone.wav"] = write_pcm_wav(root / "tone.wav", _tone(1.0, 16000), 16000)
    files["silent.wav"] = write_pcm_wav(root / "silent.wav", np.zeros(16000, np.float32), 16000)
    files["empty.wav"] = write_pcm_wav(root / "empty.wav", np.zeros(0, np.float32), 16000)
    nan = _tone(1.0, 16000)
    nan[::7] = np.nan
    files["nan.wav"] = write_float_wav(root / "nan.wav", nan, 16000)
    files["rate8k.wav"] = write_pcm_wav(root / "rate8k.wav", _tone(1.0, 8000), 8000)
    files["rate96k.wav"] = write_pcm_wav(root / "rate96k.wav", _tone(1.0, 96000), 96000)
    files["ch8.wav"] = write_pcm_wav(root / "ch8.wav", np.tile(_tone(1.0, 16000)[:, None], (1, 8)), 16000)
    files["short.wav"] = write_pcm_wav(root / "short.wav", _tone(0.03, 16000), 16000)
    put("notes.wav", b"RIFF? no, just text\n" * 8)
    tone = files["tone.wav"].read_bytes()
    put("truncated.wav", tone[: len(tone) // 3])
    return files


# ---------------------------------------------------------------- engine double
def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class CountingRenderer(RecordingRenderer):
    """A recording renderer whose prompt length grows with the conversation's text."""

    def prompt_length(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        """16 + the conversation's text and the tools' JSON at ``CHARS_PER_TOKEN`` characters a token."""
        chars = sum(len(_message_text(m)) for m in conversation) + (len(json.dumps(tools)) if tools else 0)
        return 16 + chars // CHARS_PER_TOKEN

    async def render_chat_async(self, conversations, chat_params, tok_params, *, prompt_extras=None):
        _, (engine_input,) = await super().render_chat_async(conversations, chat_params, tok_params,
                                                             prompt_extras=prompt_extras)
        tools = (chat_params.chat_template_kwargs or {}).get("tools")
        extra = self.prompt_length(conversations[0], tools) - len(engine_input["prompt_token_ids"])
        engine_input["prompt_token_ids"] = [1] * max(0, extra) + engine_input["prompt_token_ids"]
        for placeholder in engine_input["mm_placeholders"]["image"]:
            placeholder.offset += max(0, extra)
        return [[]], [engine_input]


def session_of(request_id: str) -> str:
    """The session id in an engine request id (``new_request_id``: ``<session>-<hex>``)."""
    return request_id.rsplit("-", 1)[0]


class SessionEchoLLM(ScriptedAsyncLLM):
    """Answers ``[<session id>] echo: <start of the last user text>``; see the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self._reply, **kwargs)
        self.renderer = CountingRenderer()

    @staticmethod
    def _reply(engine_input: dict[str, Any]) -> list[str]:
        conversation = engine_input["conversation"]
        last = conversation[-1]
        tag = f"[{engine_input['session']}]"
        if last["role"] == "tool":
            return [tag, " tool said", f" {last['content'][:40]}"]
        text = _message_text(last)
        if TOOL_MARKER in text:
            return [tag, " checking.", TOOL_CALL_XML]
        return [tag, " echo:", f" {text[:24]}"]

    async def generate(self, engine_input, sampling_params, request_id):
        from vllm.exceptions import VLLMValidationError

        length = len(engine_input["prompt_token_ids"])
        limit = self.model_config.max_model_len
        if length > limit:  # what vLLM's input processor raises, word for word
            self.generated.append((engine_input, sampling_params, request_id))
            raise VLLMValidationError(
                f"The decoder prompt (length {length}) is longer than the maximum model length of {limit}. "
                "Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal "
                "tokens. For image inputs, the number of image tokens depends on the number of images, and "
                "possibly their aspect ratios as well.")
        fail = MIDSTREAM_MARKER in _message_text(engine_input["conversation"][-1])
        stream = super().generate({**engine_input, "session": session_of(request_id)}, sampling_params, request_id)
        async with contextlib.aclosing(stream):
            step = 0
            async for output in stream:
                if fail and step == 2:
                    raise RuntimeError("CUDA error: an illegal memory access was encountered")
                step += 1
                yield output


def stub_args(max_num_seqs: int = 4, max_model_len: int = 32768) -> SimpleNamespace:
    """The engine args ``InProcessEngine`` reads (no real model)."""
    return SimpleNamespace(model="corpus-double", mm_processor_cache_gb=0, max_model_len=max_model_len,
                           max_num_seqs=max_num_seqs)
