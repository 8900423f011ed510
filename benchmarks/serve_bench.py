"""The studio's chat beside vLLM's own OpenAI server: what the studio adds to TTFT and takes from tok/s.

Both run the same model with the same engine flags, each in its own process, at the same time (the
one not measured sits idle): ``app.py --engine inprocess`` as an operator starts it, and vLLM's
``vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs), given the engine defaults the
studio applies for dots3_note (``--mm-processor-cache-gb 0``, the studio's media limits and, on a CUDA
GPU, its CUDA-graph mode, unless the flags after ``--`` choose one). Each row sends 1, 8 or 32
requests at once, for several rounds, alternating which side goes first, after untimed warm-up rounds of
the same row on both sides: vLLM compiles Triton kernels for a batch shape the first time it meets one
(its own JIT monitor warns, e.g. ``fused_moe_kernel``), which held every request of that batch 0.6–1.4 s
on an H100, and which shapes a round makes depends on how its requests fall into the engine's steps. The
same greedy request goes to both (temperature 0, no system prompt, ``--max-tokens``), so both sides produce
the same tokens: the table checks that the output counts and the prompt counts are equal.

* Studio side: browser-like sessions (``benchmarks/gradio_queue.py``: ``queue/join`` for ``/chat``, the
  ``queue/data`` event stream, diffs applied as the page does); a token has arrived when the reply the
  page would show changes. The output count is the one on the reply's figures line (vLLM's own).
* vLLM side: ``/v1/chat/completions`` with ``stream: true``; a token has arrived with the first chunk
  that carries text (``skip_special_tokens: false``, as the studio asks); the count is the usage chunk's.
* TTFT: from the request's submission to the first token's arrival (for the studio also the part spent in
  vLLM, from its own per-request stats on the figures line: from the request's arrival in ``AsyncLLM`` to its
  first token, in 0.01 s steps); received tok/s per reply:
  ``(N - 1) / (last arrival - first arrival)``; all: every reply's tokens over the round's wall time
  (from the first submission to the last arrival). Medians over every reply (TTFT, per reply) or
  every round (all).
* The studio's replies in Gradio: the studio runs with ``GRADIO_PROFILING=1``, and a second table gives,
  per row, the medians of Gradio's own traces of the timed replies (``gradio_queue.profiling_traces``):
  the wait in its queue, preprocessing the inputs, postprocessing one streamed step, steps per reply. The
  chat's streaming events post-process their own steps (``postprocess=False``, ``chat_page.StreamedOutputs``),
  so that phase is only what Gradio still does (storing the values, moving files to the cache); the rest is
  inside the callback's time.

Goals (issue 19): TTFT added by the studio ≤ 10 ms at the median, received tok/s ≥ 98 % of vLLM's
(per reply and all), at every row; the script exits 1 when one is missed. It is a device run (a GPU
host), not a CI step; README's "The studio beside vLLM's own server" has the table.

    python -m benchmarks.serve_bench                        # GPU: the smoke test's tiny random-weight dots3_note
    python -m benchmarks.serve_bench --model DIR -- --tensor-parallel-size 8 --max-model-len 32768
    python -m benchmarks.serve_bench --cpu --rows 1 4 --rounds 2   # vLLM's CPU build: a check of the script
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks import gradio_queue
from benchmarks.stream_bench import chat_payload, chat_seen, parse_figures, realtime_client

ROWS = (1, 8, 32)
PROMPT = "Tell me a long story about the sea."
MAX_TOKENS = 512
ROUNDS = 5
WARMUP_ROUNDS = 2  # untimed rounds of each row on each side before its timed ones
MAX_MODEL_LEN = 4096
GPU_MEMORY = "0.4"  # each of the two engines' share of the GPU (--gpu-memory-utilization)
TTFT_GOAL_MS = 10.0
RATE_GOAL = 0.98
PROMPT_RE = re.compile(r"prompt \*\*([\d,]+)\*\*")
TTFT_RE = re.compile(r"TTFT \*\*([\d.]+) s\*\*")
CHOSEN_GRAPHS = ("--compilation-config", "-cc", "--enforce-eager", "-O0")  # flags that choose the CUDA-graph mode


@dataclass(frozen=True)
class Reply:
    """One streamed reply as its client saw it (``time.monotonic`` seconds)."""

    submitted: float
    arrivals: tuple[float, ...]  # every arrival that added text
    output: int  # tokens, as the engine counted them
    prompt: int | None
    error: str | None = None
    engine_ttft: float | None = None  # the studio's figures line: vLLM's own TTFT for the request (0.01 s steps)

    @property
    def ttft(self) -> float:
        return self.arrivals[0] - self.submitted

    @property
    def rate(self) -> float | None:
        span = self.arrivals[-1] - self.arrivals[0]
        return (self.output - 1) / span if self.output > 1 and span > 0 else None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.arrivals) and self.output > 0


def failed(submitted: float, error: str) -> Reply:
    return Reply(submitted, (), 0, None, error)


# ---------------------------------------------------------------- the two clients
async def studio_reply(http, base: str, fn_index: int, data: list, start: asyncio.Event) -> Reply:
    """One browser-like session on the studio's ``/chat`` (outputs 0 and 4: the chat and its figures line)."""
    session_hash = gradio_queue.new_session()
    await start.wait()
    submitted = time.monotonic()
    await gradio_queue.join(http, base, fn_index, data, session_hash)
    seen = await chat_seen(http, base, session_hash)
    figures, error = seen.figures, None if seen.error is None else str(seen.error)
    done = parse_figures(figures)
    if done is None:
        return failed(submitted, error or f"no figures at the end: {figures!r}")
    prompt, engine_ttft = PROMPT_RE.search(figures or ""), TTFT_RE.search(figures or "")
    return Reply(submitted, seen.arrivals, done["output"], int(prompt[1].replace(",", "")) if prompt else None, error,
                 float(engine_ttft[1]) if engine_ttft else None)


async def vllm_reply(http, base: str, model: str, max_tokens: int, start: asyncio.Event) -> Reply:
    """One streamed ``/v1/chat/completions`` request to vLLM's server."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "skip_special_tokens": False}
    await start.wait()
    submitted = time.monotonic()
    arrivals, usage, buffer = [], None, ""
    async with http.stream("POST", f"{base}/v1/chat/completions", json=body) as answer:
        if answer.status_code != 200:
            return failed(submitted, f"HTTP {answer.status_code}: {(await answer.aread())[:300]!r}")
        async for chunk in answer.aiter_text():
            now = time.monotonic()
            buffer += chunk
            while "\n\n" in buffer:
                line, buffer = buffer.split("\n\n", 1)
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                usage = event.get("usage") or usage
                delta = (event.get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                    arrivals.append(now)
    if not usage:
        return failed(submitted, "no usage chunk")
    return Reply(submitted, tuple(arrivals), int(usage["completion_tokens"]), int(usage["prompt_tokens"]))


async def run_round(side: str, base: str, requests: int, *, model: str, max_tokens: int) -> list[Reply]:
    """``requests`` replies at once from one side."""
    import httpx

    limits = httpx.Limits(max_connections=4 * requests + 8, max_keepalive_connections=4 * requests + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600), limits=limits) as http:
        if side == "studio":
            config = (await http.get(f"{base}/config")).json()
            fn_index, data = chat_payload(config, **{"chat-message": PROMPT, "system-prompt": "", "seed": -1,
                                                     "max-tokens": max_tokens, "temperature": 0, "top-p": 1.0})
            one = lambda start: studio_reply(http, base, fn_index, data, start)  # noqa: E731
        else:
            one = lambda start: vllm_reply(http, base, model, max_tokens, start)  # noqa: E731
        start = asyncio.Event()
        tasks = [asyncio.create_task(one(start)) for _ in range(requests)]
        await asyncio.sleep(0.2)  # every session waits on ``start``: they submit together
        start.set()
        return list(await asyncio.gather(*tasks))


# ---------------------------------------------------------------- figures
@dataclass(frozen=True)
class Side:
    """One side of one row: every reply of every round."""

    rounds: tuple[tuple[Reply, ...], ...]

    @property
    def replies(self) -> list[Reply]:
        return [r for one in self.rounds for r in one]

    @property
    def errors(self) -> list[str]:
        return [r.error or "no tokens" for r in self.replies if not r.ok]

    def engine_ttft_ms(self) -> float:
        """The median of vLLM's own TTFT of the replies (the studio's figures line), in ms."""
        values = [1000 * r.engine_ttft for r in self.replies if r.ok and r.engine_ttft is not None]
        return statistics.median(values) if values else float("nan")

    def ttft_ms(self, q: float = 0.5) -> float:
        """The median (``q`` 0.5) or the nearest-rank ``q`` quantile of the replies' TTFT, in ms."""
        values = sorted(1000 * r.ttft for r in self.replies if r.ok)
        if not values:
            return float("nan")
        return statistics.median(values) if q == 0.5 else values[max(0, math.ceil(q * len(values)) - 1)]

    def rate(self) -> float:
        values = [r.rate for r in self.replies if r.ok and r.rate]
        return statistics.median(values) if values else float("nan")

    def all_rate(self) -> float:
        """Median over rounds of every token of the round over its wall time."""
        values = []
        for one in self.rounds:
            done = [r for r in one if r.ok]
            if done:
                wall = max(r.arrivals[-1] for r in done) - min(r.submitted for r in one)
                values.append(sum(r.output for r in done) / wall)
        return statistics.median(values) if values else float("nan")

    def counts(self, key: str) -> set[int | None]:
        return {getattr(r, key) for r in self.replies if r.ok}


def row_line(requests: int, studio: Side, vllm: Side) -> tuple[str, bool]:
    added = studio.ttft_ms() - vllm.ttft_ms()
    per_reply, whole = studio.rate() / vllm.rate(), studio.all_rate() / vllm.all_rate()
    same_out = studio.counts("output") == vllm.counts("output")
    same_prompt = studio.counts("prompt") == vllm.counts("prompt")
    met = (added <= TTFT_GOAL_MS and per_reply >= RATE_GOAL and whole >= RATE_GOAL and same_out
           and not studio.errors and not vllm.errors)
    line = (f"| {requests} | {vllm.ttft_ms():.1f} / {vllm.ttft_ms(0.9):.1f} | {studio.ttft_ms():.1f} / "
            f"{studio.ttft_ms(0.9):.1f} | {studio.engine_ttft_ms():.0f} | **{added:+.1f}** | {vllm.rate():,.1f} | "
            f"{studio.rate():,.1f} | "
            f"**{100 * per_reply:.1f} %** | {vllm.all_rate():,.0f} | {studio.all_rate():,.0f} | "
            f"**{100 * whole:.1f} %** | "
            f"{_counts(studio, vllm, 'output', same_out)} | {_counts(studio, vllm, 'prompt', same_prompt)} |")
    return line, met


def _counts(studio: Side, vllm: Side, key: str, same: bool) -> str:
    shown = ", ".join(str(c) for c in sorted(studio.counts(key), key=lambda c: c or 0))
    return f"{shown} (equal)" if same else f"≠ studio {shown}, vLLM {sorted(vllm.counts(key), key=lambda c: c or 0)}"


# ---------------------------------------------------------------- the servers
def engine_flags(extra: Sequence[str], *, cpu: bool, tiny: bool, max_num_seqs: int) -> list[str]:
    """The engine flags both sides get."""
    flags = ["--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(max_num_seqs)]
    if tiny:
        flags += ["--load-format", "dummy"]
    if cpu:
        flags += ["--dtype", "bfloat16"]
    elif not any(f.split("=")[0] == "--gpu-memory-utilization" for f in extra):
        flags += ["--gpu-memory-utilization", GPU_MEMORY]
    return [*flags, *extra]


def vllm_equivalents(extra: Sequence[str], *, cpu: bool) -> list[str]:
    """What the studio adds to vLLM's defaults for dots3_note (``dots3_demo.engine.args``), as vLLM's flags."""
    from dots3_demo.engine.args import DEFAULT_CUDAGRAPH_MODE
    from dots3_demo.profiles import DEFAULT_MM_LIMITS

    given = {f.split("=")[0].split(".")[0] for f in extra if f.startswith("-")}
    flags = []
    if "--mm-processor-cache-gb" not in given:
        flags += ["--mm-processor-cache-gb", "0"]
    if "--limit-mm-per-prompt" not in given:
        flags += ["--limit-mm-per-prompt", json.dumps(dict(DEFAULT_MM_LIMITS))]
    if not cpu and not given & set(CHOSEN_GRAPHS):
        flags += ["--compilation-config", json.dumps({"cudagraph_mode": DEFAULT_CUDAGRAPH_MODE})]
    return flags


@contextlib.contextmanager
def both_servers(python: str, model: Path, flags: list[str], vllm_flags: list[str],
                 logs: Path) -> Iterator[tuple[str, str, float, float]]:
    """The studio and vLLM's server, started together; (studio URL, vLLM URL, start s each)."""
    from support import servers

    studio_port, vllm_port = servers.free_port(), servers.free_port()
    studio_cmd = [python, "app.py", "--engine", "inprocess", "--model", str(model), "--host", "127.0.0.1",
                  "--port", str(studio_port), *flags]
    vllm_cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
                "--port", str(vllm_port), *flags, *vllm_flags]
    print("studio:", " ".join(studio_cmd), "\nvLLM:  ", " ".join(vllm_cmd), file=sys.stderr, flush=True)
    started = time.monotonic()
    with servers.launch(studio_cmd, f"http://127.0.0.1:{studio_port}", logs / "studio.log",
                        gradio_queue.PROFILING_ENV) as studio, \
            servers.launch(vllm_cmd, f"http://127.0.0.1:{vllm_port}", logs / "vllm.log") as vllm:
        servers.ready(studio)
        studio_s = time.monotonic() - started
        vllm.wait_until(lambda: servers.get_json(vllm.url + "/v1/models")[0] == 200, "vLLM's server")
        yield studio.url, vllm.url, studio_s, time.monotonic() - started


# ---------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serve_bench", description=__doc__.split("\n\n")[0],
        epilog="Flags after -- are vLLM engine flags, given to both servers.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a model folder (default: a tiny random-weight model, "
                        "written for the run: dots3_note on a GPU, the real-engine tier's Qwen2 with --cpu)")
    parser.add_argument("--cpu", action="store_true", help="vLLM's CPU build (the venv scripts/cpu_engine_env.sh "
                        "builds, or $DOTS3_CPU_PYTHON) instead of this Python's vLLM")
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS), help="requests at once, one row each")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per row and side")
    parser.add_argument("--warmup-rounds", type=int, default=WARMUP_ROUNDS,
                        help="untimed rounds of each row on each side first (vLLM compiles kernels for batch shapes "
                             "it meets the first time)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="per request")
    parser.add_argument("--logs", type=Path, help="folder for the two servers' logs (default: a temporary one)")
    parser.add_argument("--replies", type=Path, help="write every reply's timings here (JSON lines: side, row, "
                        "round, submission and arrivals in ms from the round's first submission, engine TTFT)")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    return args, extra


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse_args(argv)
    from support import servers

    python = servers.cpu_python() if args.cpu else sys.executable
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        model = args.model
        if model is None and args.cpu:
            model = servers.build_tiny_model(Path(tmp) / "model", max_position_embeddings=MAX_MODEL_LEN)
        elif model is None:
            from dots3_demo.workbench.smoke import write_tiny_model

            model = write_tiny_model(Path(tmp) / "model")
        flags = engine_flags(extra, cpu=args.cpu, tiny=args.model is None, max_num_seqs=max(args.rows))
        with both_servers(python, model, flags, vllm_equivalents(extra, cpu=args.cpu), logs) as (
                studio_url, vllm_url, studio_s, vllm_s):
            priority = realtime_client()
            print(f"ready: studio {studio_s:.0f} s, vLLM {vllm_s:.0f} s; client at {priority}; warming up",
                  file=sys.stderr, flush=True)
            urls = {"studio": studio_url, "vLLM": vllm_url}
            run = lambda side, n: asyncio.run(run_round(side, urls[side], n, model=str(model),  # noqa: E731
                                                        max_tokens=args.max_tokens))
            for side in urls:  # first requests: kernels, connections, caches
                run(side, max(args.rows))
            table, phases = [], []
            for n in args.rows:
                for i in range(args.warmup_rounds):  # the batch shapes this row makes: compiled before it is timed
                    for side in (("studio", "vLLM") if i % 2 == 0 else ("vLLM", "studio")):
                        run(side, n)
                rounds: dict[str, list[tuple[Reply, ...]]] = {"studio": [], "vLLM": []}
                gradio_queue.clear_profiling(studio_url)  # the timed rounds' replies only
                for i in range(args.rounds):
                    for side in (("studio", "vLLM") if i % 2 == 0 else ("vLLM", "studio")):
                        rounds[side].append(tuple(run(side, n)))
                        if args.replies:
                            write_replies(args.replies, side, n, i, rounds[side][-1])
                studio, vllm = Side(tuple(rounds["studio"])), Side(tuple(rounds["vLLM"]))
                table.append(row_line(n, studio, vllm))
                phases.append(phase_line(n, gradio_queue.profiling_traces(studio_url, "chat")))
                print(table[-1][0], file=sys.stderr, flush=True)
                for error in {*studio.errors, *vllm.errors}:
                    print(f"  error: {error}", file=sys.stderr)
    device = gpu_line() if not args.cpu else f"vLLM's CPU build, {os.cpu_count()} CPUs"
    named = "tiny random-weight" if args.model is None else model
    print(f"\nThe studio beside vLLM's OpenAI server — {device}; model {named}; "
          f"engine flags: {' '.join(flags)}; {args.rounds} rounds per row and side, {args.max_tokens} max tokens, "
          f"greedy, after {args.warmup_rounds} untimed rounds per row and side; starts: studio {studio_s:.0f} s, "
          f"vLLM {vllm_s:.0f} s\n")
    print("| requests at once | vLLM TTFT p50 / p90 ms | studio TTFT p50 / p90 ms | of it in vLLM p50 ms "
          "| added ms (p50) "
          "| vLLM tok/s per reply | studio tok/s per reply | studio / vLLM | vLLM tok/s all | studio tok/s all "
          "| studio / vLLM | output tokens | prompt tokens |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for line, _ in table:
        print(line)
    print("\nThe studio's replies in Gradio (its profiling traces, medians over the timed replies): the wait in "
          "Gradio's queue, preprocessing the inputs, postprocessing a streamed step (Gradio's part: the chat "
          "post-processes its own steps); all before or between what the client receives\n")
    print("| requests at once | queue wait ms | preprocess ms | postprocess ms per step | steps per reply |")
    print("|---:|---:|---:|---:|---:|")
    for line in phases:
        print(line)
    met = all(ok for _, ok in table)
    print(f"\ngoals: TTFT added ≤ {TTFT_GOAL_MS:.0f} ms at the median, received tok/s ≥ {100 * RATE_GOAL:.0f} % of "
          f"vLLM's (per reply and all), same output counts, no errors — {'met' if met else 'missed'}")
    return 0 if met else 1


def phase_line(requests: int, traces: Sequence[dict[str, float]]) -> str:
    """A row of the Gradio-phases table from the studio's /chat traces (``gradio_queue.profiling_traces``)."""
    if not traces:
        return f"| {requests} | – | – | – | – |"
    wait, pre = (statistics.median(t[key] for t in traces) for key in ("queue_wait", "preprocess"))
    per_step = statistics.median(t["postprocess"] / max(1.0, t["steps"]) for t in traces)
    steps = statistics.median(t["steps"] for t in traces)
    return f"| {requests} | {wait:.1f} | {pre:.1f} | {per_step:.2f} | {steps:.0f} |"


def write_replies(path: Path, side: str, requests: int, round_: int, replies: Sequence[Reply]) -> None:
    """Append one round's replies to ``path`` (``--replies``)."""
    zero = min(r.submitted for r in replies)
    ms = lambda t: round(1000 * (t - zero), 1)  # noqa: E731
    with path.open("a") as out:
        for r in replies:
            out.write(json.dumps({"side": side, "requests": requests, "round": round_, "submitted": ms(r.submitted),
                                  "first": ms(r.arrivals[0]) if r.arrivals else None,
                                  "last": ms(r.arrivals[-1]) if r.arrivals else None, "arrivals": len(r.arrivals),
                                  "output": r.output, "engine_ttft_ms": None if r.engine_ttft is None
                                  else 1000 * r.engine_ttft, "error": r.error}) + "\n")


def gpu_line() -> str:
    import subprocess

    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        name = []
    return f"{len(name)} × {name[0]}" if name else "GPU"


if __name__ == "__main__":
    sys.exit(main())
