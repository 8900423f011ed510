"""Every reply checked (issue 21 §2): the prompt's tokens by modality read from the ids alone (what a server
returns), against the inspector's plan, on a prompt vLLM's REAL renderer and dots3_note processor expanded
(preview profile, CPU): ✓ where they agree, else ≠ with what the difference most likely means; and the figures
carry the prompt view's fold."""

from __future__ import annotations

import asyncio

import pytest

from dots3_demo.core.counts import TokenPair, mismatch_causes
from dots3_demo.core.records import Answer, MediaItem
from dots3_demo.core.reply import Reply
from dots3_demo.engine import TurnRequest
from dots3_demo.engine.inprocess import render_turn
from dots3_demo.engine.promptview import view_from_tokenizer
from dots3_demo.engine.protocol import TurnStats
from dots3_demo.engine.stats import prompt_tokens_from_view
from dots3_demo.ui import chat_views
from tests.engine.media import make_png, make_wav
from tests.engine.real_renderer import build_preview_renderer

LIMITS = {"image": 8, "audio": 4, "video": 1}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A reply whose prompt is the server's ids for one image (source "server": counted from the ids alone)."""
    renderer = build_preview_renderer(LIMITS)
    image = make_png(tmp_path_factory.mktemp("m") / "a.png", width=640, height=480)
    turn = TurnRequest(session_id="t", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"file://{image}"}}, {"type": "text", "text": "What <b>?"}]}])
    engine_input = asyncio.run(render_turn(renderer, turn, LIMITS))
    view = view_from_tokenizer(engine_input["prompt_token_ids"], renderer.get_tokenizer(), "server")
    stats = TurnStats(source="server", prompt=prompt_tokens_from_view(view), prompt_view=view)
    return Reply(Answer(text="x", finish_reason="stop", stats=stats), "done"), str(image)


def test_a_remote_reply_agrees_with_the_plan(served):
    reply, image = served
    pads = reply.stats.prompt.image - 2
    line = chat_views.figures_md(reply, (MediaItem("image", image, tokens=pads),))
    assert f"engine: image {pads + 2:,} · inspector: {pads + 2:,} ({pads:,} + 2 markers) ✓" in line
    assert "≠" not in line and "no split by modality" not in line
    assert '<details class="d3-prompt">' in line and "the server&#x27;s own ids" in line
    assert f"&lt;image pad&gt; × {pads:,}" in line and "What &lt;b&gt;?" in line


def test_a_difference_is_flagged_with_what_it_most_likely_means(served):
    reply, image = served
    pads = reply.stats.prompt.image - 2
    other_model = chat_views.figures_md(reply, (MediaItem("image", image, tokens=pads + 10),))
    assert "inspector: " in other_model and "≠" in other_model and "another model" in other_model
    dropped = chat_views.figures_md(reply, (MediaItem("image", image, tokens=pads),
                                            MediaItem("audio", "a.wav", tokens=38)))
    assert "engine: image" in dropped and "✓" in dropped
    assert "no audio reached the engine: a part dropped on the way" in dropped
    video = chat_views.figures_md(reply, (MediaItem("video", "v.mp4", tokens=900, frame_tokens=800),))
    assert "no video reached the engine" in video
    planned = mismatch_causes([TokenPair("video frames", 1200, 1500), TokenPair("image", 10, 10)])
    assert planned == ["the video was planned otherwise: with the server's own defaults (a server started without "
                       "--trust-request-mm-kwargs ignores the Budget tab), or another model's processor config"]


def test_an_audio_clip_counted_from_ids_alone(tmp_path):
    renderer = build_preview_renderer(LIMITS)
    wav = make_wav(tmp_path / "a.wav", seconds=3.0)
    turn = TurnRequest(session_id="t", messages=[{"role": "user", "content": [
        {"type": "audio_url", "audio_url": {"url": f"file://{wav}"}}]}])
    engine_input = asyncio.run(render_turn(renderer, turn, LIMITS))
    counts = prompt_tokens_from_view(view_from_tokenizer(engine_input["prompt_token_ids"],
                                                         renderer.get_tokenizer(), "server"))
    assert counts.audio == 38 + 2 and counts.image == counts.video == 0


def test_a_finished_reply_carries_the_request_as_sent_in_three_forms(served):
    from dataclasses import replace

    from dots3_demo.engine import wire

    reply, image = served
    turn = TurnRequest(session_id="t", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"file://{image}"}}, {"type": "text", "text": "What ```<b>```?"}]}])
    request = wire.chat_request(turn, "dots3", endpoint="http://gpu-1:8000/v1")
    done = replace(reply, answer=replace(reply.answer, stats=replace(reply.stats, request=request)))
    line = chat_views.figures_md(done, ())
    fold = line[line.index('<details class="d3-request">'):]
    assert "sent to `http://gpu-1:8000/v1`" in fold
    for form, language in ((wire.as_curl, "bash"), (wire.as_python, "python"), (wire.as_json, "json")):
        assert wire.fence(form(request), language) in fold  # each whole, in a block of its own (a copy button)
    from dots3_demo.workbench.request_fold import without_request

    hint = "  \n**The model called a tool**"  # the chat adds its hint after the figures
    assert without_request(line + hint) == line[:line.index('\n\n<details class="d3-request">')] + hint
    streaming = replace(done, state="streaming")
    assert "d3-request" not in chat_views.figures_md(streaming, ())  # written once, when the reply has ended
