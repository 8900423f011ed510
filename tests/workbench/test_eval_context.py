"""``app.py eval`` in preview counts each item's whole prompt (text and media, as the engine will: ``core.context``)
and marks what a real engine would refuse (issue 21 §4): a prompt over the context, more images than the per-prompt
limit. A normal item is counted exactly as vLLM's real renderer and Dots processor count it, and is not marked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dots3_demo.core.state import StudioState
from dots3_demo.core.turns import build_turn, panel_media, user_message
from dots3_demo.engine.inprocess import render_turn
from dots3_demo.inspection import inspect_file
from support import media_factory
from tests.workbench.test_eval_preview import results, run_eval, write_set

SEQ = 4096


def test_preview_counts_the_whole_prompt_and_marks_what_an_engine_would_refuse(tmp_path: Path, profile):
    photo = media_factory.make_image(tmp_path / "photo.png", width=320, height=200)
    items = [
        {"id": "normal", "media": ["photo.png"], "prompt": "What is in the picture?", "system": "Be brief."},
        {"id": "many images", "media": ["photo.png"] * 9, "prompt": "Compare them."},
        {"id": "huge prompt", "media": [], "prompt": "rain " * 6000},
    ]
    out = tmp_path / "out"
    status, stdout, _ = run_eval(str(write_set(tmp_path / "set.jsonl", items)), "--out", str(out), "--seq", str(SEQ))
    by_id = {r["id"]: r for r in results(out)}

    normal = by_id["normal"]
    assert normal["would_refuse"] is None and normal["error"] is None
    context = normal["context"]
    assert context["max_model_len"] == SEQ and context["fit"] == "fits"
    # the whole prompt, as vLLM's real renderer + Dots processor build it for the same request
    from tests.engine.real_renderer import build_preview_renderer

    media = panel_media(StudioState(images=((str(photo), inspect_file(photo, profile, expected="image")),)))
    turn = build_turn(session_id="t", system="Be brief.", messages=[user_message("What is in the picture?", media)])
    engine_input = asyncio.run(render_turn(build_preview_renderer(), turn, {"image": 8, "audio": 4, "video": 1}))
    assert context["prompt_tokens"] == len(engine_input["prompt_token_ids"])
    assert context["text_tokens"] > 10 and context["media_tokens"] == media[0].tokens + 2

    many = by_id["many images"]
    assert "at most 8 image" in many["would_refuse"] and many["context"]["fit"] == "fits"
    huge = by_id["huge prompt"]
    assert huge["context"]["prompt_tokens"] > SEQ and huge["context"]["fit"] == "will not fit"
    assert "will not fit" in huge["would_refuse"] and "max_model_len" in huge["would_refuse"]

    report = (out / "report.html").read_text()
    assert report.count("would be refused") >= 2 and "at most 8 image" in report and "will not fit" in report
    assert json.loads((out / "results.jsonl").read_text().splitlines()[0])["context"]  # a typed field, written
