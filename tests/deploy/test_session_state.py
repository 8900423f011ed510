"""A new session's server-side state is copied from one Gradio made, not re-read from every component
(``dots3_demo.serving.session_state``): N sessions that send at once must not start one after another."""

from __future__ import annotations

from pathlib import Path

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


def _count_config_reads(monkeypatch) -> list[int]:
    """The block ids Gradio's ``config_for_block`` is asked for from now on (until ``monkeypatch.undo()``)."""
    reads: list[int] = []
    real = gradio_blocks.BlocksConfig.config_for_block

    def counted(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(gradio_blocks.BlocksConfig, "config_for_block", staticmethod(counted))
    return reads


def test_the_launched_studio_makes_new_sessions_without_re_reading_every_component(live, monkeypatch):
    holder = live.state_holder
    assert isinstance(holder, QuickSessions)
    assert live.server_app.state_holder is holder  # the holder the routes use
    reads = _count_config_reads(monkeypatch)
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


def test_a_new_session_copies_only_the_entries_it_reads(live):
    holder = live.state_holder
    state = holder["reader"]
    template = holder.fresh().config_values
    key = next(k for k, v in template.items() if "props" in v)
    first = state.config_values[key]
    assert state.config_values[key] is first  # copied once, then the session's own
    first["props"]["value"] = "changed in place, as Gradio does"
    for other in (holder["other"].config_values, holder.fresh().config_values):
        assert other[key]["props"].get("value") != "changed in place, as Gradio does"
        assert dict(other.items())[key]["props"].get("value") != "changed in place, as Gradio does"
    # what values() and items() hand out is the session's own too (the deep link reads them)
    for entry in holder["third"].config_values.values():
        if "props" in entry:
            entry["props"]["value"] = "third's"
    assert all(v["props"].get("value") != "third's" for v in holder.fresh().config_values.values() if "props" in v)


def test_writing_a_state_value_stores_it_as_gradio_does_without_re_reading_its_config(live, monkeypatch):
    """The chat writes its session ``gr.State`` at every streamed step; Gradio re-read the State's config each time
    (its value is not in it). A session stores the value as Gradio's own ``SessionState`` does, and reads nothing."""
    import gradio as gr

    holder = live.state_holder
    key = next(k for k, b in live.blocks.items() if isinstance(b, gr.State))
    ours, gradios = holder["writer"], SessionState(live)
    reads = _count_config_reads(monkeypatch)
    for value in ("first", "second"):
        ours[key] = value
        gradios[key] = value
    assert reads == [key, key]  # Gradio's own, once per write; none for ours
    monkeypatch.undo()
    assert ours[key] == gradios[key] == "second" and key in ours
    assert ours.state_data == gradios.state_data
    assert set(ours._state_ttl) == set(gradios._state_ttl) == {key}
    assert ours._state_ttl[key][0] == gradios._state_ttl[key][0]
    assert ours.config_values[key] == gradios.config_values[key]
    other = next(k for k, b in live.blocks.items() if isinstance(b, gr.Markdown))
    ours[other] = live.blocks[other]  # any other block: Gradio's own write, config re-read
    assert ours.config_values[other] == gradios.config_values[other]


FROZEN_CHILD = """
import gc, sys
from dots3_demo.profiles import load_profile
from dots3_demo.ui import launch_app
demo = launch_app(load_profile(), None, host="127.0.0.1", port=None, seq=8192, prevent_thread_lock=True, quiet=True,
                  freeze_heap=sys.argv[1] == "1")
print("FROZEN", gc.get_freeze_count(), flush=True)
demo.close()
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_the_served_studio_freezes_its_start_up_heap_as_vllms_server_does(freeze, tmp_path):
    """``app.py`` launches with ``freeze_heap=True``: the ~900,000 objects of start-up are out of the collector's
    reach, so no full collection holds the event loop for ~0.5 s while replies stream."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", FROZEN_CHILD, "1" if freeze else "0"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)
    frozen = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("FROZEN")]
    assert frozen, done.stderr[-2000:]
    assert (frozen[0] > 100_000) if freeze else (frozen[0] == 0)


def test_app_py_launches_with_the_heap_frozen(monkeypatch):
    import app as app_module

    seen = {}

    def launch(*args, **kwargs):
        seen.update(kwargs)

    monkeypatch.setattr("dots3_demo.ui.launch_app", launch)
    assert app_module.main(["--port", "0"]) == 0
    assert seen.get("freeze_heap") is True
