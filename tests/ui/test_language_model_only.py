"""``--language-model-only``: the panels still inspect and say the media will not reach the model; Send
explains it before anything goes to (or waits for) the engine."""

from __future__ import annotations

import asyncio

from dots3_demo.core.state import initial_state, new_session
from dots3_demo.engine.args import make_engine_args
from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.inspection.session import Workers
from dots3_demo.ui import chat, handlers
from dots3_demo.ui.inspect_page import on_images, on_inspected
from support.uploads import Page
from tests.ui.test_chat import SEQ, _Args, _settings

MODEL = "assets/preview_profile"


def _never_built(args):
    raise AssertionError("the engine must not be started for a turn it cannot take")


def test_the_flag_is_known_before_the_engine_loads():
    engine = InProcessEngine(make_engine_args(MODEL, language_model_only=True), engine_factory=_never_built)
    assert engine.mm_limits == {"image": 0, "audio": 0, "video": 0} and engine.status.state == "idle"
    assert handlers.media_note(engine) == handlers.TEXT_ONLY_NOTE
    assert handlers.media_note(InProcessEngine(_Args(), engine_factory=_never_built)) == ""  # unknown yet
    assert handlers.media_note(None) == ""


def test_uploads_inspect_and_say_the_media_will_not_reach_the_model(profile, tmp_path):
    from tests.engine.media import make_png

    engine = InProcessEngine(make_engine_args(MODEL, language_model_only=True), engine_factory=_never_built)
    paths = [str(make_png(tmp_path / "a.png"))]
    for with_engine, says in ((engine, True), (None, False)):  # the page's callbacks, in the order it runs them
        session = handlers.new_inspections(initial_state(SEQ))
        state, status, *_ = on_images(profile, session, paths, engine=with_engine, workers=Workers(1))
        after_state, after_status, *_ = on_inspected(profile, with_engine, session)
        assert after_state is state
        assert len(state.images) == 1 and state.images[0][1].tokens > 0  # inspected as usual
        for line in (status, after_status):
            assert line.startswith("✓ 1 image(s)")
            assert ("not sent to the model" in line) == says


def test_send_explains_before_anything_reaches_the_engine(profile, tmp_path):
    from tests.engine.media import make_png

    engine = InProcessEngine(make_engine_args(MODEL, language_model_only=True), engine_factory=_never_built)
    outcome = Page(profile, initial_state(SEQ)).images([str(make_png(tmp_path / "b.png"))])
    assert outcome.error is None

    async def main():
        return [v async for v in chat.send_message(engine, outcome.state, new_session(), "what is it?",
                                                   _settings())]

    views = asyncio.run(main())
    assert len(views) == 1 and views[0].done
    assert "This engine takes no image input" in views[0].session.display[-1]["content"]
    assert views[0].session.messages == ()  # nothing queued for the model
    assert engine.status.state == "idle"  # not started, never waited for
