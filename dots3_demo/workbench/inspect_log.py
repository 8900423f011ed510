"""A run folder as inspect-ai's eval log (``python app.py eval-export DIR --inspect LOG.eval``), so that
``inspect view`` opens it.

The log is built from inspect-ai's own classes and written with ``inspect_ai.log.write_eval_log`` (its maintainers:
the ``.eval`` bytes are versioned but not a frozen spec, the API is the supported way for another tool to write
one). inspect-ai is optional (requirements-dev.txt, not requirements.txt): it is imported here only, and
:class:`InspectMissing` says so when it is not installed.

What goes where:

- one sample per row of ``results.jsonl`` (its key as the id), in the file's order; its input is the item's system
  prompt and user turn as the chat sent it (the prompt read from the set ``run.json`` names), the frames the
  model saw as image content (each media file inspected again under the budget the item ran with, as
  ``eval-compare`` draws them: ``paired.draw_frames``), each after its caption (a frame's timestamp text);
- the answer (its reasoning and tool calls too) as the assistant's message and the sample's output, with the
  engine's prompt and output tokens as its usage; an item's error as the sample's error;
- the item's tags, its ``metadata`` fields and what the run measured (line, run, budget, TTFT, tokens/s, media
  tokens) as sample metadata;
- the score as an inspect ``Score`` keyed by the scorer's kind: ``value``, ``explanation`` = the reason,
  ``answer`` = what was read from the reply (the letter, the number, the call's name); per scorer kind the
  accuracy and its standard error (clustered by the set's key, as the summary) in the log's results;
- the model and engine of the last run in ``run.json`` (``vllm/MODEL``, the endpoint as ``model_base_url``, the
  engine flags as ``model_args``, vLLM's version under ``packages``), every run record as the log's metadata.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from dots3_demo.budget import DEFAULT_SEQ
from dots3_demo.core.turns import DEFAULT_SYSTEM_PROMPT
from dots3_demo.profiles import Profile
from dots3_demo.workbench.accuracy import estimate
from dots3_demo.workbench.eval_results import RESULTS_NAME, RUN_NAME, EvalResult, RunsFile, plan_tokens
from dots3_demo.workbench.evalset import EvalItem, SetDefaults, read_set_with_header
from dots3_demo.workbench.paired import draw_frames
from dots3_demo.workbench.report_html import Thumbnail

INSPECT_MISSING = ("inspect-ai is not installed (pip install inspect-ai): the export writes its log with "
                   "inspect_ai.log.write_eval_log")
# write_eval_log's formats, by the log file's suffix
FORMATS: dict[str, Literal["eval", "json"]] = {".eval": "eval", ".json": "json"}

# vLLM's finish reasons as inspect's stop reasons (any other: "unknown")
_STOP_REASONS: dict[str, Literal["stop", "max_tokens", "tool_calls", "unknown"]] = {
    "stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls"}


class InspectMissing(RuntimeError):
    """inspect-ai cannot be imported."""


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the log, its samples, how many were scored, the images they carry, and a note per
    media file that could not be drawn as the run planned it (or an item whose prompt the set no longer has)."""

    path: Path
    samples: int
    scored: int
    images: int
    notes: tuple[str, ...] = ()


def read_rows(path: Path) -> tuple[EvalResult, ...]:
    """Every readable row of ``results.jsonl``, in the file's order (a line that cannot be read is left out)."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for text in lines:
            if not text.strip():
                continue
            try:
                rows.append(EvalResult.from_json(json.loads(text)))
            except (ValueError, TypeError, KeyError):
                continue
    return tuple(rows)


def _set_items(run: Mapping[str, Any]) -> tuple[dict[str, EvalItem], dict[int, EvalItem], str | None]:
    """The set's items of the run (by id, by line) and its cluster key; empty when the set is not found here."""
    set_path = Path(str(run.get("set", "")))
    if not run.get("set") or not set_path.is_file():
        return {}, {}, None
    defaults = run.get("defaults")
    seq = defaults.get("seq") if isinstance(defaults, dict) else None
    header, entries = read_set_with_header(set_path, SetDefaults(seq=seq if isinstance(seq, int) else DEFAULT_SEQ))
    items = [e for e in entries if isinstance(e, EvalItem)]
    return {i.id: i for i in items}, {i.line: i for i in items}, header.cluster


def _model_name(engine: Mapping[str, Any]) -> str:
    kind = engine.get("kind")
    if kind == "preview" or not kind:
        return "none/preview"  # planned only: no model answered
    return f"vllm/{engine.get('model') or engine.get('label') or kind}"


def _completed_at(run: Mapping[str, Any]) -> str:
    started, duration = run.get("started"), run.get("duration_s")
    try:
        return (datetime.fromisoformat(str(started)) + timedelta(seconds=float(duration or 0))).isoformat()
    except (TypeError, ValueError):
        return ""


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def sample_metadata(result: EvalResult) -> dict[str, Any]:
    """The item's tags and ``metadata`` fields, and what the run measured, as inspect's sample metadata."""
    answer = result.answer
    stats = answer.stats if answer is not None else None
    data: dict[str, Any] = {"tags": list(result.tags), **dict(result.metadata), "line": result.line, "run": result.run,
                            "cluster": result.cluster, "budget": result.budget, "media_tokens": plan_tokens(result),
                            "ttft_s": stats.ttft_s if stats else None,
                            "tokens_per_s": stats.tokens_per_s if stats else None,
                            "finish_reason": answer.finish_reason if answer else None}
    for name, value in (("notices", list(result.notices)), ("kept_over", result.kept_over),
                        ("would_refuse", result.would_refuse)):
        if value:
            data[name] = value
    return _json_safe(data)


def export_inspect_log(run_dir: Path, location: Path, profile: Profile) -> Exported:
    """Write ``run_dir`` (an ``app.py eval`` --out folder) as inspect-ai's log at ``location`` (``.eval`` or
    ``.json``). Raises :class:`InspectMissing` without inspect-ai, ``OSError`` when the folder has no results."""
    try:
        from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalResults, EvalSpec, EvalStats, write_eval_log
    except ImportError as exc:
        raise InspectMissing(INSPECT_MISSING) from exc

    rows = read_rows(run_dir / RESULTS_NAME)
    runs = RunsFile(run_dir / RUN_NAME).load()
    last: Mapping[str, Any] = runs[-1] if runs else {}
    facts = last.get("engine")
    engine: Mapping[str, Any] = facts if isinstance(facts, dict) else {}
    model = _model_name(engine)
    by_id, by_line, cluster_key = _set_items(last)
    notes: list[str] = []
    if runs and not by_id:
        notes.append(f"the set {last.get('set')} is not found here: the samples carry no prompt text")
    samples = []
    images = 0
    for result in rows:
        item = by_id.get(result.id) if result.id is not None else by_line.get(result.line)
        thumbs, drawn_notes = draw_frames(result, profile)
        notes += [f"{result.key}: {note}" for note in drawn_notes]
        samples.append(_sample(result, item, thumbs, model))
        images += sum(len(strip) for strip in thumbs)
    scored = [r for r in rows if r.score is not None and r.error is None]
    set_name = Path(str(last.get("set") or run_dir.name)).stem
    log = EvalLog(
        version=2, status="cancelled" if last.get("interrupted") else "success",
        eval=EvalSpec(
            created=last.get("started") or datetime.now().astimezone().isoformat(), task=set_name,
            task_id=set_name, run_id=str(last.get("run", "")), eval_id=str(last.get("run", "")),
            dataset=EvalDataset(name=set_name, location=str(last.get("set") or ""), samples=len(rows),
                                sample_ids=[r.key for r in rows]),
            model=model, model_base_url=engine.get("endpoint"),
            model_args=_json_safe({k: engine.get(k) for k in ("kind", "label", "engine_args", "max_model_len",
                                                              "capacity", "mm_limits") if engine.get(k)}),
            packages={"vllm": str(engine["vllm_version"])} if engine.get("vllm_version") else {},
            config=EvalConfig(), metadata=_json_safe({"dots3_runs": runs}),
        ),
        results=EvalResults(total_samples=len(rows), completed_samples=sum(1 for r in rows if r.error is None),
                            scores=_scores(scored, cluster_key)),
        stats=EvalStats(started_at=runs[0].get("started", "") if runs else "", completed_at=_completed_at(last)),
        samples=samples,
    )
    write_eval_log(log, str(location), format=FORMATS.get(location.suffix) or "auto")
    return Exported(location, len(samples), len(scored), images, tuple(notes))


def _sample(result: EvalResult, item: EvalItem | None, thumbs: Sequence[Sequence[Thumbnail]], model: str) -> Any:
    """One row as inspect's ``EvalSample``: the turn as sent (the frames as images), the answer, the score."""
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import (
        ChatCompletionChoice,
        ChatMessage,
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageUser,
        Content,
        ContentImage,
        ContentReasoning,
        ContentText,
        ModelOutput,
        ModelUsage,
    )
    from inspect_ai.scorer import Score
    from inspect_ai.tool import ToolCall

    parts: list[Content] = []
    for plan, strip in zip(result.plan, thumbs, strict=False):
        if plan.get("kind") == "audio":
            parts.append(ContentText(text=f"[audio: {plan.get('file')}]"))
        for thumb in strip:
            parts += [ContentText(text=thumb.caption), ContentImage(image=thumb.uri)]
    parts.append(ContentText(text=item.prompt if item is not None else ""))
    system = (DEFAULT_SYSTEM_PROMPT if item.system is None else item.system) if item is not None else ""
    messages: list[ChatMessage] = [ChatMessageSystem(content=system)] if system else []
    messages.append(ChatMessageUser(content=parts))
    conversation = list(messages)
    output = ModelOutput(model=model)
    usage = None
    answer = result.answer
    if answer is not None:
        reply: list[Content] = [ContentReasoning(reasoning=answer.reasoning)] if answer.reasoning else []
        reply.append(ContentText(text=answer.text))
        calls = [ToolCall(id=c.id, function=c.name, arguments=_arguments(c.arguments)) for c in answer.tool_calls]
        said = ChatMessageAssistant(content=reply, tool_calls=calls or None, model=model)
        conversation.append(said)
        stats = answer.stats
        prompt = stats.prompt.total if stats is not None and stats.prompt is not None else 0
        out = stats.output_tokens if stats is not None else 0
        usage = ModelUsage(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out)
        output = ModelOutput(model=model, usage=usage, choices=[ChatCompletionChoice(
            message=said, stop_reason=_STOP_REASONS.get(answer.finish_reason or "", "unknown"))])
    scores = None
    if result.score is not None:
        score = result.score
        extra: dict[str, Any] = {"unparsed": score.unparsed}
        if score.judge is not None:
            extra["judge"] = score.to_json()["judge"]
        scores = {score.scorer: Score(value=score.value, answer=score.extracted, explanation=score.reason,
                                      metadata=_json_safe(extra))}
    return EvalSample(
        id=result.key, epoch=1, input=messages, messages=conversation, output=output,
        target=list(item.scorer.target) if item is not None and item.scorer is not None else "",
        metadata=sample_metadata(result), scores=scores, model_usage={model: usage} if usage is not None else {},
        error=EvalError(message=result.error, traceback="", traceback_ansi="") if result.error else None,
    )


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}  # as the parser left it
    return value if isinstance(value, dict) else {"arguments": value}


def _scores(scored: Sequence[EvalResult], cluster_key: str | None) -> list[Any]:
    """Per scorer kind: the accuracy (the mean score) and its standard error, as the summary computes them."""
    from inspect_ai.log import EvalMetric, EvalScore

    by_kind: dict[str, list[tuple[float, str | None]]] = defaultdict(list)
    for result in scored:
        if result.score is not None:
            by_kind[result.score.scorer].append((result.score.value, result.cluster))
    out = []
    for kind, chosen in by_kind.items():
        est = estimate([value for value, _ in chosen], [c for _, c in chosen] if cluster_key is not None else None)
        metrics = {"accuracy": EvalMetric(name="accuracy", value=est.mean)}
        if est.se is not None and math.isfinite(est.se):
            metrics["stderr"] = EvalMetric(name="stderr", value=est.se)
        out.append(EvalScore(name=kind, scorer=kind, scored_samples=len(chosen), metrics=metrics))
    return out
