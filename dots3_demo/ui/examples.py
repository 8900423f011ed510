"""The one-click examples: which bundled file goes into which upload panel, with a suggested prompt.

The files live in ``assets/examples/`` (made by ``scripts/build_examples.py``; README there says
what each one shows and says). Each example is one request vLLM accepts: a video is never
combined with images or audio, so an example also *clears* the panels it does not use — the
chat attaches exactly what the example shows.

Clicking an example sets the panels' values; their ``.change`` events then run the same
inspection as an upload (``cache_examples=False``: there is no engine output to cache). The
click also brings forward the tab that shows the example's media best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.helpers import Examples

from dots3_demo.profiles import ASSETS_DIR

EXAMPLES_DIR = ASSETS_DIR / "examples"
ELEM_ID = "examples"


@dataclass(frozen=True)
class StudioExample:
    """One example row. File fields are names inside the examples folder."""

    label: str  # what the example button says
    prompt: str  # the suggested chat message
    expected: str  # what a correct answer contains (README, tests) — never shown as the answer
    video: str | None = None
    images: tuple[str, ...] = ()
    audio: str | None = None
    tools: str | None = None  # a JSON file with OpenAI function schemas for the tools editor
    tab: str | None = None  # id of the view tab to bring forward (frames, images, mel …); None: keep

    def files(self) -> list[str]:
        """Every file name the example uses."""
        return [n for n in (self.video, *self.images, self.audio, self.tools) if n]


def studio_examples() -> list[StudioExample]:
    """The examples, in the order the UI lists them: one per upload panel, then a mixed one and tools."""
    return [
        StudioExample(
            label="Video + sound track",
            video="room_clip.mp4",
            prompt="What room number is on the door, and what password does the voice say?",
            expected="Room 3 (on screen); the password is blue falcon (only in the sound track)",
            tab="frames",
        ),
        StudioExample(
            label="Bar chart",
            images=("rain_chart.png",),
            prompt="Which month had the most rain in this chart, and how many millimetres fell?",
            expected="April, 88 mm",
            tab="images",
        ),
        StudioExample(
            label="Spoken question",
            audio="spoken_question.wav",
            prompt="Answer the spoken question in one sentence.",
            expected="366 (the clip asks how many days a leap year has)",
            tab="mel",
        ),
        StudioExample(
            label="Picture + spoken question",
            images=("shapes.png",),
            audio="shapes_question.wav",
            prompt="Listen to the question and answer it from the picture.",
            expected="3 (the clip asks how many red circles the picture has; it also has a red square "
                     "and a blue circle)",
            tab="images",
        ),
        StudioExample(
            label="Tools: weather + calculator",
            tools="tools.json",
            prompt="What's the weather in Shanghai right now? Also work out 23 * 47 + 19 with the calculator.",
            expected="calls get_weather(city=Shanghai) and calculator(23 * 47 + 19) → 1100; the built-in "
                     "example tools answer both (the weather is labelled example data)",
        ),
    ]


def example_row(example: StudioExample, directory: Path = EXAMPLES_DIR) -> list[Any]:
    """``[video, images, audio, prompt, tools text]`` with absolute paths; ``None`` clears a panel."""
    directory = Path(directory).resolve()
    return [
        str(directory / example.video) if example.video else None,
        [str(directory / name) for name in example.images] if example.images else None,
        str(directory / example.audio) if example.audio else None,
        example.prompt,
        (directory / example.tools).read_text(encoding="utf-8").strip() if example.tools else "",
    ]


def tab_for(examples: Sequence[StudioExample], picked: Any) -> Any:
    """The view-tab update for a click on the examples table (``picked``: ``(index, sample)``)."""
    index = picked[0] if isinstance(picked, (list, tuple)) and picked else picked
    try:
        tab = examples[int(index)].tab
    except (IndexError, TypeError, ValueError):
        return gr.skip()
    return gr.skip() if tab is None else gr.Tabs(selected=tab)


def add_examples(
    video: gr.Video, images: gr.File, audio: gr.Audio, prompt: gr.Textbox, tools: gr.Code, *,
    view_tabs: gr.Tabs | None = None, examples: Sequence[StudioExample] | None = None,
    directory: Path = EXAMPLES_DIR,
) -> Examples:
    """Render the examples where this is called (inside a Blocks layout) and return them.

    With ``view_tabs`` a click also selects the example's ``tab``. The example files are copied
    into Gradio's cache when the app is built and served from there, so ``assets/examples``
    needs no ``allowed_paths`` entry.
    """
    chosen = list(studio_examples() if examples is None else examples)
    shown = gr.Examples(
        examples=[example_row(e, directory) for e in chosen],
        inputs=[video, images, audio, prompt, tools],
        example_labels=[e.label for e in chosen],
        label="Examples — one click fills the panels and the chat box",
        cache_examples=False,
        run_on_click=False,
        examples_per_page=len(chosen),
        elem_id=ELEM_ID,
        api_visibility="private",
    )
    if view_tabs is not None:
        shown.dataset.click(partial(tab_for, chosen), shown.dataset, view_tabs, queue=False,
                            show_progress="hidden", api_visibility="private")
    return shown
