"""The solver explanation (``solver_curve`` + bisection) lands where vLLM's ``_solve_degrade`` does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dots3_demo import vllm_compat
from dots3_demo.inspection.video import VideoSettings, _chosen_scale, solver_curve

DURATIONS = [0.5, 2.0, 7.3, 60.0, 600.0, 3600.0]
SHAPES = [(240, 320), (360, 640), (720, 1280), (1080, 1920), (1920, 1080), (30, 3000)]
FPS = [0.5, 10.0, 25.0, 30.0]
BUDGETS = [(400, 3000), (2500, 4000), (12000, 24576), (60000, 98304)]  # (visual_budget, seq_length)


@pytest.mark.parametrize("duration", DURATIONS)
def test_bisecting_solver_curve_matches_solve_degrade(duration):
    v = vllm_compat.video_module()
    checked = 0
    for (h, w), fps, (budget, seq_length) in itertools.product(SHAPES, FPS, BUDGETS):
        frames, patch_cap = v._solve_degrade(budget, duration, h, w, fps, seq_length)
        scale = _chosen_scale(duration, h, w, fps, seq_length, budget)
        curve = solver_curve(duration, h, w, fps, seq_length, np.array([scale]))
        at_zero = solver_curve(duration, h, w, fps, seq_length, np.array([0.0]))
        case = (duration, h, w, fps, budget, seq_length, scale)
        if int(at_zero["cost"][0]) > budget:
            # nothing fits: vLLM falls back to floor-size frames, the report says scale 0
            assert scale == 0.0, case
            assert patch_cap == v._PF_FLOOR == int(curve["patch_cap"][0]), case
        else:
            assert (int(curve["frames"][0]), int(curve["patch_cap"][0])) == (frames, patch_cap), case
            assert int(curve["cost"][0]) <= budget, case
        checked += 1
    assert checked == len(SHAPES) * len(FPS) * len(BUDGETS)


def test_curve_is_monotonic_and_spans_floor_to_ceiling():
    v = vllm_compat.video_module()
    scales = np.linspace(0, 1, 41)
    curve = solver_curve(60.0, 720, 1280, 25.0, 24576, scales)
    assert curve["patch_cap"][0] == v._PF_FLOOR and curve["patch_cap"][-1] == v._PF_CEIL
    assert np.all(np.diff(curve["cost"]) >= 0)
    assert curve["fps"][0] == pytest.approx(v._FPS_MIN) and curve["fps"][-1] == pytest.approx(v._FPS_CAP)


@pytest.mark.parametrize(
    "name, settings",
    [("s1280_2s_25fps_44k_stereo", VideoSettings(seq=4096)),
     ("s320_12s_10fps_16k_mono", VideoSettings(seq=8192)),
     ("s640_6s_25fps_22k_stereo", VideoSettings(seq=32768))],
)
def test_report_solver_view_matches_vllm(name, settings, clip_factory, inspected):
    """report.solver: planned frames / patch cap / target size / scale agree with vLLM's helpers."""
    v = vllm_compat.video_module()
    report = inspected(clip_factory(name), settings)
    s = report.solver
    frames, patch_cap = v._solve_degrade(
        s.visual_budget, s.duration, s.orig_size[1], s.orig_size[0], s.orig_fps, s.seq_length
    )
    assert s.patch_cap == patch_cap
    assert s.planned_frames == max(v._MIN_FRAMES, min(frames, s.total_frames))
    assert s.frame_hard_cap == v._frame_hard_cap(s.seq_length)
    assert s.target_size == report.frames[0].decoded_size  # what vLLM actually produced
    curve = solver_curve(s.duration, s.orig_size[1], s.orig_size[0], s.orig_fps, s.seq_length,
                         np.array([s.chosen_scale]))
    assert int(curve["patch_cap"][0]) == patch_cap
    # the budget the report explains is the one vLLM's frames were planned against
    used_visual = sum(f.tokens for f in report.frames)
    assert used_visual <= s.visual_budget or s.chosen_scale == 0.0
