"""Soak test: many simulated users against the real app and a scripted engine, on loopback.

The real studio (``launch_app`` with the real ``InProcessEngine``) runs in a child process over
``SoakLLM``, a session-aware scripted double of vLLM's ``AsyncLLM`` (real ``RequestOutput``
objects). Every user message carries its conversation's token (``u07c3 t5``); the double answers
``[u07c3 t5 n4] …`` — the token of the last user message and how many user messages of that token
the conversation holds — and ``CROSSTALK`` if the rendered conversation mixes tokens. So the
client sees at once when a reply or a history reaches the wrong session.

``--sessions`` users (each a ``gradio_client.Client`` in a thread) loop for ``--seconds``. A user
holds a conversation of 5–10 turns, then reloads as a browser does: its client closes (the
heartbeat connection too, so Gradio sees the tab close) and a new one connects (a new Gradio
session; uploads and chat start over). Each conversation starts with an upload through the
inspect endpoints (image, audio or video, by user; a quarter of the users chat without media) and
mixes:

* chat: ``/chat`` streamed to the end; the reply must carry the user's own token;
* stop: a slow reply cancelled mid-stream with ``job.cancel()`` (the app must abort it);
* tool: a message the double answers with a Dots ``get_weather`` call, then ``/run_example_tool``
  or ``/tool_result``; the continuation must carry the token too;
* re-upload: the same file inspected again (the inspector's queue is app-wide, one at a time).

Before the clock starts, one user runs every action once per media kind (the app's first
inspections import and compile; they are not in the figures). At the end (every client closed,
then a grace period) the child reports the engine requests still open: ``generate`` calls whose
stream neither finished, closed nor was aborted. The parent samples the child's RSS and CPU every
2 s (and glibc's ``mallinfo2`` every 10 s); the slope is fitted from the end of the warm-up to the
deadline, while every user is busy.

    python -m benchmarks.soak                      # 50 users × 300 s (the issue's figures)
    python -m benchmarks.soak --quick              # 8 users × 20 s
    python -m benchmarks.soak --sessions 8 --seconds 20 --json   # one JSON line (CI)
    python -m benchmarks.soak --no-reload          # each user keeps one session and conversation

Memory: the RSS of the app is sampled throughout, with what glibc's ``malloc`` has handed out
and still holds free (fragmentation shows as the second growing; the app itself trims every 30 s,
``dots3_demo.serving.memory``). At the end it is read once more after a garbage collection and
``malloc_trim``, and once more after dropping every session Gradio holds. The app drops a closed
tab's session ``--closed-session-ttl`` seconds after it closed (the app's default is an hour; the
soak passes 10 s so that five minutes reach the steady state, where closing and dropping balance).
``--no-reload`` keeps one session per user, to take session churn out (each conversation then
grows for the whole run, and the memory with it).

Exit status 1 if errors, cross-talk or orphaned requests are not 0, or the RSS slope is above
``--max-slope`` MiB/min.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

TOKEN_RE = re.compile(r"\b(u\d+c\d+) t(\d+)\b")
REPLY_RE = re.compile(r"^\[(u\d+c\d+) t(\d+) n(\d+)\]")
CONVERSATION_RE = re.compile(r"\bu\d+c\d+\b")
TOOL_MARKER, SLOW_MARKER = "CALL_TOOL", "SLOW_REPLY"
TOOL_CALL_XML = (" <dots_function_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
                 "</invoke>\n</dots_function_call>")
STREAM_CLOSE_S = 15.0  # how long a user waits for its client's event stream to close between actions
TIMEOUT_S = 60  # an HTTP request of a client slower than this counts as an error (the host may be busy)
CLOSED_SESSION_TTL_S = 10.0  # the app's --closed-session-ttl in the soak (see --closed-session-ttl)
CAPACITY = 64  # the double's max_num_seqs: above --sessions, so chat replies never wait for a slot
MAX_MODEL_LEN = 32768
# the chat's controls by name (dots3_demo.ui.layout.ChatControls gives the /chat API's order)
CHAT_CONTROLS = {"system_prompt": "", "temperature": 0.7, "top_p": 0.95, "top_k": -1, "max_tokens": 256, "seed": -1,
                 "repetition_penalty": 1.0, "tool_choice": "auto"}
VIDEO_CONTROLS = (MAX_MODEL_LEN, True, 0, 0, 1.0, "eval_ek")  # seq, auto reserve, reserve, max new, cap, k_mode


# ---------------------------------------------------------------- server side (child process)
def _soak_llm(capacity: int) -> Any:
    """Build the session-aware double (imports vLLM: child process only)."""
    from types import SimpleNamespace

    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.v1.metrics.stats import RequestStateStats

    from support.doubles import RecordingRenderer

    class QuietRenderer(RecordingRenderer):
        """The tests' renderer stand-in without its call log (it would grow for the whole soak)."""

        async def render_chat_async(self, conversations, chat_params, tok_params, *, prompt_extras=None):
            result = await super().render_chat_async(conversations, chat_params, tok_params,
                                                     prompt_extras=prompt_extras)
            self.calls.clear()
            return result

    def text_of(message: dict[str, Any]) -> str:
        content = message.get("content")
        if isinstance(content, list):
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return str(content or "")

    class SoakLLM:
        """Answers per conversation token (see the module docstring); counts requests, keeps no history."""

        def __init__(self) -> None:
            self.renderer = QuietRenderer()
            self.vllm_config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=capacity))
            limits = {"image": 8, "audio": 4, "video": 1}
            self.model_config = SimpleNamespace(
                max_model_len=MAX_MODEL_LEN,
                multimodal_config=SimpleNamespace(get_limit_per_prompt=lambda m: limits.get(m, 0)))
            self.counts: Counter[str] = Counter()
            self.open: set[str] = set()

        @staticmethod
        def plan(conversation: list[dict[str, Any]]) -> tuple[list[str], float]:
            """The reply's deltas and the pause before each."""
            users = [text_of(m) for m in conversation if m.get("role") == "user"]
            found = [TOKEN_RE.search(text) for text in users]
            tokens = [m.groups() for m in found if m]
            if not tokens or len({token for token, _ in tokens}) != 1:
                return [f"CROSSTALK {sorted({token for token, _ in tokens})}"], 0.0
            token, turn = tokens[-1]
            tag = f"[{token} t{turn} n{len(tokens)}]"
            last = conversation[-1]
            if last.get("role") == "tool":
                return [tag, " tool said", f" {str(last.get('content'))[:40]}"], 0.01
            if TOOL_MARKER in users[-1]:
                return [tag, " checking.", TOOL_CALL_XML], 0.01
            if SLOW_MARKER in users[-1]:
                return [tag] + [f" slow{i}" for i in range(150)], 0.02
            return [tag] + [f" w{i}" for i in range(12)], 0.01

        async def generate(self, engine_input, sampling_params, request_id):
            self.counts["generated"] += 1
            self.open.add(request_id)
            deltas, delay = self.plan(engine_input["conversation"])
            prompt_ids = list(engine_input["prompt_token_ids"])
            stats = RequestStateStats(arrival_time=0.0)
            try:
                for step, text in enumerate(deltas):
                    await asyncio.sleep(delay)
                    last = step == len(deltas) - 1
                    stats.num_generation_tokens += 1
                    completion = CompletionOutput(index=0, text=text, token_ids=[0], cumulative_logprob=None,
                                                  logprobs=None, finish_reason="stop" if last else None)
                    if last:  # counted before the yield: the adapter closes the stream right after it
                        self.counts["finished"] += 1
                    yield RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=prompt_ids,
                                        prompt_logprobs=None, outputs=[completion], finished=last,
                                        metrics=stats, num_cached_tokens=0)
            finally:
                self.counts["closed"] += 1
                self.open.discard(request_id)

        async def abort(self, request_id: str) -> None:
            self.counts["aborted"] += 1
            self.open.discard(request_id)

        def shutdown(self) -> None:
            pass

    return SoakLLM()


def _collect_and_trim() -> float:
    """``gc.collect()`` and glibc's ``malloc_trim(0)``; this process's RSS (MiB) afterwards.

    What is left is memory in use (live objects, caches, retained sessions); the difference to the
    RSS before is memory the allocator held but no object used (fragmentation, per-thread arenas).
    """
    import ctypes
    import gc

    import psutil

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: report the RSS after the collection only
        pass
    return psutil.Process().memory_info().rss / 2**20


def _malloc_figures() -> dict[str, float]:
    """glibc's ``mallinfo2``: MiB handed out by ``malloc`` and still in use, and MiB it holds free."""
    from dots3_demo.serving.memory import mallinfo

    info = mallinfo()
    if info is None:
        return {}
    return {"malloc_in_use_mib": round((info.uordblks + info.hblkhd) / 2**20, 1),
            "malloc_free_mib": round(info.fordblks / 2**20, 1)}


def serve(port: int, capacity: int, closed_session_ttl: float) -> None:
    """Run the studio on ``port``; answer ``stats`` lines on stdin with a ``STATS {json}`` line."""
    from dots3_demo.engine.inprocess import InProcessEngine
    from dots3_demo.profiles import load_profile
    from dots3_demo.tools import EXAMPLE_TOOLS
    from dots3_demo.ui import launch_app

    class Args:
        model = "soak-scripted"
        mm_processor_cache_gb = 0
        max_model_len = MAX_MODEL_LEN
        max_num_seqs = capacity

    llm = _soak_llm(capacity)
    engine = InProcessEngine(Args(), engine_factory=lambda args: llm)
    demo = launch_app(load_profile(), engine, host="127.0.0.1", port=port, seq=MAX_MODEL_LEN,
                      closed_session_ttl=closed_session_ttl, prevent_thread_lock=True, quiet=True)
    print(f"TOOLS {json.dumps(EXAMPLE_TOOLS)}", flush=True)
    print(f"READY {demo.local_url}", flush=True)

    def stats() -> dict[str, Any]:
        holder = getattr(demo, "state_holder", None)
        return {**llm.counts, "open": len(llm.open), "active": len(engine.active_requests),
                "gradio_sessions": len(holder.session_data) if holder is not None else -1, **_malloc_figures()}

    try:
        for line in sys.stdin:
            if line.strip() == "stats":
                print(f"STATS {json.dumps(stats())}", flush=True)
            elif line.strip() == "trim":
                trimmed = _collect_and_trim()
                holder = getattr(demo, "state_holder", None)
                if holder is not None:  # what the sessions Gradio keeps (an hour after a tab closes) hold
                    holder.session_data.clear()
                without = _collect_and_trim()
                print(f"STATS {json.dumps({'rss_mib_after_trim': trimmed, 'rss_mib_without_sessions': without})}",
                      flush=True)
    finally:
        print(f"STATS {json.dumps(stats())}", flush=True)
        demo.close()


# ---------------------------------------------------------------- client side
@dataclass
class Tally:
    """What the users did and saw (shared by the user threads, guarded by ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    conversations: int = 0
    uploads: int = 0
    turns: int = 0
    stops: int = 0
    tool_round_trips: int = 0
    errors: int = 0
    crosstalk: int = 0
    turn_seconds: list[float] = field(default_factory=list, repr=False)
    error_samples: list[str] = field(default_factory=list, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def error(self, user: int, what: str, crosstalk: bool = False) -> None:
        with self.lock:
            self.errors += 0 if crosstalk else 1
            self.crosstalk += 1 if crosstalk else 0
            if len(self.error_samples) < 20:
                self.error_samples.append(f"user {user}: {what}"[:300])


def _texts(value: Any) -> list[str]:
    """Every string inside a component value (chatbot messages, their content blocks)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for key, v in value.items() if key not in ("metadata", "options") for t in _texts(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return []


def _last_reply(chatbot: Any) -> str:
    """The text of the last plain assistant message (not a tool or thinking bubble)."""
    for message in reversed(chatbot or []):
        if isinstance(message, dict) and message.get("role") == "assistant" and not message.get("metadata"):
            return " ".join(_texts(message.get("content")))
    return ""


class User:
    """One simulated user: conversations of chat, stop, tool and upload actions (see module docstring)."""

    def __init__(self, index: int, url: str, files: dict[str, Path], tools_json: str, deadline: float,
                 tally: Tally, *, reload: bool = True) -> None:
        self.index, self.url, self.files, self.tools_json = index, url, files, tools_json
        self.deadline, self.tally, self.reload = deadline, tally, reload
        self.rng = random.Random(index)
        self.kind = ("image", "audio", "video", None)[index % 4]
        self.client: Any = None
        self.token = ""
        self.turn = 0
        self.sure = 0  # user messages the conversation certainly holds (completed turns)
        self.maybe = 0  # … and those it may hold (a stopped turn, if it was saved before the stop)

    # -- helpers --------------------------------------------------------------------------
    def _controls(self) -> tuple[Any, ...]:
        from dots3_demo.ui.layout import ChatControls

        return ChatControls.ordered({**CHAT_CONTROLS, "tools_json": self.tools_json})

    def _check_reply(self, chatbot: Any, what: str, *, tool: bool = False) -> bool:
        """The last reply carries this conversation's token and turn; the history only this token."""
        foreign = {t for t in CONVERSATION_RE.findall(" ".join(_texts(chatbot))) if t != self.token}
        reply = _last_reply(chatbot)
        if foreign or reply.startswith("CROSSTALK"):
            self.tally.error(self.index, f"{what}: foreign tokens {sorted(foreign)} / {reply[:80]!r}", crosstalk=True)
            return False
        match = REPLY_RE.match(reply)
        if not match or match[1] != self.token or int(match[2]) != self.turn:
            token_in_reply = match[1] if match else None
            self.tally.error(self.index, f"{what}: reply {reply[:80]!r} (expected {self.token} t{self.turn})",
                             crosstalk=token_in_reply is not None and token_in_reply != self.token)
            return False
        if not self.sure + 1 <= int(match[3]) <= self.maybe:  # this turn's message included
            self.tally.error(self.index, f"{what}: the conversation holds {match[3]} user messages, expected "
                             f"{self.sure + 1}..{self.maybe}")
            return False
        if tool and "tool said" not in reply:
            self.tally.error(self.index, f"{what}: the tool continuation is {reply[:80]!r}")
            return False
        return True

    def _message(self, extra: str) -> str:
        self.turn += 1
        self.maybe += 1
        return f"{self.token} t{self.turn} {extra}".strip()

    # -- actions --------------------------------------------------------------------------
    def upload(self) -> None:
        from gradio_client import handle_file

        if self.kind is None:
            return
        path = self.files[self.kind]
        if self.kind == "image":
            result = self.client.predict([handle_file(str(path))], api_name="/inspect_images")
        elif self.kind == "audio":
            result = self.client.predict(handle_file(str(path)), api_name="/inspect_audio")
        else:
            result = self.client.predict(handle_file(str(path)), *VIDEO_CONTROLS, api_name="/inspect_video")
        status = result[0] if isinstance(result, (list, tuple)) else result
        if not isinstance(status, str) or "✓" not in status:
            self.tally.error(self.index, f"upload {self.kind}: {str(status)[:120]!r}")
            return
        self.tally.add(uploads=1)

    def chat(self) -> None:
        started = time.monotonic()
        message = self._message("hello there")
        result = self.client.predict(message, *self._controls(), api_name="/chat")
        if self._check_reply(result[0], "chat"):
            self.sure += 1
            self.tally.add(turns=1)
            with self.tally.lock:
                self.tally.turn_seconds.append(time.monotonic() - started)

    def stop(self) -> None:
        job = self.client.submit(self._message(f"{SLOW_MARKER} please"), *self._controls(), api_name="/chat")
        cancelled = False
        for output in job:
            if _last_reply(output[0]).startswith(f"[{self.token} t{self.turn}"):
                job.cancel()
                cancelled = True
                break
        if not cancelled:
            self.tally.error(self.index, "stop: the slow reply ended before it could be stopped")
            return
        waited = time.monotonic()
        while not job.done() and time.monotonic() - waited < 15:
            time.sleep(0.05)
        self.tally.add(stops=1)

    def tool(self) -> None:
        result = self.client.predict(self._message(f"{TOOL_MARKER} weather in Paris?"), *self._controls(),
                                     api_name="/chat")
        if not self._check_reply(result[0], "tool call"):
            return
        panel = next((out for out in result if isinstance(out, dict) and "headers" in out), None)  # the tool panel
        rows = panel.get("data", []) if panel else []
        if not any(row and row[0] == "get_weather" for row in rows):
            self.tally.error(self.index, f"tool call: no waiting get_weather in the panel {str(panel)[:120]}")
            return
        if self.rng.random() < 0.5:
            answer = self.client.predict("", *self._controls(), api_name="/run_example_tool")
        else:
            answer = self.client.predict('{"temperature": 21, "unit": "celsius"}', *self._controls(),
                                         api_name="/tool_result")
        if self._check_reply(answer[0], "tool result", tool=True):
            self.sure += 1
            self.tally.add(turns=1, tool_round_trips=1)

    # -- the loop -------------------------------------------------------------------------
    def conversation(self) -> None:
        """5–10 actions; a new conversation (token) after a reload, else the same one goes on."""
        if self.reload or not self.token:
            self.token = f"u{self.index:02d}c{self.tally_conversation()}"
            self.turn = self.sure = self.maybe = 0
        self.upload()
        for _ in range(self.rng.randint(5, 10)):
            if time.monotonic() >= self.deadline:
                return
            action = self.rng.choices((self.chat, self.stop, self.tool, self.upload), weights=(5, 2, 2, 1))[0]
            if not self._stream_closed():
                self.tally.error(self.index, f"the session's event stream was still open {STREAM_CLOSE_S:.0f} s "
                                 "after its last event ended")
            action()

    def _stream_closed(self) -> bool:
        """Wait until the client's event stream has closed after the last action, as the server closes it once
        a session has no event left (False: still open after ``STREAM_CLOSE_S``).

        gradio_client (2.7) registers a new job on the stream it holds open, and when that stream then gets the
        server's close it ends every job registered on it (``concurrent.futures.CancelledError``): a job sent
        between the server closing the stream and the client reading the close is lost. A stopped reply opens that
        window widest (its job is done as soon as it is cancelled, before the server has even ended it), and one
        action in a few hundred after a stop failed so in a 5-minute run. A browser's next action comes a human
        later; so does this user's, by the time the stream is closed."""
        client = self.client
        waited = time.monotonic()
        while time.monotonic() - waited < STREAM_CLOSE_S:
            with client.pending_lock:
                if not client.stream_open:
                    return True
            time.sleep(0.01)
        return False

    def tally_conversation(self) -> int:
        with self.tally.lock:
            self.tally.conversations += 1
            return self.tally.conversations

    def run(self) -> None:
        """Hold conversations until the deadline; every exception is counted as an error."""
        try:
            self.client = self._connect()
        except Exception as exc:  # noqa: BLE001 - counted, the soak goes on
            self.tally.error(self.index, f"connect: {type(exc).__name__}: {exc}")
            return
        try:
            while time.monotonic() < self.deadline:
                try:
                    self.conversation()
                except Exception as exc:  # noqa: BLE001 - counted, the user starts over
                    self.tally.error(self.index, f"{type(exc).__name__}: {exc}")
                    self.token = ""
                if self.reload:  # as a browser's reload: the page's connections close, a new page loads
                    self.client.close()
                    try:
                        self.client = self._connect()
                    except Exception as exc:  # noqa: BLE001 - counted, this user stops
                        self.tally.error(self.index, f"reconnect: {type(exc).__name__}: {exc}")
                        return
                elif not self.token:
                    self.client.reset_session()  # a new Gradio session, uploads and chat start over
        finally:
            self.client.close()

    def _connect(self) -> Any:
        """A new ``gradio_client.Client``: the app's config, a new session and its heartbeat connection.

        (``Client.reset_session`` is no reload: the old session's heartbeat connection moves to the
        new session only when its next heartbeat arrives, so two resets within 15 s leave a session
        that no connection ever held and Gradio never sees close.)"""
        from gradio_client import Client

        return Client(self.url, download_files=False, verbose=False, httpx_kwargs={"timeout": TIMEOUT_S})

    def warm_up(self) -> None:
        """Every action once per media kind, before the clock starts (first calls import and compile)."""
        self.client = self._connect()
        try:
            for kind in ("image", "audio", "video"):  # inspections only: nothing is sent, nothing conflicts
                self.kind = kind
                self.upload()
            self.client.reset_session()
            self.kind = None
            self.token = f"u{self.index:02d}c{self.tally_conversation()}"
            self.turn = self.sure = self.maybe = 0
            for action in (self.chat, self.tool, self.stop, self.chat):
                action()
        finally:
            self.client.close()


class Sampler(threading.Thread):
    """RSS (MiB) and CPU seconds of the server process every ``period`` seconds, and its allocator
    figures (``_malloc_figures``, asked over the line protocol) every ``stats_every`` samples."""

    def __init__(self, server: Server, period: float = 2.0, stats_every: int = 5) -> None:
        super().__init__(daemon=True)
        import psutil

        self.server = server
        self.proc = psutil.Process(server.child.pid)
        self.period = period
        self.stats_every = stats_every
        self.samples: list[tuple[float, float, float]] = []  # (seconds since start, RSS MiB, CPU s)
        self.allocator: list[tuple[float, dict[str, float]]] = []  # (seconds since start, _malloc_figures)
        self.halt = threading.Event()
        self.started_at = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def sample(self) -> None:
        cpu = self.proc.cpu_times()
        self.samples.append((self.elapsed(), self.proc.memory_info().rss / 2**20, cpu.user + cpu.system))
        if len(self.samples) % self.stats_every == 1:
            stats = self.server.stats()
            figures = {k: v for k, v in stats.items() if k.startswith("malloc_")}
            if figures:
                self.allocator.append((self.elapsed(), figures))

    def run(self) -> None:
        self.sample()
        while not self.halt.wait(self.period):
            self.sample()


def _rss_at(samples: list[tuple[float, float, float]], t: float) -> float:
    """The RSS sample nearest to ``t``."""
    return min(samples, key=lambda sample: abs(sample[0] - t))[1]


def _slope_mib_per_min(samples: list[tuple[float, float, float]], warmup_s: float,
                       until_s: float = float("inf")) -> float:
    """Least-squares slope of RSS over time between the warm-up and ``until_s``, in MiB per minute."""
    points = [(t, rss) for t, rss, _ in samples if warmup_s <= t <= until_s]
    if len(points) < 3:
        return float("nan")
    mean_t = statistics.fmean(t for t, _ in points)
    mean_r = statistics.fmean(r for _, r in points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (r - mean_r) for t, r in points) / var if var else float("nan")


def _make_media(root: Path) -> dict[str, Path]:
    from support import media_factory

    return {
        "image": media_factory.make_image(root / "soak.png", width=96, height=64),
        "audio": media_factory.make_audio(root / "soak.wav", seconds=1.0),
        "video": media_factory.make_video(root / "soak.mp4", seconds=1, width=96, height=64, fps=4, audio_rate=16000),
    }


class Server:
    """The app in a child process (``--serve``), with a line protocol for its counters."""

    def __init__(self, capacity: int, closed_session_ttl: float) -> None:
        self.lock = threading.Lock()  # one line-protocol exchange at a time (the sampler asks too)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.child = subprocess.Popen([sys.executable, "-m", "benchmarks.soak", "--serve", str(port),
                                       "--capacity", str(capacity), "--closed-session-ttl", str(closed_session_ttl)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.url = self.tools_json = ""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not self.url:
            line = self.child.stdout.readline()
            if not line:
                break
            if line.startswith("TOOLS "):
                self.tools_json = line[6:].strip()
            elif line.startswith("READY "):
                self.url = line.split()[1]
        if not self.url:
            self.close()
            raise RuntimeError("the server did not start")

    def _read_stats(self) -> dict[str, Any]:
        while True:
            line = self.child.stdout.readline()
            if not line:
                raise RuntimeError("the server exited")
            if line.startswith("STATS "):
                return json.loads(line[6:])

    def stats(self) -> dict[str, Any]:
        with self.lock:
            self.child.stdin.write("stats\n")
            self.child.stdin.flush()
            return self._read_stats()

    def trim(self) -> tuple[float, float]:
        """RSS (MiB) of the app after a garbage collection and ``malloc_trim`` (see ``_collect_and_trim``),
        then after dropping every Gradio session too (the app is not used after this)."""
        with self.lock:
            self.child.stdin.write("trim\n")
            self.child.stdin.flush()
            stats = self._read_stats()
        return float(stats["rss_mib_after_trim"]), float(stats["rss_mib_without_sessions"])

    def close(self) -> dict[str, Any] | None:
        final = None
        try:
            self.child.stdin.close()
            final = self._read_stats()
        except (OSError, RuntimeError, ValueError):
            pass
        try:
            self.child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.child.kill()
        return final


def soak(sessions: int, seconds: float, *, grace_s: float = 3.0, warmup_s: float | None = None,
         reload: bool = True, closed_session_ttl: float = CLOSED_SESSION_TTL_S) -> dict[str, Any]:
    """Run the soak; return its figures (see ``print_report``). ``reload=False``: every user keeps
    one Gradio session (and one growing conversation) for the whole run. ``closed_session_ttl``:
    the app's ``--closed-session-ttl``.

    The RSS slope is fitted from the end of the warm-up to the deadline, while every user is busy;
    what follows (each user finishes its last action, then all 50 close at once and Gradio runs
    their unload handlers) is a burst of its own, reported apart as "after the users left"."""
    warmup = warmup_s if warmup_s is not None else min(60.0, seconds / 4)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        files = _make_media(Path(tmp))
        server = Server(max(CAPACITY, sessions), closed_session_ttl)
        try:
            warm = Tally()
            User(99, server.url, files, server.tools_json, float("inf"), warm).warm_up()
            if warm.errors or warm.crosstalk:
                raise RuntimeError(f"the warm-up failed: {warm.error_samples}")
            tally = Tally()
            sampler = Sampler(server)
            sampler.start()
            own_cpu0, wall0 = time.process_time(), time.monotonic()
            deadline = wall0 + seconds
            users = [User(i, server.url, files, server.tools_json, deadline, tally, reload=reload)
                     for i in range(sessions)]
            threads = [threading.Thread(target=u.run, daemon=True, name=f"user-{u.index}") for u in users]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()) + 120)
            stuck = sum(thread.is_alive() for thread in threads)
            wall = time.monotonic() - wall0
            own_cpu = time.process_time() - own_cpu0
            busy_until = deadline - sampler.started_at  # then users finish their last action and all close
            time.sleep(grace_s)  # every client closed: give the app its grace period
            sampler.sample()
            sampler.halt.set()
            engine = server.stats()
            trimmed, without_sessions = server.trim()  # after the last sample: it changes the process it measures
        finally:
            final = server.close()
    samples = sampler.samples
    during = [sample for sample in samples if sample[0] <= busy_until]
    mid = min(during, key=lambda s: abs(s[0] - wall / 2))
    allocator = [figures for t, figures in sampler.allocator if warmup <= t <= busy_until]
    cpu_s = samples[-1][2] - samples[0][2]
    turn_s = sorted(tally.turn_seconds)
    orphans = int(engine.get("open", 0)) + int(engine.get("active", 0))
    return {
        "sessions": sessions, "reload": reload, "seconds": round(wall, 1), "conversations": tally.conversations,
        "uploads": tally.uploads, "turns": tally.turns, "stops": tally.stops,
        "tool_round_trips": tally.tool_round_trips, "errors": tally.errors + stuck, "crosstalk": tally.crosstalk,
        "orphans": orphans, "stuck_users": stuck,
        "engine": {k: engine.get(k, 0) for k in ("generated", "finished", "closed", "aborted", "open", "active")},
        "gradio_sessions": engine.get("gradio_sessions"), "final": final,
        "turn_p50_s": round(turn_s[len(turn_s) // 2], 3) if turn_s else None,
        "turn_p99_s": round(turn_s[min(len(turn_s) - 1, int(0.99 * len(turn_s)))], 3) if turn_s else None,
        "closed_session_ttl_s": closed_session_ttl,
        "series": [{"t": round(t, 1), "rss_mib": round(_rss_at(samples, t), 1), **figures}
                   for t, figures in sampler.allocator],  # every 10 s (--json only)
        "rss_mib": {"start": round(samples[0][1], 1), "middle": round(mid[1], 1), "end": round(during[-1][1], 1),
                    "users_left": round(samples[-1][1], 1),
                    "end_after_trim": round(trimmed, 1), "end_without_sessions": round(without_sessions, 1)},
        "malloc_mib": {"in_use": [a.get("malloc_in_use_mib") for a in (allocator[:1] + allocator[-1:])],
                       "free": [a.get("malloc_free_mib") for a in (allocator[:1] + allocator[-1:])]},
        "rss_slope_mib_per_min": round(_slope_mib_per_min(samples, warmup, busy_until), 2),
        "warmup_s": round(warmup, 1),
        "rss_slope_last_half_mib_per_min": round(
            _slope_mib_per_min(samples, (warmup + busy_until) / 2, busy_until), 2),
        "app_cpu_percent": round(100 * cpu_s / max(1e-9, samples[-1][0] - samples[0][0]), 1),
        "clients_cpu_percent": round(100 * own_cpu / max(1e-9, wall), 1), "cpus": os.cpu_count(),
        "error_samples": tally.error_samples,
    }


def verdict(figures: dict[str, Any], max_slope: float) -> list[str]:
    """What failed (empty: the soak passed)."""
    failed = [f"{name} = {figures[name]}" for name in ("errors", "crosstalk", "orphans") if figures[name]]
    slope = figures["rss_slope_mib_per_min"]
    if not slope <= max_slope:  # NaN fails too
        failed.append(f"RSS slope {slope} MiB/min > {max_slope}")
    return failed


def print_report(figures: dict[str, Any], failed: list[str]) -> None:
    f, e, r = figures, figures["engine"], figures["rss_mib"]
    print(f"\nSoak — {f['sessions']} simulated users × {f['seconds']:g} s on 127.0.0.1, app in a child process, "
          f"{f['cpus']} CPUs shared with the clients{'' if f['reload'] else ', no reloads'}, "
          f"closed sessions dropped after {f['closed_session_ttl_s']:g} s\n")
    alloc = figures["malloc_mib"]
    rows = [
        ("sessions (concurrent users)", f["sessions"]), ("conversations (Gradio sessions)", f["conversations"]),
        ("uploads inspected", f["uploads"]), ("chat turns completed", f["turns"]), ("stops", f["stops"]),
        ("tool round trips", f["tool_round_trips"]), ("errors", f["errors"]), ("cross-talk", f["crosstalk"]),
        ("orphaned engine requests", f["orphans"]),
        ("engine requests (generated / finished / aborted)", f"{e['generated']} / {e['finished']} / {e['aborted']}"),
        ("turn time p50 / p99 (s)", f"{f['turn_p50_s']} / {f['turn_p99_s']}"),
        ("app RSS start / middle / end (MiB)", f"{r['start']} / {r['middle']} / {r['end']}"),
        ("app RSS after the users left (MiB)", r["users_left"]),
        ("glibc malloc in use, after the warm-up → end (MiB)", " → ".join(map(str, alloc["in_use"])) or "n/a"),
        ("glibc malloc held free, after the warm-up → end (MiB)", " → ".join(map(str, alloc["free"])) or "n/a"),
        ("app RSS at the end after gc + malloc_trim (MiB)", r["end_after_trim"]),
        ("… and after dropping every Gradio session too (MiB)", r["end_without_sessions"]),
        (f"app RSS slope after {f['warmup_s']:g} s warm-up (MiB/min)", f["rss_slope_mib_per_min"]),
        ("app RSS slope over the last half of that (MiB/min)", f["rss_slope_last_half_mib_per_min"]),
        ("app CPU % (100 = one core)", f["app_cpu_percent"]), ("clients CPU %", f["clients_cpu_percent"]),
        ("Gradio sessions held by the app after the users left", f["gradio_sessions"]),
    ]
    print("| figure | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    for sample in f["error_samples"]:
        print(f"  error: {sample}")
    print("\nPASS" if not failed else "\nFAIL: " + "; ".join(failed))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50, help="concurrent simulated users (default 50)")
    parser.add_argument("--seconds", type=float, default=300.0, help="how long they loop (default 300)")
    parser.add_argument("--quick", action="store_true", help="8 users × 20 s")
    parser.add_argument("--max-slope", type=float, default=5.0, help="RSS slope (MiB/min) above which it fails")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.add_argument("--no-reload", action="store_true",
                        help="users keep one Gradio session for the whole run (no reloads): separates the memory "
                             "Gradio keeps per session from the rest")
    parser.add_argument("--closed-session-ttl", type=float, default=CLOSED_SESSION_TTL_S, metavar="SECONDS",
                        help="the app's --closed-session-ttl (default %(default)g: short, so a 5-minute run reaches "
                             "the steady state; the app's own default keeps closed sessions an hour)")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, default=CAPACITY, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.capacity, args.closed_session_ttl)
        return 0
    sessions, seconds = (8, 20.0) if args.quick else (args.sessions, args.seconds)
    figures = soak(sessions, seconds, reload=not args.no_reload, closed_session_ttl=args.closed_session_ttl)
    failed = verdict(figures, args.max_slope)
    if args.json:
        print(json.dumps({**figures, "failed": failed}))
    else:
        print_report(figures, failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
