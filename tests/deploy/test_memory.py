"""``dots3_demo.serving.memory.tune_allocator``: glibc's allocator really behaves differently afterwards.

mallopt settings are process-wide and cannot be undone, so each check runs in a fresh interpreter
and compares the same allocation pattern with and without the tuning.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dots3_demo.serving import memory

pytestmark = pytest.mark.skipif(memory._glibc() is None, reason="glibc only")

# Runs in a child: allocates with libc's malloc and reports what mallinfo2/malloc_info saw.
PROBE = textwrap.dedent("""
    import ctypes, json, sys, tempfile, threading
    from dots3_demo.serving import memory

    tuned = memory.tune_allocator({}) if sys.argv[1] == "tuned" else None
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    # 1. Free a 4 MiB block (mmapped): glibc's default then raises its mmap threshold to 4 MiB.
    libc.free(libc.malloc(4 << 20))
    before = memory.mallinfo().hblks
    block = libc.malloc(256 << 10)  # a 256 KiB string: mmapped, or carved from the heap?
    mmapped = memory.mallinfo().hblks - before
    libc.free(block)

    # 2. Eight threads alive at once, each allocating: how many arenas exist?
    gate = threading.Barrier(8)
    def work():
        p = libc.malloc(1000)
        gate.wait()
        libc.free(p)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    with tempfile.TemporaryFile() as out:
        fp = ctypes.CDLL("libc.so.6").fdopen
        fp.restype = ctypes.c_void_p
        fp.argtypes = [ctypes.c_int, ctypes.c_char_p]
        stream = fp(out.fileno(), b"w")
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.malloc_info(0, stream)
        libc.fflush.argtypes = [ctypes.c_void_p]
        libc.fflush(stream)
        out.seek(0)
        arenas = out.read().decode().count("<heap nr=")
    print(json.dumps({"applied": bool(tuned and tuned.applied), "mmapped": mmapped, "arenas": arenas}))
""")


def _probe(mode: str) -> dict:
    env = {k: v for k, v in __import__("os").environ.items() if k not in memory.OPERATOR_VARIABLES}
    env.pop("LD_PRELOAD", None)
    result = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env,
                            timeout=120, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_tuning_keeps_large_blocks_out_of_the_heap_and_caps_arenas():
    default, tuned = _probe("default"), _probe("tuned")
    # Without tuning, glibc's dynamic threshold sends the 256 KiB block to the heap, and every thread
    # gets an arena of its own: the behaviour the soak showed fragmenting.
    assert default == {"applied": False, "mmapped": 0, "arenas": default["arenas"]}
    assert default["arenas"] > memory.ARENA_MAX
    assert tuned["applied"] is True
    assert tuned["mmapped"] == 1
    assert tuned["arenas"] <= memory.ARENA_MAX


@pytest.mark.parametrize("environ, reason", [
    ({"MALLOC_ARENA_MAX": "4"}, "MALLOC_ARENA_MAX set in the environment"),
    ({"MALLOC_MMAP_THRESHOLD_": "131072", "GLIBC_TUNABLES": "glibc.malloc.arena_max=1"},
     "MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES set in the environment"),
    ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "another allocator is preloaded"),
])
def test_an_operator_choice_is_left_alone(environ, reason):
    tuning = memory.tune_allocator(environ)
    assert not tuning.applied
    assert tuning.reason.startswith(reason)


@pytest.mark.parametrize("operator_value, expected", [(None, 1000), ("50", 50)])
def test_gradio_queue_analytics_are_bounded_unless_the_operator_chose(monkeypatch, profile, operator_value, expected):
    """Gradio summarises its kept events with pandas after every event; the studio keeps 1,000 and
    summarises every 100 events (``QUEUE_ANALYTICS_ENV``), unless the variables are set already."""
    from dots3_demo.ui import app as ui_app

    for name in ui_app.QUEUE_ANALYTICS_ENV:
        monkeypatch.delenv(name, raising=False)
    if operator_value is not None:
        monkeypatch.setenv("GRADIO_ANALYTICS_MAX_EVENTS", operator_value)
    demo = ui_app.launch_app(profile, None, host="127.0.0.1", port=None, seq=32768, prevent_thread_lock=True,
                             quiet=True)
    try:
        assert demo._queue.ANALYTICS_MAX_EVENTS == expected
        assert demo._queue.ANAYLTICS_CACHE_FREQUENCY == 100  # (sic: Gradio's spelling)
    finally:
        demo.close()


# Runs in a child: fills the heap with small blocks, frees all but every 64th (holes glibc cannot give
# back on its own: live blocks sit above them), then trims once.
TRIM_PROBE = textwrap.dedent("""
    import ctypes, json
    from dots3_demo.serving import memory

    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(4000) for _ in range(50_000)]  # ~200 MB carved from the heap
    for i, p in enumerate(blocks):
        ctypes.memset(p, 1, 4000)
        if i % 64:
            libc.free(p)
    held = rss_mib()
    trim = memory.PeriodicTrim(libc, interval_s=3600)
    seconds = trim.trim_once()
    print(json.dumps({"held": held, "trimmed": rss_mib(), "seconds": seconds, "trims": trim.trims}))
""")


def test_a_trim_hands_freed_heap_pages_back():
    out = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout)
    assert figures["held"] - figures["trimmed"] > 100, figures  # ~190 MB were free but held
    assert figures["trims"] == 1


def test_the_trim_runs_periodically():
    trim = memory.PeriodicTrim(memory._glibc(), interval_s=0.05).start()
    try:
        deadline = time.monotonic() + 10
        while trim.trims < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert trim.trims >= 3
    finally:
        trim.stop()
    count = trim.trims
    time.sleep(0.2)
    assert trim.trims == count  # stopped


def test_one_trimming_thread_per_process_and_none_beside_another_allocator():
    assert memory.start_periodic_trim(environ={"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) is None
    first = memory.start_periodic_trim(interval_s=3600)  # None if a launch_app in this process started one
    try:
        assert any(t.name == memory.TRIM_THREAD_NAME for t in threading.enumerate())
        assert memory.start_periodic_trim(interval_s=3600) is None
    finally:
        if first is not None:
            first.stop()
