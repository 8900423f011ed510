"""The context meter against vLLM's real engine (issue 21 §4, §7): for each turn the chat's meter
(``core.context.next_turn``) counts exactly the ``prompt_token_ids`` vLLM's ``AsyncLLM`` reports for it (a text turn,
a history with tools, a tool call and its result), and it says "will not fit" exactly where the engine refuses: a
prompt of ``max_model_len - 1`` tokens is served, one of ``max_model_len`` the meter refuses and so does the engine
(sent anyway here, to show both sides). The engine is the tier's tiny Qwen2 (text only); the meter's count of images,
audio and video against vLLM's real renderer and Dots processor is ``tests/core/test_context.py``'s.
"""

from __future__ import annotations

import json
import subprocess

from support import servers

MAX_MODEL_LEN = 1024
CHILD_TIMEOUT_S = 420


def test_the_meter_counts_what_the_engine_gets_and_refuses_where_it_refuses(cpu_python, tiny_model, logs):
    log = logs / "meter-child.log"
    command = ["taskset", "-c", "1", cpu_python, "tests/real_engine/meter_child.py", str(tiny_model),
               str(MAX_MODEL_LEN)]
    done = subprocess.run(command, cwd=servers.ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                          env={**servers.os.environ, **servers.ENGINE_ENV, "PYTHONPATH": str(servers.ROOT)})
    log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    turns = {t["name"]: t for t in results["turns"]}
    assert results["max_model_len"] == MAX_MODEL_LEN
    for name in ("text", "history with tools"):
        turn = turns[name]
        assert turn.get("prompt") == turn["meter"], turn  # the engine's prompt_token_ids, counted before sending
        assert turn["fit"] == "fits" and turn["finish"] in ("stop", "length"), turn
    under, at = turns["one under the limit"], turns["at the limit"]
    assert under["meter"] == MAX_MODEL_LEN - 1 and under["fit"] == "fits"
    assert under["prompt"] == MAX_MODEL_LEN - 1 and under["output_tokens"] >= 1 and under["finish"], under  # served
    assert at["meter"] == MAX_MODEL_LEN and at["fit"] == "will not fit"  # the meter refuses it before sending…
    assert "refused" in at and "maximum model length" in at["refused"], at  # …and the engine refuses it too
