"""The examples in the Blocks layout: what a click fills, which tab it shows, and where the files are served from."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import gradio as gr
import pytest

from dots3_demo.ui import build_interface
from dots3_demo.ui.examples import ELEM_ID, EXAMPLES_DIR, studio_examples

SEQ = 12288
FILLS = ["video-input", "images-input", "audio-input", "chat-input", "tools-json"]


@pytest.fixture(scope="module")
def demo(profile):
    return build_interface(profile, None, seq=SEQ)


def _dataset(demo) -> gr.Dataset:
    found = [b for b in demo.blocks.values() if isinstance(b, gr.Dataset) and b.elem_id == ELEM_ID]
    assert len(found) == 1
    return found[0]


def _click_fns(demo, dataset):
    return [f for f in demo.fns.values() if any(t[0] == dataset._id and t[1] == "click" for t in f.targets)]


def _fill_fn(demo):
    dataset = _dataset(demo)
    fns = [f for f in _click_fns(demo, dataset) if [getattr(o, "elem_id", None) for o in f.outputs] == FILLS]
    assert len(fns) == 1
    return fns[0]


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_examples_sit_in_their_row_above_the_panels(demo):
    dataset = _dataset(demo)
    row = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "examples-row")
    assert isinstance(row, gr.Row) and dataset in row.children
    assert dataset.sample_labels == [e.label for e in studio_examples()]
    assert dataset.samples_per_page >= len(studio_examples())  # one page: every example visible


def test_a_click_fills_the_panels_chat_box_and_tools_without_running_anything(demo):
    fill = _fill_fn(demo)
    assert fill.queue is False and fill.api_visibility == "private"
    # nothing cached and nothing run on click: the panels' own .change events inspect
    assert all(f.name != "load_example_output" for f in demo.fns.values())
    later = [f for f in demo.fns.values() if f.trigger_after == fill._id]
    assert later == []


@pytest.mark.parametrize("index", range(len(studio_examples())), ids=[e.label for e in studio_examples()])
def test_each_click_sets_every_panel(demo, index):
    example = studio_examples()[index]
    fill = _fill_fn(demo)
    video, images, audio, prompt, tools = fill.fn(_dataset(demo).preprocess(index))  # what a click sends
    assert all(u.get("__type__") == "update" for u in (video, images, audio, prompt, tools))
    if example.video:
        assert _sha(video["value"]["path"]) == _sha(EXAMPLES_DIR / example.video)
    else:
        assert video["value"] is None  # cleared: vLLM refuses a video next to images or audio
    if example.images:
        assert [_sha(f["path"]) for f in images["value"]] == [_sha(EXAMPLES_DIR / n) for n in example.images]
    else:
        assert not images["value"]
    if example.audio:
        assert _sha(audio["value"]["path"]) == _sha(EXAMPLES_DIR / example.audio)
    else:
        assert audio["value"] is None
    assert prompt["value"] == example.prompt
    assert (tools["value"] == (EXAMPLES_DIR / example.tools).read_text(encoding="utf-8").strip()) if example.tools \
        else tools["value"] == ""


def test_files_are_served_from_gradios_cache_not_the_assets_folder(demo):
    """Gradio copies example files into its cache at build time, so no allowed_paths entry is needed."""
    fill = _fill_fn(demo)
    video = fill.fn(_dataset(demo).preprocess(0))[0]["value"]
    assert Path(video["path"]).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
    assert not Path(video["path"]).resolve().is_relative_to(EXAMPLES_DIR.resolve())
    assert video["url"].startswith("/gradio_api/file=")


def test_a_click_brings_the_examples_tab_forward(demo):
    dataset = _dataset(demo)
    tabs = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "views")
    fns = [f for f in _click_fns(demo, dataset) if f.outputs == [tabs]]
    assert len(fns) == 1 and fns[0].queue is False
    for index, example in enumerate(studio_examples()):
        update = fns[0].fn(dataset.preprocess(index))
        if example.tab is None:
            assert update == gr.skip()
        else:
            assert isinstance(update, gr.Tabs) and update.selected == example.tab
    tab_ids = {b.id for b in demo.blocks.values() if isinstance(b, gr.Tab)}
    assert {e.tab for e in studio_examples() if e.tab} <= tab_ids
