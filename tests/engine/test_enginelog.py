"""vLLM's own last lines: the load stage, the root cause of a failed start, and the tee that keeps them
(real file descriptors, a real child process writing to them, as vLLM's engine core does)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dots3_demo.engine import enginelog
from dots3_demo.engine.inprocess import start_failure_message

LOAD = [
    "(APIServer pid=1) INFO 12-03 10:00:00 [model.py:1] Resolved architecture: Qwen2ForCausalLM",
    "(EngineCore pid=2) INFO 12-03 10:00:05 [core.py:9] Initializing a V1 LLM engine (v0.32.0) with config: …",
    "(Worker pid=3) INFO 12-03 10:00:09 [runner.py:4] Starting to load model /models/x...",
]
FAILED = [
    "(EngineCore pid=2) ERROR 12-03 10:00:10 [core.py:1] EngineCore failed to start.",
    "(EngineCore pid=2) Traceback (most recent call last):",
    '(EngineCore pid=2)   File "/vllm/model_executor/model_loader/default_loader.py", line 120, in _prepare_weights',
    "(EngineCore pid=2) RuntimeError: Cannot find any model weights with `/models/x`",
    # what vLLM 0.32's CPU build prints after it, from the engine core (seen with a missing checkpoint)
    "(EngineCore pid=2) ERROR 12-03 10:26:14 [core.py:1510] Exception: WorkerProc initialization failed due to an "
    "exception in a background process. See stack trace for root cause.",
]


def test_the_stage_is_the_newest_line_that_names_one():
    assert enginelog.load_stage(LOAD[:1]) == "configuring"
    assert enginelog.load_stage(LOAD) == "loading weights"
    assert enginelog.load_stage(LOAD + ["INFO 12-03 10:00:20 [x.py:1] Warming up model for the compilation..."]) \
        == "warming up"
    assert enginelog.load_stage(["nothing to see"]) == ""


def test_lines_lose_vllms_prefix():
    assert enginelog.clean(LOAD[2]) == "Starting to load model /models/x..."
    assert enginelog.clean(FAILED[3]) == "RuntimeError: Cannot find any model weights with `/models/x`"
    assert enginelog.clean(FAILED[4]).startswith("Exception: WorkerProc initialization failed")
    assert enginelog.clean("plain") == "plain"


def test_a_failed_start_is_said_with_the_root_cause_and_no_class_name():
    generic = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    message = start_failure_message(generic, LOAD + FAILED)
    assert message == "the engine could not start: Cannot find any model weights with `/models/x`"
    worker = Exception("WorkerProc initialization failed due to an exception in a background process. See stack "
                       "trace for root cause.")
    assert start_failure_message(worker, LOAD + FAILED) == message
    own = ValueError("max_model_len (9000) is greater than the model's max_position_embeddings (4096)")
    assert start_failure_message(own, []) == f"the engine could not start: {own}"
    assert "RuntimeError" not in message and "ValueError" not in start_failure_message(own, [])


def test_the_fold_keeps_the_root_cause_when_it_scrolled_out():
    traceback = [f"(EngineCore pid=2)   File \"/vllm/x{i}.py\", line {i}, in f" for i in range(60)]
    shown = enginelog.last_lines(FAILED[:4] + traceback + FAILED[4:], count=10)
    assert len(shown) == 10 and shown[0] == "RuntimeError: Cannot find any model weights with `/models/x`"
    assert shown[1] == "…" and shown[-1].startswith("Exception: WorkerProc initialization failed")
    assert enginelog.last_lines(FAILED) == tuple(enginelog.clean(line) for line in FAILED)


def test_the_tee_keeps_what_a_child_process_prints_and_still_passes_it_on():
    script = textwrap.dedent("""
        import subprocess, sys
        from dots3_demo.engine.enginelog import OutputTail
        tail = OutputTail.shared()
        mark = tail.mark()
        print("parent line", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; print('child out'); print('child err', file=sys.stderr)"])
        import time; time.sleep(0.3)
        sys.stderr.write("seen: " + " | ".join(tail.lines(since=mark)) + "\\n"); sys.stderr.flush()
        print("last words", end="")  # then the process exits at once
    """)
    for _ in range(5):  # the pump thread used to lose what was printed just before exit, most times
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "parent line" in done.stdout and "child out" in done.stdout  # still reaches the terminal
        assert done.stdout.endswith("last words") and "seen: " in done.stderr, (done.stdout, done.stderr)
        seen = done.stderr.rsplit("seen: ", 1)[1]
        assert "parent line" in seen and "child out" in seen and "child err" in seen
