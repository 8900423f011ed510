"""Build the one-click example files in ``assets/examples/`` (all made here: no downloads).

    python -m scripts.build_examples [--out DIR]      # from the repository root

What it writes (the UI's rows and prompts are in ``dots3_demo/ui/examples.py``):

* ``room_clip.mp4`` — 8 s, 426×240, 10 fps H.264 + 16 kHz mono AAC. The picture shows a door
  with a "ROOM 3" sign, a bouncing ball and a running clock; the sound track (espeak-ng) says a
  password the picture never shows, so an answer naming it proves the model heard the track.
* ``rain_chart.png`` — a matplotlib bar chart with value labels (a checkable answer).
* ``shapes.png`` — coloured shapes to count (red circles next to a red square and a blue circle).
* ``spoken_question.wav``, ``shapes_question.wav`` — espeak-ng questions, 16 kHz mono 16-bit.
* ``tools.json`` — the studio's example tools (OpenAI function schemas).
* ``README.md`` — provenance, what each file shows and says, the suggested prompts.

Reproducibility: every input is fixed (no randomness, no clock), PNG metadata is stripped and the
encoders run single-threaded with FFmpeg's ``bitexact`` flags, so a rerun with the same
espeak-ng, PyAV (its bundled FFmpeg/x264), matplotlib and Pillow versions writes the same bytes.
Other versions may change bytes (speech timing by a few ms, encoder output) but not content;
``tests/examples`` checks the content.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_OUT = ROOT / "assets" / "examples"
SAMPLE_RATE = 16000
ESPEAK_VOICE = "en-us"
ESPEAK_WPM = 150

# The video: picture and sound deliberately disagree in what they tell.
VIDEO_SECONDS = 8
VIDEO_FPS = 10
VIDEO_SIZE = (426, 240)
ROOM_SIGN = "ROOM 3"
# (start second, text) of each utterance in the clip's sound track
VIDEO_SPEECH: tuple[tuple[float, str], ...] = (
    (0.8, "The password is blue falcon."),
    (4.4, "Once more: blue falcon."),
)

SPOKEN_QUESTION = "How many days are there in a leap year?"
SHAPES_QUESTION = "How many red circles are in the picture?"

RAIN_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun")
RAIN_MM = (42, 67, 31, 88, 55, 23)

# (kind, colour, centre x, centre y, size) on a 480×320 canvas
SHAPES: tuple[tuple[str, str, int, int, int], ...] = (
    ("circle", "red", 80, 90, 34),
    ("circle", "red", 250, 70, 30),
    ("circle", "red", 390, 230, 36),
    ("square", "red", 170, 220, 30),
    ("circle", "blue", 300, 190, 30),
    ("square", "blue", 400, 80, 28),
    ("square", "blue", 70, 240, 26),
    ("triangle", "green", 220, 150, 34),
)
COLOURS = {"red": (214, 39, 40), "blue": (31, 119, 180), "green": (44, 160, 44)}


@dataclass(frozen=True)
class Built:
    """One written file and a line about it (printed, and used by the README)."""

    path: Path
    what: str


# ---------------------------------------------------------------- helpers
def font(size: int, *, bold: bool = False, mono: bool = False) -> ImageFont.FreeTypeFont:
    """DejaVu from matplotlib's own data folder: the same glyphs on every machine with matplotlib."""
    import matplotlib

    name = "DejaVuSansMono" if mono else "DejaVuSans"
    name += "-Bold" if bold else ""
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / f"{name}.ttf"), size)


def speak(text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng, as float32 mono at ``SAMPLE_RATE``."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", ESPEAK_VOICE, "-s", str(ESPEAK_WPM), "-w", str(raw), text],
                       check=True, capture_output=True)
        with wave.open(str(raw), "rb") as w:
            rate, channels = w.getframerate(), w.getnchannels()
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, channels)
    return resample(pcm[:, 0].astype(np.float32) / 32768.0, rate, SAMPLE_RATE)


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Resample mono float32 with FFmpeg's swresample (deterministic)."""
    if rate == target:
        return samples.astype(np.float32)
    resampler = av.AudioResampler(format="flt", layout="mono", rate=target)
    frame = av.AudioFrame.from_ndarray(samples.astype(np.float32)[None, :], format="flt", layout="mono")
    frame.sample_rate = rate
    frame.pts = 0
    frame.time_base = Fraction(1, rate)
    out = [f.to_ndarray().reshape(-1) for f in (*resampler.resample(frame), *resampler.resample(None))]
    return np.concatenate(out).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray, rate: int = SAMPLE_RATE) -> Path:
    """16-bit mono PCM WAV, peak-normalised to -3 dBFS, with 0.25 s of silence either side."""
    pad = np.zeros(int(0.25 * rate), np.float32)
    peak = float(np.max(np.abs(samples))) or 1.0
    data = np.concatenate([pad, samples * (0.7 / peak), pad])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(data, -1, 1) * 32767).round().astype("<i2").tobytes())
    return path


def save_png(image: Image.Image, path: Path) -> Path:
    """An optimised RGB PNG without metadata (RGB, not a palette: the inspector would note a
    palette image's transparency handling, which these images do not need)."""
    image.convert("RGB").save(path, format="PNG", optimize=True)
    return path


# ---------------------------------------------------------------- images
def build_chart(path: Path) -> Built:
    """A labelled bar chart: the tallest bar and its value are printed on the chart."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = fig.add_subplot()
    colours = ["#1f77b4"] * len(RAIN_MM)
    bars = ax.bar(RAIN_MONTHS, RAIN_MM, color=colours, edgecolor="#16405f", width=0.65)
    ax.bar_label(bars, labels=[f"{v} mm" for v in RAIN_MM], padding=3, fontsize=11)
    ax.set_title("Monthly rainfall in Harbor Town, 2023", fontsize=14, pad=10)
    ax.set_ylabel("rainfall (mm)", fontsize=11)
    ax.set_ylim(0, 100)
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=11)
    fig.tight_layout()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "chart.png"
        fig.savefig(raw, format="png", metadata={"Software": None})
        with Image.open(raw) as im:
            save_png(im.convert("RGB"), path)
    return Built(path, f"bar chart, {len(RAIN_MM)} months, tallest {RAIN_MONTHS[int(np.argmax(RAIN_MM))]} "
                       f"{max(RAIN_MM)} mm")


def build_shapes(path: Path) -> Built:
    """Shapes to count, drawn at 4× and downsampled (smooth edges, still deterministic)."""
    scale, (w, h) = 4, (480, 320)
    canvas = Image.new("RGB", (w * scale, h * scale), (246, 242, 232))
    draw = ImageDraw.Draw(canvas)
    for kind, colour, cx, cy, r in SHAPES:
        x0, y0, x1, y1 = ((cx - r) * scale, (cy - r) * scale, (cx + r) * scale, (cy + r) * scale)
        fill = COLOURS[colour]
        if kind == "circle":
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif kind == "square":
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.polygon([(cx * scale, y0), (x1, y1), (x0, y1)], fill=fill)
    image = canvas.resize((w, h), Image.Resampling.LANCZOS)
    save_png(image, path)
    counts = {(c, k): sum(1 for s in SHAPES if s[:2] == (k, c)) for k, c, *_ in SHAPES}
    return Built(path, "shapes: " + ", ".join(f"{n} {c} {k}{'s' if n > 1 else ''}" for (c, k), n in counts.items()))


# ---------------------------------------------------------------- video
def video_frame(index: int) -> np.ndarray:
    """Frame ``index``: a wall, a door with the room sign, a bouncing ball, a clock."""
    w, h = VIDEO_SIZE
    t = index / VIDEO_FPS
    image = Image.new("RGB", (w, h), (70, 112, 120))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 190, w, h), fill=(120, 96, 72))  # floor
    draw.rectangle((140, 40, 286, 190), fill=(110, 66, 36), outline=(60, 36, 20), width=3)  # door
    draw.ellipse((262, 112, 272, 122), fill=(222, 190, 80))  # handle
    draw.rectangle((152, 56, 274, 100), fill=(250, 250, 245), outline=(30, 30, 30), width=2)  # sign
    draw.text((213, 78), ROOM_SIGN, font=font(23, bold=True), fill=(15, 15, 15), anchor="mm")
    # a ball bouncing along the floor, left to right and back
    phase = (t / VIDEO_SECONDS) * 2
    x = 20 + (w - 40) * (phase if phase <= 1 else 2 - phase)
    y = 205 - 40 * abs(np.sin(np.pi * t * 1.5))
    draw.ellipse((x - 12, y - 12, x + 12, y + 12), fill=(245, 200, 40), outline=(120, 90, 0), width=2)
    draw.rectangle((6, 6, 92, 32), fill=(20, 20, 20))
    draw.text((12, 10), f"{t:4.1f} s", font=font(17, mono=True), fill=(240, 240, 240))
    return np.asarray(image)


def video_sound_track() -> np.ndarray:
    """The clip's sound track: the utterances placed at their start times, float32 at ``SAMPLE_RATE``."""
    track = np.zeros(VIDEO_SECONDS * SAMPLE_RATE, np.float32)
    for start, text in VIDEO_SPEECH:
        speech = speak(text)
        speech *= 0.6 / (float(np.max(np.abs(speech))) or 1.0)
        at = int(start * SAMPLE_RATE)
        if at + len(speech) > len(track):
            raise ValueError(f"utterance {text!r} does not fit in the clip")
        track[at:at + len(speech)] += speech
    return track


def build_video(path: Path) -> Built:
    """H.264 (yuv420p, CRF 30, single-threaded) + AAC 16 kHz mono in MP4, muxed bit-exactly."""
    w, h = VIDEO_SIZE
    track = video_sound_track()
    with av.open(str(path), mode="w", format="mp4",
                 container_options={"fflags": "+bitexact", "movflags": "+faststart"}) as out:
        vstream = out.add_stream("libx264", rate=VIDEO_FPS)
        vstream.width, vstream.height, vstream.pix_fmt = w, h, "yuv420p"
        vstream.options = {"preset": "slow", "crf": "30", "threads": "1", "flags": "+bitexact",
                           "x264-params": "keyint=50:min-keyint=10"}
        astream = out.add_stream("aac", rate=SAMPLE_RATE)
        astream.layout = "mono"
        astream.bit_rate = 32000
        astream.options = {"flags": "+bitexact", "threads": "1"}
        for i in range(VIDEO_SECONDS * VIDEO_FPS):
            frame = av.VideoFrame.from_ndarray(video_frame(i), format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, VIDEO_FPS)
            out.mux(vstream.encode(frame))
        out.mux(vstream.encode(None))
        chunk = 1024
        for start in range(0, len(track), chunk):
            af = av.AudioFrame.from_ndarray(track[None, start:start + chunk], format="fltp", layout="mono")
            af.sample_rate, af.pts, af.time_base = SAMPLE_RATE, start, Fraction(1, SAMPLE_RATE)
            out.mux(astream.encode(af))
        out.mux(astream.encode(None))
    said = " / ".join(f"{s:.1f} s: “{text}”" for s, text in VIDEO_SPEECH)
    return Built(path, f"{VIDEO_SECONDS} s {w}×{h} {VIDEO_FPS} fps; picture: door sign “{ROOM_SIGN}”, "
                       f"a bouncing ball, a clock; sound track (espeak-ng): {said}")


# ---------------------------------------------------------------- audio, tools, README
def build_speech(path: Path, text: str) -> Built:
    write_wav(path, speak(text))
    with wave.open(str(path), "rb") as w:
        seconds = w.getnframes() / w.getframerate()
    return Built(path, f"{seconds:.1f} s, espeak-ng {ESPEAK_VOICE}: “{text}”")


def build_tools(path: Path) -> Built:
    from dots3_demo.tools import EXAMPLE_TOOLS

    path.write_text(json.dumps(EXAMPLE_TOOLS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    names = ", ".join(t["function"]["name"] for t in EXAMPLE_TOOLS)
    return Built(path, f"the studio's example tools ({names}) as OpenAI function schemas")


def toolchain() -> str:
    """The versions the bytes depend on, e.g. ``espeak-ng 1.51, PyAV 18.1.0, matplotlib 3.11.2, Pillow 12.3.0``."""
    import matplotlib
    import PIL

    out = subprocess.run(["espeak-ng", "--version"], check=True, capture_output=True, text=True).stdout
    words = out.split(":", 1)[-1].split()  # "eSpeak NG text-to-speech: 1.51  Data at: …"
    espeak = words[0] if words else "unknown"
    return f"espeak-ng {espeak}, PyAV {av.__version__}, matplotlib {matplotlib.__version__}, Pillow {PIL.__version__}"


def readme(built: list[Built]) -> str:
    """``assets/examples/README.md``: provenance, each file, the UI's example rows and prompts."""
    from dots3_demo.ui.examples import studio_examples

    files = "\n".join(f"| `{b.path.name}` | {b.path.stat().st_size / 1024:.0f} KB | {b.what} |" for b in built)
    rows = "\n".join(
        f"| {e.label} | {', '.join(f'`{n}`' for n in e.files())} | {e.prompt} | {e.expected} |"
        for e in studio_examples()
    )
    return f"""# Example files

Made by `scripts/build_examples.py` (`python -m scripts.build_examples` from the repository root;
rerun it to rebuild them; `--out DIR` writes elsewhere). Nothing here is downloaded or recorded:
the pictures are drawn with Pillow and matplotlib (text in the DejaVu fonts matplotlib ships), the
voices are espeak-ng's `{ESPEAK_VOICE}` voice, the video is encoded with PyAV (x264 + FFmpeg's AAC).
Dedicated to the public domain (CC0 1.0), like everything generated by this project's scripts.

| file | size | what it shows / says |
|---|---:|---|
{files}

The video's picture never shows the password: only a model that hears the sound track can
name it.

## In the studio

The **Examples** row above the panels loads one example per click: it fills the upload panels
(and clears the ones it does not use — vLLM refuses a video together with images or audio),
puts the suggested prompt in the chat box and, for the tools example, the tools into the tools
editor. The panels then run the same inspection as an upload.

| example | files | suggested prompt | a correct answer |
|---|---|---|---|
{rows}

Rebuilding writes the same bytes with the same tool versions; other versions may change the
bytes (speech timing by a few milliseconds, encoder output) but not the content.
Built with: {toolchain()}.
"""


def build_all(out: Path) -> list[Built]:
    """Write every example file into ``out`` (created if needed); return what was written."""
    out.mkdir(parents=True, exist_ok=True)
    built = [
        build_video(out / "room_clip.mp4"),
        build_chart(out / "rain_chart.png"),
        build_shapes(out / "shapes.png"),
        build_speech(out / "spoken_question.wav", SPOKEN_QUESTION),
        build_speech(out / "shapes_question.wav", SHAPES_QUESTION),
        build_tools(out / "tools.json"),
    ]
    (out / "README.md").write_text(readme(built), encoding="utf-8")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.build_examples", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    built = build_all(args.out)
    total = sum(b.path.stat().st_size for b in built) + (args.out / "README.md").stat().st_size
    for b in built:
        print(f"{b.path.stat().st_size / 1024:7.1f} KB  {b.path.name}: {b.what}")
    print(f"{total / 1024:7.1f} KB  total in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
