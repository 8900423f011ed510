"""The reports' HTML building blocks: inspector pictures and numbers in, inert escaped HTML out."""

from __future__ import annotations

import base64
import io
import re

from PIL import Image

from dots3_demo.core.records import Answer
from dots3_demo.engine.protocol import PromptTokens, ToolCall, TurnStats
from dots3_demo.inspection import report_to_json
from dots3_demo.workbench import report_html
from tests.workbench.htmlcheck import assert_inert, parse

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)> "quoted" \'single\' http://evil.example/x'


def _jpeg(uri: str) -> Image.Image:
    head, data = uri.split(",", 1)
    assert head == "data:image/jpeg;base64"
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_frame_thumbnails_are_the_inspectors_frames_with_their_timestamps(workbench_reports):
    video = workbench_reports["video"]
    thumbs = report_html.frame_thumbnails(video)
    assert [t.caption for t in thumbs] == [f.timestamp for f in video.frames]
    assert len(thumbs) == len(video.frames) > 1
    for thumb, frame in zip(thumbs, video.frames, strict=True):
        picture = _jpeg(thumb.uri)
        assert picture.size == (thumb.width, thumb.height)
        assert max(picture.size) <= report_html.THUMB_SIDE
        w, h = frame.image.size  # the aspect ratio of the frame vLLM produced
        assert abs(picture.width / picture.height - w / h) < 0.05
        assert str(frame.tokens) in thumb.detail


def test_image_thumbnail_and_audio_has_none(workbench_reports):
    image = workbench_reports["image"]
    (thumb,) = report_html.report_thumbnails(image, "picture.png")
    assert thumb.caption == "picture.png" and max(_jpeg(thumb.uri).size) <= report_html.THUMB_SIDE
    assert report_html.report_thumbnails(workbench_reports["audio"], "tone.wav") == ()


def test_small_images_are_not_enlarged():
    thumb = report_html.thumbnail(Image.new("RGB", (40, 30), "red"), "tiny")
    assert (thumb.width, thumb.height) == (40, 30)


def test_media_page_shows_the_inspectors_timestamps_and_tokens_and_is_inert(workbench_media, workbench_reports):
    body = "".join(
        report_html.media_html(path.name, report_to_json(path, workbench_reports[kind]),
                               report_html.report_thumbnails(workbench_reports[kind], path.name))
        for kind, path in workbench_media.items()
    )
    document = report_html.page_html("media", body)
    page = assert_inert(document)
    plan = report_to_json(workbench_media["video"], workbench_reports["video"])["video"]
    captions = [t for t in page.text if t in {f["timestamp"] for f in plan["frames"]}]
    assert captions[: len(plan["frames"])] == [f["timestamp"] for f in plan["frames"]]
    assert len(page.all("img")) == len(plan["frames"]) + 1  # the frames and the image; audio has no picture
    text = page.joined_text()
    for number in (plan["image_pad_tokens"], plan["audio_pad_tokens"], plan["text_tokens"], plan["prompt_tokens"],
                   workbench_reports["image"].tokens, workbench_reports["audio"].tokens):
        assert f"{number:,}" in text
    assert workbench_reports["video"].audio.reason in text
    assert not re.search(r"https?://", document)


def test_plan_of_a_file_the_inspector_refused_says_why():
    page = parse(report_html.plan_html({"file": "broken.mp4", "error": "cannot decode <this>"}))
    assert "broken.mp4: could not be inspected — cannot decode <this>" in page.joined_text()


def test_hostile_model_output_stays_text():
    call = ToolCall(id="c1", name="<img src=x onerror=alert(3)>", arguments='{"q": "</pre><script>x()</script>"}',
                    status="answered", result=HOSTILE)
    answer = Answer(text=HOSTILE, reasoning=HOSTILE, tool_calls=(call,), finish_reason="stop", error=HOSTILE)
    document = report_html.page_html(HOSTILE, report_html.answer_html(answer, title=HOSTILE, verdict="up",
                                                                     note=HOSTILE), subtitle=HOSTILE)
    page = assert_inert(document)
    text = page.joined_text()
    assert text.count(HOSTILE) >= 6  # title ×2, subtitle, heading, reasoning, text, result, error, note
    assert call.name in text and "</pre><script>x()</script>" in text
    assert page.all("img") == []


def test_reasoning_is_folded_and_figures_are_shown():
    stats = TurnStats(ttft_s=0.42, tokens_per_s=31.5, output_tokens=77, source="engine",
                      prompt=PromptTokens(total=1500, text=40, image=300, audio=60, video=1100, video_frames=900,
                                          video_audio=150))
    answer = Answer(text="the answer", reasoning="thinking it over", finish_reason="length", stats=stats)
    page = parse(report_html.answer_html(answer, verdict="down", note="too long"))
    assert page.all("details") and page.all("summary")
    text = page.joined_text()
    for part in ("TTFT 0.42 s", "31.5 tok/s", "output 77 tok", "prompt 1,500", "text 40", "image 300", "audio 60",
                 "video 1,100", "video frames 900, video sound 150", "finish length", "👎", "too long"):
        assert part in text, part
    stopped = parse(report_html.answer_html(Answer(text="partial"))).joined_text()
    assert "finish — (stopped or failed)" in stopped and "rating" not in stopped
