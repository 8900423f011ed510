"""A new session's server-side state is copied from one Gradio made, not re-read from every component
(``dots3_demo.serving.session_state``): N sessions that send at once must not start one after another."""

from __future__ import annotations

import pytest
from gradio import blocks as gradio_blocks
from gradio.state_holder import SessionState

from dots3_demo.serving.session_state import QuickSessions
from support.live import live_app

SEQ = 32768


@pytest.fixture
def live(profile):
    with live_app(profile, seq=SEQ, inspect_workers=1) as demo:
        yield demo


def test_the_launched_studio_makes_new_sessions_without_re_reading_every_component(live, monkeypatch):
    holder = live.state_holder
    assert isinstance(holder, QuickSessions)
    assert live.server_app.state_holder is holder  # the holder the routes use
    reads = []
    real = gradio_blocks.BlocksConfig.config_for_block

    def counted(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(gradio_blocks.BlocksConfig, "config_for_block", staticmethod(counted))
    sessions = [holder[f"session-{i}"] for i in range(8)]
    assert reads == []  # Gradio's own SessionState reads each of the ~190 blocks' config per session
    monkeypatch.undo()
    made_by_gradio = SessionState(live)
    for state in sessions:
        assert state.config_values == made_by_gradio.config_values
        assert set(vars(state)) == set(vars(made_by_gradio))
        assert state.state_data == {} and not state.is_closed


def test_sessions_do_not_share_their_state(live):
    holder = live.state_holder
    one, two = holder["one"], holder["two"]
    key = next(k for k, v in one.config_values.items() if "props" in v)
    one._update_value_in_config(key, "only in one")
    assert two.config_values[key]["props"].get("value") != "only in one"
    assert holder.fresh().config_values[key]["props"].get("value") != "only in one"
    state_block = next(k for k, b in one.blocks_config.blocks.items() if b.stateful)
    one[state_block]
    assert state_block in one.state_data and state_block not in two.state_data
    assert holder["one"] is one
