"""dots3_demo.ui.figures: pure matplotlib Figures of a report."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from dots3_demo.inspection import VideoSettings, inspect_file
from dots3_demo.ui import figures


@pytest.fixture(scope="module")
def video_report(profile, clip_with_audio):
    return inspect_file(clip_with_audio, profile, VideoSettings(seq=2048), expected="video")


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def test_module_uses_no_pyplot_and_no_gradio():
    imports = [line for line in Path(figures.__file__).read_text().splitlines()
               if line.strip().startswith(("import ", "from "))]
    assert imports and not [line for line in imports if "pyplot" in line or "gradio" in line]


def test_video_figures_render(video_report):
    for make in (figures.cost_curve_figure, figures.fps_patch_figure, figures.interleave_figure):
        fig = make(video_report)
        assert isinstance(fig, Figure)
        assert _png(fig).startswith(b"\x89PNG")


def test_cost_curve_marks_budget_and_choice(video_report):
    fig = figures.cost_curve_figure(video_report)
    ax = fig.axes[0]
    budget_lines = [line for line in ax.get_lines() if np.allclose(line.get_ydata(), video_report.solver.visual_budget)]
    assert budget_lines, "visual budget line missing"
    texts = " ".join(t.get_text() for t in ax.texts)
    assert f"chosen {video_report.solver.chosen_scale:.2f}" in texts


def test_interleave_labels_every_segment(video_report):
    fig = figures.interleave_figure(video_report, thumbnails=False)
    texts = [t.get_text() for t in fig.axes[0].texts]
    for seg in video_report.audio_segments:
        assert f"{seg.tokens} tok" in texts
    assert sum(t.startswith("G") for t in texts) == len(video_report.groups)


def test_budget_figure_over_budget_is_marked():
    fig = figures.budget_figure(4096, 1024, [("prompt", {"text": 500, "image": 3000, "audio": 200})])
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "over by" in texts
    fine = figures.budget_figure(32768, 8192, [("video", {"text": 98, "image": 2392, "audio": 102})],
                                 approximate=True)
    assert "free" in " ".join(t.get_text() for t in fine.axes[0].texts)
    assert _png(fine)


def test_mel_figure_marks_chunks(profile, long_tone):
    report = inspect_file(long_tone, profile, expected="audio")
    fig = figures.mel_figure(report)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert [t for t in texts if t.startswith("chunk")] == [
        f"chunk {i + 1}: {n} tok" for i, n in enumerate(report.chunk_tokens)
    ]
    db = figures.log_mel(report.waveform, report.sample_rate)
    assert db.shape[0] == figures.MEL_BINS
    assert abs(db.shape[1] - report.samples / figures.MEL_HOP) <= 2
    assert _png(fig)


def test_empty_figure():
    assert _png(figures.empty_figure("nothing yet"))
