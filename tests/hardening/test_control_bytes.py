"""No raw control bytes in any HTML the studio writes (issue 21 §6): every C0 control character and DEL, fed through
the session report, eval's report and the chat's bubbles, comes out as its visible Control Picture (NUL → ␀);
tab, line feed and carriage return stay (layout)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from dots3_demo.core.records import Answer, ReplyRating
from dots3_demo.core.reply import Reply
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import StudioState, new_session
from dots3_demo.core.text import has_controls, show_controls
from dots3_demo.engine.protocol import ToolCall, TurnStats
from dots3_demo.ui import chat_views, views
from dots3_demo.workbench import record as rec
from tests.workbench.test_eval_preview import run_eval, write_set

CONTROLS = "".join(chr(c) for c in range(0x20)) + "\x7f"
HOSTILE = f"before{CONTROLS}after"
RAW = {chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"} | {"\x7f"}


def _raw(text: str) -> set[str]:
    return {c for c in text if c in RAW}


def test_control_pictures():
    shown = show_controls(HOSTILE)
    assert shown.startswith("before␀␁␂") and shown.endswith("␟␡after") and "\t\n" in shown and "\r" in shown
    assert len(shown) == len(HOSTILE) and not has_controls(shown) and has_controls(HOSTILE)
    assert views.esc("<b>\x00</b>") == "&lt;b&gt;␀&lt;/b&gt;"


def test_the_session_report_shows_control_bytes_visibly(profile):
    call = ToolCall(id="c1", name=f"look{CONTROLS}up", arguments=json.dumps({"q": HOSTILE}), result=HOSTILE,
                    status="answered")
    messages = ({"role": "user", "content": [{"type": "text", "text": HOSTILE}]},
                {"role": "assistant", "content": HOSTILE, "tool_calls": [call.as_openai()]},
                {"role": "tool", "tool_call_id": f"c1{CONTROLS}", "content": HOSTILE})
    answer = Answer(text=HOSTILE, reasoning=HOSTILE, tool_calls=(call,), finish_reason="tool_calls",
                    stats=TurnStats(output_tokens=3))
    session = replace(new_session(), messages=messages, answers=(answer,), tools=(call,),
                      ratings=(ReplyRating(reply=0, verdict="up", note=HOSTILE),))
    chat = rec.chat_setup(ChatSettings(system_prompt=HOSTILE, tools_json=HOSTILE))
    record = rec.build_record(session, StudioState(), chat, profile=profile, model=HOSTILE)
    page = rec.report_page(record)
    assert _raw(page) == set() and "before␀␁" in page


def test_evals_report_shows_control_bytes_visibly(tmp_path: Path):
    set_path = write_set(tmp_path / "set.jsonl", [{"id": f"q{CONTROLS}", "prompt": HOSTILE, "expect": [HOSTILE],
                                                   "tags": [HOSTILE]}])
    status, _, stderr = run_eval(str(set_path), "--out", str(tmp_path / "out"))
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert _raw(page) == set(), (status, stderr)
    assert "before␀␁" in page


def test_the_chats_bubbles_show_control_bytes_visibly():
    call = ToolCall(id="c1", name="lookup", arguments=HOSTILE)  # arguments that are not JSON: shown as text
    reply = Reply(Answer(text=HOSTILE, reasoning=HOSTILE, tool_calls=(call,)), "streaming")
    bubbles = [*chat_views.answer_bubbles(replace(reply, notices=(HOSTILE,))),
               *chat_views.user_bubbles(HOSTILE, ()), chat_views.notice(HOSTILE),
               chat_views.tool_result_bubble(replace(call, result=HOSTILE))]
    for bubble in bubbles:
        assert _raw(str(bubble["content"])) == set(), bubble
    assert reply.engine_message()["content"] == HOSTILE  # what the model gets is untouched
