"""Without ``--max-num-seqs`` the chat runs as many replies at once as vLLM's own engine has slots
(``dots3_demo.serving.capacity``): vLLM's CPU build resolves its default, 128, only when it starts, after the
page is built; the studio used to serve one reply at a time then, app-wide."""

from __future__ import annotations

import pytest

from support import servers
from tests.real_engine.test_chat_real_engine import MAX_MODEL_LEN, MAX_NUM_SEQS, _four_sessions

pytestmark = [pytest.mark.real_engine]


def test_without_max_num_seqs_sessions_stream_at_once_as_vllms_default_allows(cpu_python, tiny_model, logs):
    with servers.studio(cpu_python, tiny_model, logs / "studio-default-seqs.log", max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=None) as child:
        assert "--max-num-seqs" not in child.process.args
        servers.ready(child)
        servers.pin_engine(child)  # as the chat tier does: the four sessions must start while the first streams
        for attempt in (1, 2):  # a random model may end a reply at once; that round is run again, once
            most, results = _four_sessions(child)
            if most == MAX_NUM_SEQS or attempt == 2:
                break
        firsts = [r[2].splitlines()[0] for r in results]  # /chat returns chatbot, tool panel, figures, engine line
        assert most == MAX_NUM_SEQS, f"at most {most} requests at once; figures: {firsts}"
        assert servers.wait_no_requests(child) == 0
        assert "up to 128 concurrent replies" in str(results[0][3])  # the engine line names vLLM's resolved default
