"""A short soak in CI: ``benchmarks/soak.py`` with 8 simulated users for 12 s.

The real app (child process) over the session-aware scripted engine; users upload, chat, stop
mid-stream and answer tool calls through ``gradio_client`` on loopback. Asserted: no errors, no
cross-talk, no engine request left open, and every stop aborted its request. Memory is reported,
not asserted: 12 s are too short for a slope (the full run gives the slope).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSIONS, SECONDS = 8, 12


@pytest.fixture(scope="module")
def figures() -> dict:
    """The soak's figures (its ``--json`` line)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--sessions", str(SESSIONS), "--seconds", str(SECONDS),
         "--json", "--max-slope", "inf"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no figures (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    result = json.loads(lines[-1])
    print(json.dumps({k: v for k, v in result.items() if k != "final"}, indent=1))  # shown with -s / on failure
    return result


def test_no_errors_no_crosstalk_no_orphans(figures):
    assert figures["errors"] == 0, figures["error_samples"]
    assert figures["crosstalk"] == 0, figures["error_samples"]
    assert figures["orphans"] == 0 and figures["engine"]["open"] == 0 and figures["engine"]["active"] == 0
    assert figures["stuck_users"] == 0


def test_every_action_ran(figures):
    assert figures["sessions"] == SESSIONS
    assert figures["turns"] > 0 and figures["uploads"] > 0
    assert figures["stops"] > 0 and figures["tool_round_trips"] > 0


def test_every_request_ended_and_every_stop_aborted(figures):
    engine = figures["engine"]
    assert engine["generated"] == engine["closed"] == engine["finished"] + engine["aborted"]
    assert engine["aborted"] >= figures["stops"]


def test_memory_is_reported(figures):
    rss = figures["rss_mib"]
    assert 0 < rss["start"] <= rss["end"] + 64  # loose: a short run is mostly warm-up
    assert figures["failed"] == []  # --max-slope inf: only errors, cross-talk or orphans could fail it
