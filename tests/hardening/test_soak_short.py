"""A short soak in CI: ``python -m benchmarks.soak`` with 8 simulated users for 12 s.

The real app (child process) over the session-aware scripted engine; users upload, chat, stop
mid-stream and answer tool calls through ``gradio_client`` on loopback. Asserted: no errors, no
cross-talk, no engine request left open, every stop aborted its request, and a bound on the memory
the run leaves behind (see ``test_memory_left_behind_is_bounded``). The RSS slope is not asserted:
12 s are too short for a slope (the full run gives it, and fails above 5 MiB/min).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSIONS, SECONDS = 8, 12
# The memory bound (test_memory_left_behind_is_bounded). A conversation holds a Gradio session
# (~0.1 MiB: a copy of the components' config, README's soak section), its uploads' reports and its
# chat history, all tiny here (96×64 media); a video upload's figures, were they kept, are ~1 MiB
# each (a 640×480 RGBA canvas), four per upload. So 2 MiB per conversation is ~20× what one holds and
# below what one leaked upload would leave. WARMUP_MIB covers one-off growth that is no leak:
# matplotlib's font faces per worker thread (up to 64 × ~0.3 MiB), thread stacks, import-time caches.
# Measured on the 2-core CI box: the RSS after gc + malloc_trim ends 3 MiB *below* the start.
PER_CONVERSATION_MIB, WARMUP_MIB = 2.0, 48.0


@pytest.fixture(scope="module")
def figures() -> dict:
    """The soak's figures (its ``--json`` line)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--sessions", str(SESSIONS), "--seconds", str(SECONDS),
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


def test_memory_left_behind_is_bounded(figures):
    """What the run leaves in the app, after a garbage collection and ``malloc_trim`` (so the glibc
    pages freed but still held do not count), grows by at most PER_CONVERSATION_MIB per conversation
    over the RSS when the clock started (after the warm-up user ran every action once)."""
    rss = figures["rss_mib"]
    conversations = figures["conversations"]
    assert rss["start"] > 0 and conversations >= SESSIONS  # each user holds at least one conversation
    allowed = WARMUP_MIB + PER_CONVERSATION_MIB * conversations
    grown = rss["end_after_trim"] - rss["start"]
    assert grown <= allowed, (f"{grown:.1f} MiB left after {conversations} conversations "
                              f"(gc + malloc_trim), above {allowed:.0f} MiB: a leak per session?")
    assert figures["failed"] == []  # --max-slope inf: only errors, cross-talk or orphans could fail it
