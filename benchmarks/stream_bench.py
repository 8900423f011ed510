"""Streaming benchmark: what a real client receives from the studio's chat, end to end.

A scripted engine (the tests' ``ScriptedAsyncLLM`` double of vLLM's AsyncLLM, made rate-driven
here) emits tokens at 200 / 2,000 / 10,000 tokens/s behind the real ``InProcessEngine`` (reasoning
splitter + vLLM's DotsToolParser run on every delta). The real app runs in a child process on
127.0.0.1. Each session is a browser-like client on one asyncio loop: it POSTs Gradio's
``queue/join`` for ``/chat``, reads the ``queue/data`` event stream and applies the diffs, as the
browser's JavaScript client does. (``gradio_client`` is not used: it polls its message queue every
50 ms and busy-waits per job, which measured its own latency, not the app's.) Every token is
``t<µs>`` — the wall-clock time the engine emitted it — so the client measures the latency the app
adds per update (arrival time − emission time of the newest token), the rate it receives once the
stream runs (steady state) and from submission, and whether latency drifts upward during the stream
(a growing backlog). The child's CPU and RSS are sampled with psutil (or /proc).

    python benchmarks/stream_bench.py --quick                  # 1.5 s streams
    python benchmarks/stream_bench.py                          # 5 s streams, the README table
    python benchmarks/stream_bench.py --rates 2000 --sessions 1 8

The chat coalesces engine deltas: one reply updates the UI at most every 30 ms, and the app's
``StreamPacer`` stretches that interval so all replies together make at most ~120 updates per
second (``dots3_demo/ui/pacing.py``). Structural changes (first text, a tool call, the end) are
sent at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

RATES = (200, 2000, 10000)
SESSIONS = (1, 8, 32)
TOKEN_RE = re.compile(r"t(\d{16})")
MESSAGE_RE = re.compile(r"rate=(\d+) seconds=([\d.]+)")
# The scripted engine's step: every STEP_S it hands over every token due since the last step, as
# vLLM's AsyncLLM does (one output per engine step, merged while the consumer is busy). 5 ms is
# shorter than a decode step of any dots3_note deployment.
STEP_S = 0.005


# ---------------------------------------------------------------- server side (child process)
def _rate_llm_class():
    from tests.engine.doubles import ScriptedAsyncLLM
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.v1.metrics.stats import RequestStateStats

    class RateLLM(ScriptedAsyncLLM):
        """Emits ``rate`` tokens/s for ``seconds`` (read from the user message); each delta holds
        every token due since the previous one, like vLLM's DELTA outputs for a busy consumer."""

        async def generate(self, engine_input, sampling_params, request_id):
            self.generated.append((None, None, request_id))
            conversation = engine_input["conversation"]
            text = str(conversation[-1]["content"])
            match = MESSAGE_RE.search(text)
            rate, seconds = (int(match[1]), float(match[2])) if match else (200, 1.0)
            total = int(rate * seconds)
            prompt_ids = list(engine_input["prompt_token_ids"])
            stats = RequestStateStats(arrival_time=0.0)
            start = time.monotonic()
            sent = 0
            try:
                while sent < total:
                    await asyncio.sleep(STEP_S)
                    due = min(total, int((time.monotonic() - start) * rate) + 1)
                    if due <= sent:
                        continue
                    stamp = f"t{time.time_ns() // 1000:016d} "
                    count, sent = due - sent, due
                    last = sent >= total
                    stats.num_generation_tokens += count
                    completion = CompletionOutput(
                        index=0, text=stamp * count, token_ids=list(range(count)), cumulative_logprob=None,
                        logprobs=None, finish_reason="length" if last else None,
                    )
                    yield RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=prompt_ids,
                                        prompt_logprobs=None, outputs=[completion], finished=last,
                                        metrics=stats, num_cached_tokens=0)
            finally:
                self.closed_streams.append(request_id)

    return RateLLM


def serve(port: int, capacity: int) -> None:
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.profiles import load_profile
    from dots3_demo.ui import launch_app

    class Args:
        model = "rate-scripted"
        mm_processor_cache_gb = 0
        max_model_len = 32768
        max_num_seqs = capacity

    llm = _rate_llm_class()([], max_num_seqs=capacity)
    engine = InProcessEngine(Args(), engine_factory=lambda args: llm)
    demo = launch_app(load_profile(), engine, host="127.0.0.1", port=port, seq=32768,
                      prevent_thread_lock=True, quiet=True)
    print(f"READY {demo.local_url}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes our stdin
    finally:
        demo.close()


# ---------------------------------------------------------------- client side
class Sampler(threading.Thread):
    """CPU seconds and peak RSS of the server process."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_rss, self.stop_flag = pid, 0, threading.Event()
        try:
            import psutil

            self.proc = psutil.Process(pid)
        except ImportError:
            self.proc = None

    def cpu_seconds(self) -> float:
        if self.proc is not None:
            t = self.proc.cpu_times()
            return t.user + t.system
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self) -> int:
        if self.proc is not None:
            return self.proc.memory_info().rss
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def run(self) -> None:
        while not self.stop_flag.wait(0.1):
            self.peak_rss = max(self.peak_rss, self.rss())


def _assistant_text(chatbot) -> str:
    for message in reversed(chatbot or []):
        if message.get("role") != "assistant" or message.get("metadata"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            return "".join(c.get("text", "") for c in content if isinstance(c, dict))
        return str(content or "")
    return ""


def apply_diff(value, edits):
    """Apply one ``process_generating`` diff of Gradio's SSE protocol (what the browser's client
    does): ``[action, path, value]`` with replace / append / add / delete."""
    for action, path, new in edits:
        if not path:
            value = new if action == "replace" else value + new
            continue
        target = value
        for key in path[:-1]:
            target = target[key]
        key = path[-1]
        if action == "replace":
            target[key] = new
        elif action == "append":
            target[key] += new
        elif action == "add":
            if isinstance(target, list):
                target.insert(int(key), new)
            else:
                target[key] = new
        elif action == "delete":
            del target[int(key) if isinstance(target, list) else key]
    return value


async def one_session(http, base: str, fn_index: int, rate: int, seconds: float, result: dict,
                      start: asyncio.Event) -> None:
    """One browser-like session: POST ``queue/join``, read the ``queue/data`` event stream, apply
    the diffs to the chatbot value, and time-stamp each update on arrival."""
    import json
    import uuid

    session_hash = uuid.uuid4().hex[:11]
    data = [None, None, f"rate={rate} seconds={seconds}", "", "", 0.7, 0.95, -1, 64, -1, 1.0]
    await start.wait()
    started = time.time()
    join = await http.post(f"{base}/gradio_api/queue/join", json={
        "data": data, "event_data": None, "fn_index": fn_index, "trigger_id": None,
        "session_hash": session_hash})
    join.raise_for_status()
    samples, chatbot, done = [], None, False  # samples: (receive time, newest stamp, tokens so far)
    async with http.stream("GET", f"{base}/gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
        buffer = ""
        async for chunk in stream.aiter_text():
            now = time.time()
            buffer += chunk
            while "\n\n" in buffer and not done:
                line, buffer = buffer.split("\n\n", 1)
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                kind = message.get("msg")
                if kind == "process_generating":
                    diff = message["output"]["data"][0]
                    chatbot = diff if chatbot is None else apply_diff(chatbot, diff)
                    text = _assistant_text(chatbot)
                    stamps = TOKEN_RE.findall(text[-40:])
                    if stamps:
                        samples.append((now, int(stamps[-1]) / 1e6, text.count("t")))
                elif kind in ("process_completed", "close_stream"):
                    done = True
            if done:
                break
    result.update(samples=samples, started=started, expected=int(rate * seconds))


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than 3 points)."""
    if len(xs) < 3:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


async def _run_sessions(url: str, rate: int, sessions: int, seconds: float) -> list[dict]:
    import httpx

    base = url.rstrip("/")
    limits = httpx.Limits(max_connections=4 * sessions + 8, max_keepalive_connections=4 * sessions + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits) as http:
        config = (await http.get(f"{base}/config")).json()
        fn_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "chat")
        start = asyncio.Event()
        results = [dict() for _ in range(sessions)]
        tasks = [asyncio.create_task(one_session(http, base, fn_index, rate, seconds, r, start)) for r in results]
        await asyncio.sleep(0.2)
        start.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds * 10 + 60)
    return results


def run_case(url: str, pid: int, rate: int, sessions: int, seconds: float) -> dict:
    sampler = Sampler(pid)
    sampler.start()
    cpu0, wall0 = sampler.cpu_seconds(), time.monotonic()
    results = asyncio.run(_run_sessions(url, rate, sessions, seconds))
    cpu = sampler.cpu_seconds() - cpu0
    wall = time.monotonic() - wall0
    sampler.stop_flag.set()
    latencies, steady, end_to_end, slopes, complete = [], [], [], [], 0
    for r in results:
        samples = r.get("samples") or []
        if not samples:
            continue
        complete += samples[-1][2] == r["expected"]
        latencies += [recv - stamp for recv, stamp, _ in samples]
        (t0, _, n0), (t1, _, n1) = samples[0], samples[-1]
        if t1 > t0:
            steady.append((n1 - n0) / (t1 - t0))  # tokens that arrived after the first update, per second
        end_to_end.append(n1 / (t1 - r["started"]))
        slopes.append(_slope([s[0] - t0 for s in samples], [1000 * (s[0] - s[1]) for s in samples]))
    lat = sorted(latencies)

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    updates = [len(r["samples"]) / max(1e-9, r["samples"][-1][0] - r["samples"][0][0])
               for r in results if len(r.get("samples") or []) > 1]
    return {
        "rate": rate, "sessions": sessions, "complete": complete,
        "steady_tps": statistics.mean(steady) if steady else 0.0,
        "fair": (min(steady) / max(steady)) if steady and max(steady) > 0 else 0.0,
        "e2e_tps": statistics.mean(end_to_end) if end_to_end else 0.0,
        "updates_s": statistics.mean(updates) if updates else 0.0,
        "slope": max(slopes) if slopes else 0.0,
        "p50": pct(0.50), "p99": pct(0.99), "cpu": 100 * cpu / wall, "rss": sampler.peak_rss / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1.5 s streams (default 5 s)")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, default=max(SESSIONS))
    parser.add_argument("--rates", type=int, nargs="+", default=list(RATES), help="engine tokens/s to run")
    parser.add_argument("--sessions", type=int, nargs="+", default=list(SESSIONS), help="concurrent sessions")
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.capacity)
        return 0
    seconds = 1.5 if args.quick else 5.0
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--capacity", str(args.capacity)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        url = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            if line.startswith("READY "):
                url = line.split()[1]
                break
        if url is None:
            print("server did not start", file=sys.stderr)
            return 1
        run_case(url, child.pid, 200, 1, 0.3)  # warm-up (engine start, first connection)
        rows = [run_case(url, child.pid, rate, n, seconds) for rate in args.rates for n in args.sessions]
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
    print(f"\nStream bench — {seconds:g} s streams, app in a child process on 127.0.0.1, "
          f"{os.cpu_count()} CPUs shared with the clients (one asyncio SSE client per session)\n")
    print("| engine tok/s | sessions | complete | received tok/s (steady) | % of emitted | slowest/fastest "
          "| from submit tok/s | updates/s | added latency p50 / p99 ms | latency drift ms/s "
          "| app CPU % | app RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rate']:,} | {r['sessions']} | {r['complete']}/{r['sessions']} | {r['steady_tps']:,.0f} | "
              f"{100 * r['steady_tps'] / r['rate']:.1f} | {r['fair']:.2f} | {r['e2e_tps']:,.0f} | "
              f"{r['updates_s']:.1f} | {r['p50']:.0f} / {r['p99']:.0f} | {r['slope']:+.1f} | "
              f"{r['cpu']:.0f} | {r['rss']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
