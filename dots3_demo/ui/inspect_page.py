"""The inspect slice: the upload panels and what the model sees (frames, Budget, Interleave, image grids, audio
mel), laid out (``render_*``) and wired (``setup_inspection_events``, ``setup_glance_events``) side by side, the way
Gradio's ``ChatInterface`` keeps ``_render_*`` next to ``_setup_events``. The work is ``handlers``' (plain
functions over vLLM's preprocessing); what the panels show is ``views``' and ``figures``'.

Callbacks are module-level functions bound to the profile and engine with ``functools.partial``; they turn a
handler's result into component updates (``gr.skip()`` for outputs left alone) and raise the ``gr.Warning`` toast
for errors.
"""

from __future__ import annotations

import io
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gradio as gr
import numpy as np
from gradio import processing_utils
from gradio.events import Dependency
from gradio.utils import get_upload_folder
from PIL import Image

from dots3_demo.core.settings import video_settings_from_controls
from dots3_demo.core.state import StudioState
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.session import Job, Workers
from dots3_demo.inspection.video import K_MODES, FrameInfo, FramesReady, Progress, SampledFrames, VideoSettings
from dots3_demo.profiles import Profile
from dots3_demo.ui import handlers, layout, views
from dots3_demo.ui.early_videos import EarlyVideo, EarlyVideos
from dots3_demo.ui.handlers import Inspections
from dots3_demo.ui.layout import Listen, Options

if TYPE_CHECKING:
    pass


def render_uploads(initial: Mapping[str, Any], *, mode: layout.Mode = "preview",
                   summary: gr.HTML | None = None) -> layout.UploadPanels:
    """The upload panels and the status line; the summary under them unless ``summary`` is given (made with
    ``render=False``: the work layout shows it in its glance)."""
    video = gr.Video(label="Video (one per prompt)", sources=["upload"], height=layout.VIDEO_HEIGHT[mode],
                     elem_id="video-input")
    images = gr.File(label="Images (up to 8)", file_count="multiple", file_types=["image"], elem_id="images-input",
                     height=64 if mode == "work" else None)
    with gr.Tabs(elem_id="audio-tabs"):
        with gr.Tab("Audio file", id="audio-file-tab", elem_id="audio-file-tab"):
            audio_file = gr.Audio(sources=["upload"], type="filepath", show_label=False, elem_id="audio-input")
        with gr.Tab("Microphone", id="audio-mic-tab", elem_id="audio-mic-tab"):
            audio_mic = gr.Audio(sources=["microphone"], type="filepath", show_label=False, elem_id="audio-mic")
    status = gr.Markdown("Upload media to see what the model sees.", elem_id="status")
    if summary is None:
        summary = render_summary(initial)
    return layout.UploadPanels(video=video, images=images, audio_file=audio_file, audio_mic=audio_mic, status=status,
                        summary=summary)


def render_summary(initial: Mapping[str, Any], *, render: bool = True) -> gr.HTML:
    """Tokens by modality against the budget (``views.summary_html``)."""
    return gr.HTML(initial["summary"], elem_id="summary", render=render)


def render_frame_strip(initial: Mapping[str, Any], *, visible: bool = True) -> gr.HTML:
    """The frames vLLM samples, small, with their timestamps and tokens (``views.frame_strip_html``)."""
    return gr.HTML(initial["frame_strip"], elem_id="frame-strip", visible=visible)


def render_glance(initial: Mapping[str, Any], summary: gr.HTML) -> layout.Glance:
    """What the model sees, at a glance (work layout): a place for the examples, the frame strip (each frame
    vLLM samples, its timestamp and tokens; with nothing uploaded, what appears here), ``summary`` (tokens by
    modality; made with ``render=False``) and one link per detail tab."""
    with gr.Column(elem_id="glance", elem_classes=["d3-glance"]):
        examples = gr.Column(elem_id="examples-slot")
        strip = render_frame_strip(initial)
        summary.render()
        with gr.Row(elem_id="glance-links", elem_classes=["d3-links"]):
            links = {tab: gr.Button(f"{label} ↓", size="sm", variant="secondary", elem_id=f"goto-{tab}",
                                    min_width=60)
                     for tab, label in layout.DETAIL_TABS.items()}
    return layout.Glance(examples=examples, strip=strip, summary=summary, links=links)


def _plot(value: Any, elem_id: str) -> gr.Plot:
    return gr.Plot(value, show_label=False, format="png", elem_id=elem_id, elem_classes=["d3-plot"])


def _render_budget_tab(initial: Mapping[str, Any], seq: int) -> tuple[layout.BudgetControls, dict[str, Any]]:
    with gr.Row():
        seq_slider = gr.Slider(min(handlers.SEQ_MIN, seq), max(handlers.SEQ_MAX, seq), value=seq,
                               step=handlers.SEQ_STEP, label="seq (context budget)", elem_id="seq-slider", scale=3)
        max_new = gr.Slider(0, handlers.MAX_NEW_TOKENS_MAX, value=0, step=64, label="max new tokens",
                            elem_id="max-new-slider", scale=2)
        k_mode = gr.Dropdown(list(K_MODES), value=K_MODES[0], label="k_mode (grouping)", elem_id="k-mode",
                             scale=1, min_width=120)
    with gr.Row():
        reserve = gr.Slider(0, max(handlers.SEQ_MAX, seq), value=initial["reserve"], step=64,
                            label="output reserve", interactive=False, elem_id="reserve-slider", scale=3)
        reserve_auto = gr.Checkbox(True, label="auto reserve (seq ÷ 4)", elem_id="reserve-auto", scale=1,
                                   min_width=120)
        audio_cap = gr.Slider(0, 1, value=1.0, step=0.05, label="audio cap (share of input)",
                              elem_id="audio-cap-slider", scale=2)
    outputs: dict[str, Any] = {"reserve": reserve, "budget_plot": _plot(initial["budget_plot"], "budget-plot")}
    with gr.Row():
        outputs["cost_plot"] = _plot(initial["cost_plot"], "cost-plot")
        outputs["fps_plot"] = _plot(initial["fps_plot"], "fps-plot")
    with gr.Accordion("Solver inputs and outputs", open=False, elem_id="solver-accordion"):
        outputs["solver_md"] = gr.Markdown(initial["solver_md"], elem_id="solver-md")
    budget = layout.BudgetControls(seq=seq_slider, reserve_auto=reserve_auto, reserve=reserve, max_new_tokens=max_new,
                            audio_cap=audio_cap, k_mode=k_mode)
    return budget, outputs


def render_model_views(initial: Mapping[str, Any], seq: int, summary: gr.HTML, strip: gr.HTML) -> layout.ModelViews:
    """The tabs that show what the model sees; ``summary`` and the frame ``strip`` (placed by the layout)
    are among their outputs."""
    outputs: dict[str, Any] = {"summary": summary, "frame_strip": strip}
    label = layout.DETAIL_TABS
    with gr.Tabs(elem_id="views") as tabs:
        with gr.Tab(label["frames"], id="frames", elem_id="tab-frames"):
            outputs["frames_info"] = gr.Markdown(initial["frames_info"], elem_id="frames-info")
            outputs["frames_gallery"] = gr.Gallery(
                value=initial["frames_gallery"], label=FRAMES_GALLERY_LABEL, columns=FRAMES_GALLERY_COLUMNS,
                height=FRAMES_GALLERY_HEIGHT, object_fit="contain", allow_preview=True, fit_columns=False,
                elem_id="frames-gallery")
        with gr.Tab(label["budget"], id="budget", elem_id="tab-budget"):
            budget, budget_outputs = _render_budget_tab(initial, seq)
            outputs.update(budget_outputs)
        with gr.Tab(label["interleave"], id="interleave", elem_id="tab-interleave"):
            outputs["timeline_plot"] = _plot(initial["timeline_plot"], "timeline-plot")
            outputs["stream_html"] = gr.HTML(initial["stream_html"], elem_id="stream-html")
            with gr.Row(equal_height=False):
                outputs["groups_df"] = gr.Dataframe(
                    value=initial["groups_df"], headers=views.GROUP_COLUMNS, interactive=False,
                    label="Groups (click a row to hear its audio)", max_height=260, elem_id="groups-df", scale=3)
                with gr.Column(scale=2, min_width=260):
                    outputs["segment_pick"] = gr.Dropdown(choices=[], value=None, label="Audio segment",
                                                          elem_id="segment-pick")
                    outputs["segment_audio"] = gr.Audio(label="What the model hears (16 kHz mono)",
                                                        interactive=False, elem_id="segment-audio")
        with gr.Tab(label["images"], id="images", elem_id="tab-images"):
            outputs["grid_info"] = gr.Markdown(initial["grid_info"], elem_id="grid-info")
            outputs["grid_gallery"] = gr.Gallery(
                value=initial["grid_gallery"], label="Patch and token grids", columns=3, height=440,
                object_fit="contain", elem_id="grid-gallery")
        with gr.Tab(label["mel"], id="mel", elem_id="tab-mel"):
            outputs["mel_plot"] = _plot(initial["mel_plot"], "mel-plot")
            with gr.Row(equal_height=False):
                outputs["mel_info"] = gr.Markdown(initial["mel_info"], elem_id="mel-info")
                outputs["heard_audio"] = gr.Audio(label="What the model hears (16 kHz mono)", interactive=False,
                                                  elem_id="heard-audio")
    missing = set(handlers.VIEW_KEYS) ^ set(outputs)
    if missing:  # every view the handlers fill has exactly one component
        raise RuntimeError(f"views and components disagree: {sorted(missing)}")
    return layout.ModelViews(tabs=tabs, budget=budget, outputs=outputs)


GALLERY_JPEG_QUALITY = 90

# The frames gallery: 4 columns, 500 px high. The page is at most 1560 px wide (style.CSS), where the gallery
# is ~1090 px wide: a column, and so the most a picture is shown at in the grid, is at most 264 px square.
FRAMES_GALLERY_COLUMNS = 4
FRAMES_GALLERY_HEIGHT = 500
FRAMES_GALLERY_CELL = 264  # px
GALLERY_PIXEL_RATIO = 2  # device pixels per CSS pixel a picture is made for (sharp on a HiDPI screen)
FRAMES_GALLERY_LABEL = ("Sampled frames, in vLLM's order (as the vision tower gets them; pictures at the "
                        "gallery's size, each frame's size above)")


def gallery_picture(picture: Image.Image) -> Image.Image:
    """``picture`` at the size the frames gallery shows it: shrunk by the largest whole factor that keeps
    its long side at least ``GALLERY_PIXEL_RATIO`` × a gallery column (a 1092×616 frame: 546×308), each
    pixel the mean of the ones it replaces (``Image.reduce``: ~1 ms for a 720p frame, a third of what
    encoding it whole took; the browser then fetches and decodes a quarter of the pixels)."""
    factor = max(picture.size) // (GALLERY_PIXEL_RATIO * FRAMES_GALLERY_CELL)
    return picture.reduce(factor) if factor > 1 else picture


# Run in the browser before the steps after an inspection: wait (at most 3 s) until the galleries'
# pictures on screen are loaded, so the server draws the figures after the frames are shown, not while
# the browser is fetching them (a gallery in a tab not shown is not waited for). Returns the step's
# inputs unchanged.
AFTER_THE_PICTURES_JS = """async (...inputs) => {
  const frame = () => new Promise(resolve => requestAnimationFrame(() => resolve()));
  await frame(); await frame();  // the event's outputs are in the page
  const loaded = () => [...document.querySelectorAll('#frames-gallery img, #grid-gallery img')]
    .filter(img => img.offsetParent !== null).every(img => img.complete);
  for (let waited = 0; waited < 3000 && !loaded(); waited += 25) {
    await new Promise(resolve => setTimeout(resolve, 25));
  }
  return inputs;
}"""


def pictures_folder() -> str:
    """Where the galleries' pictures are written (Gradio's upload folder; ``serving.pictures`` answers them there)."""
    return get_upload_folder()


def _jpeg_file(picture: Image.Image, name: str, subsampling: int) -> str:
    """``picture`` as a JPEG file in Gradio's cache (a folder named by its bytes' hash, as Gradio names
    them). A file already there is left alone: rewriting it would truncate it under a browser fetching
    it (seen as "Response content longer than Content-Length" when a video was inspected twice)."""
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, "JPEG", quality=GALLERY_JPEG_QUALITY, subsampling=subsampling)
    data = buffer.getvalue()
    path = Path(pictures_folder()) / processing_utils.hash_bytes(data) / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial_path = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}.part")
        partial_path.write_bytes(data)
        os.replace(partial_path, path)  # whole or not at all, for a reader at any moment
    return str(path.resolve())


def _jpeg_gallery(items: list[tuple[Any, str]], *, subsampling: int = 2,
                  fit: Callable[[Image.Image], Image.Image] | None = None, first: int = 0) -> list[tuple[Any, str]]:
    """A gallery's pictures as JPEG files in Gradio's cache (quality 90), encoded side by side; ``fit``
    sizes each picture for the gallery first.

    Handed PIL images, Gradio encodes each as WebP: ~60 ms for one 720p frame, 20 times JPEG's
    3 ms, and for a video's frames most of a visitor's wait from dropping the file to seeing them.
    vLLM gives the vision tower JPEG-decoded frames already (``_jpeg_roundtrip``: quality 85, 4:2:0
    chroma, ``subsampling=2``); drawn grids keep full colour resolution (``subsampling=0``). The files are named
    by their place in the gallery, ``first`` the place of ``items[0]``."""
    names = [f"picture_{index:03d}.jpg" for index in range(first, first + len(items))]
    pictures = [picture for picture, _ in items]

    def encode(picture: Any, name: str) -> Any:
        if not isinstance(picture, Image.Image):
            return picture
        return _jpeg_file(fit(picture) if fit is not None else picture, name, subsampling)

    with ThreadPoolExecutor(max_workers=4) as pool:  # PIL's reduce and JPEG encoder let go of the GIL
        files = list(pool.map(encode, pictures, names))
    return [(file, caption) for file, (_, caption) in zip(files, items, strict=True)]


def frames_gallery_files(items: list[tuple[Any, str]], first: int = 0) -> list[tuple[Any, str]]:
    """The frames gallery's value: each frame at the gallery's size (``gallery_picture``) as a JPEG file (``first``:
    the place of ``items[0]`` in the gallery)."""
    return _jpeg_gallery(items, subsampling=2, fit=gallery_picture, first=first)


def _value_for(key: str, value: Any) -> Any:
    if key == "segment_pick":
        return gr.Dropdown(choices=value["choices"], value=value["value"])
    if key == "frames_gallery":
        return frames_gallery_files(value)
    if key == "grid_gallery":
        return _jpeg_gallery(value, subsampling=0)
    return value


def _with_note(status: str, engine: ChatEngine | None) -> str:
    """The status line; with uploads, it says so when the engine takes no media (``handlers.media_note``)."""
    note = handlers.media_note(engine) if status != handlers.IDLE_STATUS else ""
    return f"{status}  \n{note}" if note else status


def _emit(panel: str, update: handlers.PanelUpdate | None, engine: ChatEngine | None = None,
          shown: _ShownFrames | None = None) -> tuple[Any, ...]:
    """``(state, status, *EVENT_KEYS[panel])`` for an inspection event of ``panel``; every one ``gr.skip()`` when
    a newer upload to the panel superseded it (its result never overwrites the newer one's). The frames gallery
    this event ``shown`` already is handed again as it was, not encoded twice."""
    keys = handlers.EVENT_KEYS[panel]
    if update is None:
        return (gr.skip(),) * (2 + len(keys))
    if stray := set(update.views) - set(keys):  # a view the event has no output for would be lost
        raise RuntimeError(f"the {panel} panel's event cannot show {sorted(stray)}")
    if update.error:
        gr.Warning(update.error, duration=8)

    def value(key: str) -> Any:
        if key == "frames_gallery" and shown is not None and shown.holds(update.views[key]):
            return shown.files
        return _value_for(key, update.views[key])

    updates = [value(key) if key in update.views else gr.skip() for key in keys]
    return (update.state, _with_note(update.status, engine), *updates)


FRAMES_SENT_WAIT_S = 30.0  # the most an inspection waits for its frames to be sent (a stalled event: go on)
FRAMES_STEP_S = 0.1  # while vLLM makes the frames, the page is sent the newest ones at most this often


class _ShownFrames:
    """The frames gallery an event has shown so far: the frames' pictures, and their files (each encoded once)."""

    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self.images: list[Image.Image] = []
        self.files: list[tuple[Any, str]] = []

    def show(self, frames: Sequence[FrameInfo]) -> tuple[Any, ...]:
        """The video event's outputs with the gallery of ``frames`` alone (the state, the status line and the
        reserve wait): the pictures shown already keep their files, the others are encoded."""
        kept = 0
        while kept < min(len(frames), len(self.images)) and frames[kept].image is self.images[kept]:
            kept += 1
        items = handlers.frames_gallery(self._profile, frames)
        self.files = ([(file, caption) for (file, _), (_, caption) in zip(self.files[:kept], items[:kept],
                                                                         strict=True)]
                      + frames_gallery_files(items[kept:], first=kept))
        self.images = [f.image for f in frames]
        return tuple(self.files if key == "frames_gallery" else gr.skip()
                     for key in ("state", "status", *handlers.EVENT_KEYS["video"]))

    def shows(self, frames: Sequence[FrameInfo]) -> bool:
        """Whether these very frames are shown."""
        return self._are([f.image for f in frames])

    def holds(self, gallery: list[tuple[Any, str]]) -> bool:
        """Whether ``gallery`` (a result's) shows these very frames."""
        return self._are([picture for picture, _ in gallery])

    def _are(self, pictures: Sequence[Any]) -> bool:
        return len(pictures) == len(self.images) and all(p is i for p, i in zip(pictures, self.images, strict=True))


class VideoRun:
    """One video inspection on a thread of its own, and the steps of the event that shows it (:meth:`steps`): the
    frames gallery alone as vLLM makes the frames (the newest ones at most every ``FRAMES_STEP_S``, and all of
    them the moment its call returns), then the event's outputs (``_emit``) once the inspection is done. It starts
    as the upload arrives when a worker is free then (``on_video_arrives``: the inspection's event comes a browser
    round trip later, 0.1 s and more on a busy page), else with its event.

    The frames wait for nothing else, and nothing else slows them: once its event is there, the inspection stops
    where vLLM's call returned until Gradio has sent all the frames (it resumes the event's generator after
    sending), then explains the budget and makes the other views while the browser fetches the pictures. Run side
    by side with the pictures' encoding and Gradio's sending, that Python work took the GIL from both and held the
    frames back (~0.1 s of ~0.5 s after vLLM's call, measured in Chromium; ``benchmarks/inspect_concurrency.py``).
    The worker is given back as vLLM's call returns: what is left is light.

    The thread touches nothing of Gradio: its progress reports travel with its steps, and the event reports them
    in its own context (where Gradio's progress bar finds the event). The frames come only from the panel's
    latest job (``handlers.inspect_video``)."""

    def __init__(self, workers: Workers) -> None:
        self._workers = workers
        self._steps: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._ahead: list[tuple[str, Any]] = []  # a step taken from the queue while gathering frames, not handled
        self._watched = threading.Event()  # the event that shows it is there
        self._sent = threading.Event()  # … and has sent all the frames (or is gone)
        self._holding = False

    def start(self, inspect: Callable[[FramesReady, Progress], handlers.PanelUpdate | None], *,
              worker: Literal["wait", "taken", "none"] = "wait") -> None:
        """Run ``inspect(frames_ready, progress)`` on a thread of its own, with a worker: ``"taken"`` when the caller
        has taken it already (``Workers.try_take``), ``"none"`` when the work is done elsewhere with a worker of its
        own (an ``EarlyVideo`` it replays); with ``"wait"`` the thread waits for one."""
        threading.Thread(target=self._run, args=(inspect, worker), name="inspection", daemon=True).start()

    def _run(self, inspect: Callable[[FramesReady, Progress], handlers.PanelUpdate | None], worker: str) -> None:
        if worker == "wait":
            self._workers.take()
        self._holding = worker != "none"
        try:
            self._steps.put(("done", inspect(self._frames_ready, self._progress)))
        except BaseException as exc:  # noqa: BLE001 - handed to the event, which raises it
            self._steps.put(("raised", exc))
        finally:
            self._give_back()

    def _give_back(self) -> None:  # on the run's own thread only
        if self._holding:
            self._holding = False
            self._workers.give_back()

    def _frames_ready(self, frames: SampledFrames) -> None:
        if frames.complete:
            self._give_back()  # vLLM's call has returned: another inspection may decode
        self._steps.put(("frames", frames))
        if frames.complete and self._watched.is_set():  # none waits for an event not there yet
            self._sent.wait(FRAMES_SENT_WAIT_S)

    def _progress(self, fraction: float, text: str) -> None:
        self._steps.put(("progress", (fraction, text)))

    def _next(self, timeout: float | None = None) -> tuple[str, Any] | None:
        """The next step, waiting for one at most ``timeout`` seconds (``None``: none came) or, without, as long as
        it takes."""
        if self._ahead:
            return self._ahead.pop()
        try:
            return self._steps.get(timeout=timeout)
        except queue.Empty:
            return None

    def _newest(self, frames: SampledFrames, until: float, progress: Progress | None) -> SampledFrames | None:
        """``frames``, or newer ones: those of the frames steps that come before ``until`` (``time.monotonic``),
        stopping at all of them (the progress reports are made on the way); ``None`` when the inspection ended
        before all of them came (superseded by a newer upload, most often: its frames must not land after the newer
        one's; the event's result, next, shows what the panel holds)."""
        while not frames.complete:
            step = self._next(timeout=max(0.0, until - time.monotonic()))
            if step is None:
                break
            kind, value = step
            if kind == "frames":
                frames = value
            elif kind == "progress":
                if progress is not None:
                    progress(*value)
            else:
                self._ahead.append(step)
                return None
        return frames

    def steps(self, profile: Profile, engine: ChatEngine | None, progress: Progress | None = None,
              ) -> Iterator[tuple[Any, ...]]:
        """The inspection event's steps (its outputs: ``_ShownFrames.show``'s, then ``_emit``'s); ``progress``
        gets the inspection's reports."""
        self._watched.set()
        try:
            shown, sent = None, -math.inf
            while True:
                step = self._next()
                assert step is not None  # waited for as long as it took
                kind, value = step
                if kind == "progress":
                    if progress is not None:
                        progress(*value)
                elif kind == "frames":
                    frames = self._newest(value, sent + FRAMES_STEP_S, progress)
                    if frames is None:
                        continue
                    shown = shown or _ShownFrames(profile)
                    if not shown.shows(frames.frames):  # the last one made came alone: sent already
                        yield shown.show(frames.frames)
                        sent = time.monotonic()
                    if frames.complete:
                        self._sent.set()
                else:
                    break
            if kind == "raised":
                raise value
            yield _emit("video", value, engine, shown)
        finally:
            self._sent.set()  # an event closed early (the tab went away) never holds its inspection


def _progress_adapter(progress: gr.Progress) -> Progress:
    def report(fraction: float, text: str) -> None:
        progress(fraction, desc=text)

    return report


# ``limits`` and ``workers`` (the app's ``Workers``) are keyword-only and bound with ``partial``: Gradio fills only
# positional parameters. The Budget parameters of on_video/on_settings/on_video_arrives are named and ordered as
# layout.BudgetControls' fields (Gradio passes an event's inputs in order; tests/ui/test_wiring.py checks the names
# agree).
# ``inspections`` is the visitor's InspectionSession (a gr.State): see setup_inspection_events.
def on_video(profile: Profile, inspections: Inspections, path: str | None, seq: float, reserve_auto: bool,
             reserve: float, max_new_tokens: float | str | None, audio_cap: float, k_mode: str,
             progress: gr.Progress = gr.Progress(), *, limits: UploadLimits = UploadLimits(),
             engine: ChatEngine | None = None, workers: Workers,
             early: EarlyVideos | None = None) -> Iterator[tuple[Any, ...]]:
    """The video panel's inspection event: it shows the inspection its upload began as it arrived
    (``on_video_arrives``) with these settings, or begins one — taking the one begun as the file's bytes came in
    when there is one (``early``: an API call has no arrival step); it changes nothing when a newer upload began
    meanwhile."""
    settings = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                               max_new_tokens=max_new_tokens, audio_cap=audio_cap, k_mode=k_mode)
    run, newer = inspections.take_started("video", path, settings)
    if newer:
        yield _emit("video", None, engine)
        return
    if run is None:
        run = VideoRun(workers)
        _start_video(run, profile, inspections, path, settings, limits=limits,
                     adopted=early.take(path, settings) if early is not None else None)
    yield from run.steps(profile, engine, _progress_adapter(progress))


def _start_video(run: VideoRun, profile: Profile, inspections: Inspections, path: str | None, settings: VideoSettings,
                 *, limits: UploadLimits, adopted: EarlyVideo | None, job: Job | None = None,
                 taken: bool = False) -> None:
    """Start ``run`` on the video panel's inspection of ``path`` with ``settings`` (as ``job``, begun as the upload
    arrived, when given): replaying ``adopted``, the inspection begun as the file's bytes came in, when there is one;
    else with a worker, ``taken`` already or waited for."""
    run.start(lambda shown, report: handlers.inspect_video(inspections, profile, path, settings, report,
                                                           limits=limits, frames_shown=shown, job=job,
                                                           replay=adopted.replay if adopted else None),
              worker="none" if adopted is not None else "taken" if taken else "wait")


def on_settings(profile: Profile, inspections: Inspections, seq: float, reserve_auto: bool, reserve: float,
                max_new_tokens: float | str | None, audio_cap: float, k_mode: str,
                progress: gr.Progress = gr.Progress(), *, limits: UploadLimits = UploadLimits(),
                engine: ChatEngine | None = None, workers: Workers) -> Iterator[tuple[Any, ...]]:
    settings = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                               max_new_tokens=max_new_tokens, audio_cap=audio_cap, k_mode=k_mode)
    run = VideoRun(workers)
    run.start(lambda shown, report: handlers.inspect_settings(inspections, profile, settings, report, limits=limits,
                                                              frames_shown=shown))
    yield from run.steps(profile, engine, _progress_adapter(progress))


def on_images(profile: Profile, inspections: Inspections, paths: Sequence[str] | str | None, *,
              limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None,
              workers: Workers) -> tuple[Any, ...]:
    with workers.slot():
        update = handlers.inspect_images(inspections, profile, paths, limits=limits)
    return _emit("images", update, engine)


def on_audio_file(profile: Profile, inspections: Inspections, path: str | None, *,
                  limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None,
                  workers: Workers) -> tuple[Any, ...]:
    with workers.slot():
        update = handlers.inspect_audio(inspections, profile, path, "file", limits=limits)
    return _emit("audio", update, engine)


def on_audio_mic(profile: Profile, inspections: Inspections, path: str | None, *,
                 limits: UploadLimits = UploadLimits(), engine: ChatEngine | None = None,
                 workers: Workers) -> tuple[Any, ...]:
    with workers.slot():
        update = handlers.inspect_audio(inspections, profile, path, "microphone", limits=limits)
    return _emit("audio", update, engine)


# An upload announced as it arrives (queue=False, before its inspection waits for a worker): the
# panel's job in flight is cancelled at once, and the status line shows the panel busy.
def on_video_arrives(profile: Profile, engine: ChatEngine | None, inspections: Inspections, path: str | None,
                     seq: float, reserve_auto: bool, reserve: float, max_new_tokens: float | str | None,
                     audio_cap: float, k_mode: str, *, limits: UploadLimits = UploadLimits(),
                     workers: Workers, early: EarlyVideos | None = None) -> str:
    """A video (or a clear) arrives: its job begins now — taking the inspection begun as the file's bytes came in
    with these settings (``early``), else, when a worker is free this moment, beginning it on a thread of its own
    (``VideoRun``) — and its event, which comes a browser round trip later (``on_video``), shows it; otherwise the
    upload is announced and its event begins the inspection once it has a worker."""
    settings = video_settings_from_controls(seq=seq, reserve_auto=reserve_auto, reserve=reserve,
                                               max_new_tokens=max_new_tokens, audio_cap=audio_cap, k_mode=k_mode)
    adopted = early.take(path, settings) if early is not None else None
    if adopted is None and not workers.try_take():
        return _with_note(handlers.announce_video(inspections, path), engine)
    try:
        run = VideoRun(workers)
        job, status = handlers.begin_video(inspections, path, settings, run)
        _start_video(run, profile, inspections, path, settings, limits=limits, adopted=adopted, job=job,
                     taken=adopted is None)
    except BaseException:
        if adopted is None:
            workers.give_back()
        raise
    return _with_note(status, engine)


def on_settings_arrive(engine: ChatEngine | None, inspections: Inspections) -> str:
    return _with_note(handlers.announce_settings(inspections), engine)


def on_images_arrive(engine: ChatEngine | None, inspections: Inspections, paths: Sequence[str] | str | None) -> str:
    return _with_note(handlers.announce_images(inspections, paths), engine)


def on_audio_arrives(source: str, engine: ChatEngine | None, inspections: Inspections, path: str | None) -> str:
    return _with_note(handlers.announce_audio(inspections, path, source), engine)


def on_inspected(profile: Profile, engine: ChatEngine | None, inspections: Inspections) -> tuple[Any, ...]:
    """After each inspection, one at a time app-wide (so the page ends on the latest): the status line
    of every panel and, once per new state, the state the chat reads and the views all panels share."""
    status = _with_note(handlers.status_md(inspections), engine)
    shared = handlers.shared_views(profile, inspections)
    if shared is None:
        return (gr.skip(), status, *(gr.skip() for _ in handlers.SHARED_KEYS))
    state, values = shared
    return (state, status, *(values[key] for key in handlers.SHARED_KEYS))


def on_later_views(profile: Profile, inspections: Inspections) -> tuple[Any, ...]:
    """After a video event, once the page shows its frames: the video's other views, when its state is newer."""
    drawn = handlers.later_views(profile, inspections)
    return tuple(_value_for(key, drawn[key]) if key in drawn else gr.skip() for key in handlers.LATER_KEYS)


def on_figures(inspections: Inspections) -> tuple[Any, ...]:
    """After each inspection: the figures of the panels whose state is newer than their figures."""
    drawn = handlers.panel_figures(inspections)
    return tuple(drawn[key] if key in drawn else gr.skip() for key in handlers.FIGURE_KEYS)


def on_segment(state: StudioState, index: int | None) -> tuple[int, np.ndarray] | None:
    return handlers.segment_audio(state, index)


def on_group_select(state: StudioState, evt: gr.SelectData) -> int | dict[str, Any]:
    """A row of the groups table was clicked: pick that group's audio segment."""
    report = state.video
    if report is None or evt.index is None:
        return gr.skip()
    row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
    try:
        audio = report.groups[int(row)].audio
    except (IndexError, ValueError, TypeError):
        return gr.skip()
    return gr.skip() if audio is None else audio


def on_reserve_auto(auto: bool) -> gr.Slider:
    return gr.Slider(interactive=not auto)


def sync_max_new(max_tokens: float | None) -> int:
    return max(0, min(int(max_tokens or 0), handlers.MAX_NEW_TOKENS_MAX))


def setup_inspection_events(uploads: layout.UploadPanels, model_views: layout.ModelViews, state: gr.State,
                            max_tokens: gr.Number, *, profile: Profile, engine: ChatEngine | None,
                            limits: UploadLimits, workers: int,
                            early: EarlyVideos | None = None) -> list[Dependency]:
    """Uploads and the Budget tab: every trigger runs the same steps; returns each step 3 that writes the state
    (what the chat reads), for views that follow the uploads (the context meter).

    0. with ``early`` (the app's ``EarlyVideos``, heard of every upload as Gradio's route answers it), a video's
       inspection begins with the Budget tab's first settings as its bytes come in, when a worker is free;
    1. *arrives* (``queue=False``, at once): the panel's job in flight is cancelled (superseded) and the
       status line shows the panel busy; a video's inspection begins here — the one begun as it came in, when
       there is one with these settings, or a new one when a worker is free (``on_video_arrives``) — and the
       next step shows it;
    2. the inspection (the public API endpoint), at most ``workers`` at a time across every visitor (their work
       takes one of the app's ``Workers``, the Gradio queue's limit is the same number); one
       visitor's panels run side by side too, each result applied to the visitor's latest state
       (``handlers.Inspections``, a per-session ``gr.State``). It shows the panel's own views (its outputs: the
       state, the status line and ``handlers.EVENT_KEYS[panel]``, nothing of the other panels); a video's
       frames the moment vLLM has sampled them (``VideoRun``: the gallery alone, then the state, the
       status line and the reserve). A superseded inspection changes nothing once a newer result is shown;
    3. then — once the browser has shown the new pictures (``AFTER_THE_PICTURES_JS``), so drawing does
       not slow them down — one at a time app-wide, so the page always ends on the latest: the status
       line of every panel, the state the chat reads and the views all panels share (summary, budget
       bar); and, side by side, the panel's figures and a video's other views (``handlers.LATER_KEYS``:
       the frame strip, the solver, the interleave).
    """
    budget, outputs = model_views.budget, model_views.outputs
    inspections = gr.State(handlers.new_inspections(state.value))
    shared_out = [state, uploads.status, *(outputs[key] for key in handlers.SHARED_KEYS)]
    figure_out = [outputs[key] for key in handlers.FIGURE_KEYS]
    later_out = [outputs[key] for key in handlers.LATER_KEYS]
    controls = budget.components()  # on_video / on_settings take them by these names, in this order
    arrives = Options(outputs=uploads.status, queue=False, show_progress="hidden", api_visibility="private")
    shown: list[Dependency] = []
    pool = early.workers if early is not None else Workers(workers)
    if early is not None:  # what the page's Budget tab starts with
        early.expect(video_settings_from_controls(**budget.named([control.value for control in controls])))

    def bound(fn: Callable[..., Any]) -> Callable[..., Any]:  # keyword-only: Gradio fills the positional parameters
        return partial(fn, profile, engine=engine, limits=limits, workers=pool)

    def inspect(arrived: Dependency, fn: Callable[..., Any], inputs: list[Any], *, api_name: str,
                progress_on: list[Any], panel: str, **kwargs: Any) -> None:
        # "multiple": a second upload's inspection starts while the first's runs (and supersedes it);
        # "always_last": the steps after it draw whatever is latest, so pending ones coalesce.
        panel_out = [state, uploads.status, *(outputs[key] for key in handlers.EVENT_KEYS[panel])]
        main = arrived.then(fn, [inspections, *inputs], panel_out, api_name=api_name, concurrency_limit=workers,
                            concurrency_id="inspect", show_progress_on=progress_on, trigger_mode="multiple",
                            **kwargs)
        after = Listen(inputs=inspections, show_progress="hidden", api_visibility="private",
                        trigger_mode="always_last", js=AFTER_THE_PICTURES_JS)
        shown.append(main.then(partial(on_inspected, profile, engine), outputs=shared_out,
                               api_name=f"{api_name}_shown", concurrency_limit=1, concurrency_id="inspect-shown",
                               **after))
        main.then(on_figures, outputs=figure_out, api_name=f"{api_name}_figures", concurrency_limit=workers,
                  concurrency_id="inspect-figures", **after)
        if panel == "video":  # the video's views but its frames and figures
            main.then(partial(on_later_views, profile), outputs=later_out, api_name=f"{api_name}_views",
                      concurrency_limit=workers, concurrency_id="inspect-views", **after)

    frames, solver = outputs["frames_gallery"], outputs["solver_md"]
    inspect(uploads.video.change(partial(on_video_arrives, profile, engine, limits=limits, workers=pool, early=early),
                                 [inspections, uploads.video, *controls],
                                 trigger_mode="multiple", **arrives),
            partial(bound(on_video), early=early), [uploads.video, *controls],
            api_name="inspect_video", show_progress="full", progress_on=[frames], panel="video")
    for trigger, name in ((budget.seq.release, "set_seq"), (budget.max_new_tokens.release, "set_max_new_tokens"),
                          (budget.reserve.release, "set_reserve"), (budget.audio_cap.release, "set_audio_cap"),
                          (budget.k_mode.input, "set_k_mode"), (budget.reserve_auto.input, "set_reserve_auto")):
        inspect(trigger(partial(on_settings_arrive, engine), inspections, trigger_mode="multiple", **arrives),
                bound(on_settings), controls, api_name=name,
                show_progress="minimal", progress_on=[solver, frames], panel="video")
    budget.reserve_auto.change(on_reserve_auto, budget.reserve_auto, budget.reserve, api_name="reserve_auto_toggle",
                               api_visibility="private", queue=False)
    inspect(uploads.images.change(partial(on_images_arrive, engine), [inspections, uploads.images],
                                  trigger_mode="multiple", **arrives),
            bound(on_images), [uploads.images], api_name="inspect_images",
            progress_on=[outputs["grid_gallery"]], panel="images")
    for component, source, fn, name in ((uploads.audio_file, "file", on_audio_file, "inspect_audio"),
                                        (uploads.audio_mic, "microphone", on_audio_mic, "inspect_recording")):
        inspect(component.change(partial(on_audio_arrives, source, engine), [inspections, component],
                                 trigger_mode="multiple", **arrives),
                bound(fn), [component], api_name=name,
                progress_on=[outputs["mel_info"]], panel="audio")
    segment_pick, segment_audio = outputs["segment_pick"], outputs["segment_audio"]
    segment_pick.change(on_segment, [state, segment_pick], segment_audio, api_name="segment_audio")
    outputs["groups_df"].select(on_group_select, state, segment_pick, api_name="group_select",
                                api_visibility="private")
    # The engine plans the video with max_new_tokens = the sampling max tokens: mirror it in the Budget tab.
    synced = gr.on([max_tokens.blur, max_tokens.submit], sync_max_new, max_tokens, budget.max_new_tokens,
                   api_visibility="private", queue=False)
    inspect(synced.then(partial(on_settings_arrive, engine), inspections, trigger_mode="multiple", **arrives),
            bound(on_settings), controls, api_name="sync_max_new_tokens",
            api_visibility="private", show_progress="hidden", progress_on=[solver], panel="video")
    return shown


# Run in the browser when a glance link is clicked: bring the detail tabs into view.
SCROLL_TO_VIEWS_JS = """() => {
  document.getElementById('views')?.scrollIntoView({behavior: 'smooth', block: 'start'});
  return [];
}"""


def select_tab(tab: str) -> gr.Tabs:
    return gr.Tabs(selected=tab)


def setup_glance_events(glance: layout.Glance, tabs: gr.Tabs) -> None:
    """Each link of the glance selects its detail tab and scrolls to it."""
    for tab, link in glance.links.items():
        link.click(partial(select_tab, tab), None, tabs, js=SCROLL_TO_VIEWS_JS, queue=False, show_progress="hidden",
                   api_visibility="private")
