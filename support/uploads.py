"""Uploads run the way the page's events run them (tests only): one visitor's page, no server.

Every upload to the page, and every move of a Budget control, runs these steps in order
(``dots3_demo.ui.inspect_page.setup_inspection_events``):

1. *arrives*: ``handlers.announce_*`` (the panel's job in flight is cancelled, the panel shown busy);
2. the inspection: ``handlers.inspect_*`` → a ``PanelUpdate``: the state, the status line, the
   toast, and the panel's own views (its ``EVENT_KEYS``); a video's frames are shown before it, as vLLM
   makes them (``frames_shown``);
3. then ``on_inspected`` (``handlers.status_md`` and ``handlers.shared_views``: the status line of
   every panel, the state the chat reads, the summary and the budget bar), ``on_figures``
   (``handlers.panel_figures``: the panel's figures) and, for the video, ``on_later_views``
   (``handlers.later_views``: the frame strip, the solver, the interleave).

:class:`Page` runs them one after the other, as one visitor who waits for each result does, and
returns what the page then shows (:class:`Shown`), step by step. The app's callbacks wrap these
calls in Gradio only (``gr.skip()`` for a view left alone, the galleries as JPEG files, the
text-only engine's note): tests/ui/test_wiring.py and tests/ui/test_language_model_only.py run them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dots3_demo.core.state import StudioState
from dots3_demo.inspection.limits import UploadLimits
from dots3_demo.inspection.video import SampledFrames, VideoSettings
from dots3_demo.profiles import Profile
from dots3_demo.ui import handlers


@dataclass(frozen=True)
class Shown:
    """What the page shows after one event: the state it holds, its status line, the toast, and each
    step's views (a view a step leaves alone is not in its dict)."""

    state: StudioState  # the page's state (gr.State) once every step ran
    status: str  # the status line the page ends on: one line per panel
    error: str | None  # the toast (``gr.Warning``), None when there is none
    panel: dict[str, Any]  # the inspection's own views: its panel's ``EVENT_KEYS``
    shared: dict[str, Any]  # ``on_inspected``'s: ``SHARED_KEYS`` (empty when the state did not change)
    figures: dict[str, Any]  # ``on_figures``': ``FIGURE_KEYS``
    later: dict[str, Any] = field(default_factory=dict)  # ``on_later_views``': ``LATER_KEYS`` (the video's)
    frame_steps: tuple[SampledFrames, ...] = ()  # the video's frames shown before the inspection's result, in order

    @property
    def views(self) -> dict[str, Any]:
        """Every view the event set, whichever step set it."""
        return {**self.panel, **self.shared, **self.figures, **self.later}


class Page:
    """One visitor's page showing ``state`` — its views drawn, as the page load draws them
    (``handlers.all_views``) — with its own inspection session (``handlers.new_inspections``)."""

    def __init__(self, profile: Profile, state: StudioState, *, limits: UploadLimits = UploadLimits()) -> None:
        self.profile = profile
        self.limits = limits
        self.session = handlers.new_inspections(state)
        self.session.claim("shared", self.session.version)  # the page load drew the summary of ``state``

    @property
    def state(self) -> StudioState:
        return self.session.state

    def video(self, path: str | None, settings: VideoSettings | None = None) -> Shown:
        """The video panel's upload (``None``: cleared) with the Budget tab at ``settings`` (default:
        the state's)."""
        settings = settings if settings is not None else self.state.settings
        handlers.announce_video(self.session, path)
        early: list[SampledFrames] = []
        return self._after(handlers.inspect_video(self.session, self.profile, path, settings, limits=self.limits,
                                                  frames_shown=early.append), early)

    def settings(self, settings: VideoSettings) -> Shown:
        """A Budget control moved: the tab now reads ``settings``."""
        handlers.announce_settings(self.session)
        early: list[SampledFrames] = []
        return self._after(handlers.inspect_settings(self.session, self.profile, settings, limits=self.limits,
                                                     frames_shown=early.append), early)

    def images(self, paths: Sequence[Any] | str | None) -> Shown:
        handlers.announce_images(self.session, paths)
        return self._after(handlers.inspect_images(self.session, self.profile, paths, limits=self.limits))

    def audio(self, path: str | None, source: str = "file") -> Shown:
        """The audio file input's (``source="file"``) or the microphone's (``"microphone"``) upload."""
        handlers.announce_audio(self.session, path, source)
        return self._after(handlers.inspect_audio(self.session, self.profile, path, source, limits=self.limits))

    def _after(self, update: handlers.PanelUpdate | None, early: Sequence[SampledFrames] = ()) -> Shown:
        assert update is not None, "superseded: nothing else runs on this page"
        status = handlers.status_md(self.session)
        state, shared = update.state, {}
        drawn = handlers.shared_views(self.profile, self.session)
        if drawn is not None:
            state, shared = drawn
        figures = handlers.panel_figures(self.session)
        later = handlers.later_views(self.profile, self.session)
        return Shown(state, status, update.error, dict(update.views), shared, figures, later, tuple(early))
