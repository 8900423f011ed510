"""The ``judge`` scorer: an LLM grades a reply through any OpenAI-compatible chat endpoint.

The judge gets the rubric, the question, the reference answer (when the set gives one) and the reply, and must
answer with a JSON object ``{"verdict": "correct" | "incorrect"}``: the request asks for it with the OpenAI
``response_format`` of type ``json_schema``, which vLLM's server enforces with structured outputs. The messages
sent and the judge's reply are kept in the score (:class:`scoring.JudgeRecord`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from dots3_demo.workbench.scoring import JudgeRecord, JudgeSpec, Score

VERDICTS = ("correct", "incorrect")
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": list(VERDICTS)}},
    "required": ["verdict"],
    "additionalProperties": False,
}
JUDGE_SYSTEM = ("You grade one answer to a question by the rubric you are given. Reply with a JSON object "
                '{"verdict": "correct"} or {"verdict": "incorrect"} and nothing else.')


class JudgeFailed(RuntimeError):
    """The judge could not be asked, or did not give a verdict (the item's error; a rerun asks again)."""


def judge_messages(spec: JudgeSpec, question: str, reply: str, reference: str | None) -> list[dict[str, str]]:
    parts = [f"Rubric:\n{spec.rubric}", f"Question:\n{question}"]
    if reference:
        parts.append(f"Reference answer:\n{reference}")
    parts.append(f"Answer to grade:\n{reply}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def judge_request(spec: JudgeSpec, messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": spec.model, "messages": messages, "temperature": 0, "max_tokens": 32,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True}}}


async def judge_score(spec: JudgeSpec, question: str, reply: str, reference: str | None,
                      timeout: float = 120.0) -> Score:
    """Ask the judge; raises :class:`JudgeFailed` when it cannot be reached or gives no verdict."""
    import httpx

    messages = judge_messages(spec, question, reply, reference)
    headers = {}
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = spec.endpoint.rstrip("/") + "/chat/completions"
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            answer = await client.post(url, json=judge_request(spec, messages), headers=headers)
            answer.raise_for_status()
            content = answer.json()["choices"][0]["message"]["content"] or ""
    except httpx.HTTPStatusError as exc:
        raise JudgeFailed(f"the judge at {url} answered HTTP {exc.response.status_code}: "
                          f"{exc.response.text[:200]}") from None
    except httpx.HTTPError as exc:
        raise JudgeFailed(f"the judge at {url} could not be reached: {exc or type(exc).__name__}") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise JudgeFailed(f"the judge at {url} sent no chat completion ({exc})") from None
    try:
        verdict = json.loads(content)["verdict"]
    except (ValueError, KeyError, TypeError):
        verdict = None
    if verdict not in VERDICTS:
        raise JudgeFailed(f"the judge gave no verdict (correct or incorrect): {content[:200]!r}")
    record = JudgeRecord(model=spec.model, endpoint=spec.endpoint, prompt=json.dumps(messages, ensure_ascii=False),
                         reply=content, verdict=verdict)
    return Score(1.0 if verdict == "correct" else 0.0, f"the judge ({spec.model}) says {verdict}", "judge",
                 extracted=verdict, judge=record)
