"""Streaming benchmark: what a real client receives from the studio's chat, end to end.

A scripted engine (the tests' ``ScriptedAsyncLLM`` double of vLLM's AsyncLLM, made rate-driven
here) emits tokens at 200 / 2,000 / 10,000 tokens/s behind the real ``InProcessEngine`` (reasoning
splitter + vLLM's DotsToolParser run on every delta). The real app runs in a child process on
127.0.0.1; N concurrent ``gradio_client`` sessions call ``/chat`` and iterate the job's partial
outputs. Every token is ``t<µs>`` — the wall-clock time the engine emitted it — so the client
measures the latency the app adds per update (receive time − emission time of the newest token)
and the token rate it really receives. The child's CPU and RSS are sampled with psutil (or /proc).

    python benchmarks/stream_bench.py --quick      # ~1 minute, loopback only
    python benchmarks/stream_bench.py              # longer streams

The chat coalesces engine deltas into at most one UI update per ``chat.MIN_YIELD_INTERVAL_S``
(30 ms) per session, so at high token rates each update carries many tokens.
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
                    await asyncio.sleep(0.002)
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


def one_session(client, rate: int, seconds: float, result: dict, barrier: threading.Barrier) -> None:
    barrier.wait()
    started = time.time()
    job = client.submit(f"rate={rate} seconds={seconds}", "", "", 0.7, 0.95, -1, 64, -1, 1.0, api_name="/chat")
    latencies, first, last, tokens = [], None, None, 0
    for output in job:
        now = time.time()
        text = _assistant_text(output[0])
        stamps = TOKEN_RE.findall(text[-40:])
        if not stamps:
            continue
        latencies.append(now - int(stamps[-1]) / 1e6)
        tokens = text.count("t")  # one 't' per token
        first = first if first is not None else now
        last = now
    result.update(latencies=latencies, tokens=tokens, first=first, last=last, started=started,
                  expected=int(rate * seconds))


def run_case(url: str, pid: int, rate: int, sessions: int, seconds: float) -> dict:
    from gradio_client import Client

    clients = [Client(url, download_files=False, verbose=False) for _ in range(sessions)]
    results = [dict() for _ in range(sessions)]
    barrier = threading.Barrier(sessions + 1)
    threads = [threading.Thread(target=one_session, args=(c, rate, seconds, r, barrier), daemon=True)
               for c, r in zip(clients, results)]
    for t in threads:
        t.start()
    sampler = Sampler(pid)
    sampler.start()
    cpu0, wall0 = sampler.cpu_seconds(), time.monotonic()
    barrier.wait()
    for t in threads:
        t.join(timeout=seconds * 10 + 60)
    cpu = sampler.cpu_seconds() - cpu0
    wall = time.monotonic() - wall0
    sampler.stop_flag.set()
    for c in clients:
        c.close()
    lat = sorted(x for r in results for x in r.get("latencies", []))
    rates = [r["tokens"] / (r["last"] - r["started"]) for r in results if r.get("last")]
    complete = sum(1 for r in results if r.get("tokens") == r.get("expected"))
    updates = [len(r.get("latencies", [])) / max(1e-9, (r["last"] - r["first"])) for r in results if r.get("last")
               and r["last"] > r["first"]]

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "rate": rate, "sessions": sessions, "complete": complete,
        "recv_tps": statistics.mean(rates) if rates else 0.0,
        "updates_s": statistics.mean(updates) if updates else 0.0,
        "p50": pct(0.50), "p99": pct(0.99), "cpu": 100 * cpu / wall, "rss": sampler.peak_rss / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1.5 s streams (default 5 s)")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, default=max(SESSIONS))
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
        rows = [run_case(url, child.pid, rate, n, seconds) for rate in RATES for n in SESSIONS]
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
    print(f"\nStream bench — {seconds:g} s streams, app in a child process on 127.0.0.1, "
          f"{os.cpu_count()} CPUs, UI updates coalesced to ≥30 ms\n")
    print("| engine tok/s | sessions | complete | received tok/s per session | UI updates/s per session "
          "| added latency p50 (ms) | p99 (ms) | app CPU % | app RSS peak (MiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rate']:,} | {r['sessions']} | {r['complete']}/{r['sessions']} | {r['recv_tps']:,.0f} | "
              f"{r['updates_s']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['cpu']:.0f} | {r['rss']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
