"""``/healthz`` and ``/readyz``: the report as plain functions, then on a real server (preview
mode and stand-in engines in every state)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from dots3_demo.engine.inprocess import InProcessEngine
from dots3_demo.engine.protocol import ChatEngine, EngineStatus, EngineUnavailable
from dots3_demo.engine.remote import RemoteEngine
from dots3_demo.serving import health
from tests.deploy import files

SEQ = 32768


@dataclass
class StandInEngine:
    """A ``ChatEngine`` for the UI and the probes that never generates (tests only).

    ``start()`` goes idle → loading → ``outcome`` after ``load_s`` seconds.
    """

    state: str = "idle"
    message: str = "not started"
    outcome: str = "ready"
    load_s: float = 0.3
    model: str | None = "stand-in/model"
    capacity: int = 2
    max_model_len: int | None = SEQ
    mm_limits: dict[str, int] | None = None
    starts: int = 0
    calls: list[str] = field(default_factory=list)

    @property
    def status(self) -> EngineStatus:
        return EngineStatus(self.state, self.message)

    @property
    def label(self) -> str:
        return f"stand-in · {self.model}"

    def unfinished_requests(self) -> int | None:
        return len([c for c in self.calls if c.startswith("generate")])

    async def start(self) -> None:
        self.starts += 1
        self.state, self.message = "loading", "loading stand-in/model"
        await asyncio.sleep(self.load_s)
        if self.outcome == "failed":
            self.state, self.message = "failed", "OutOfMemoryError: stand-in"
            raise EngineUnavailable(self.message)
        self.state, self.message = "ready", "ready"

    async def abort(self, request_id: str) -> None:
        self.calls.append(f"abort {request_id}")

    async def shutdown(self) -> None:
        self.state = "stopped"

    async def stream_turn(self, turn: Any):
        raise EngineUnavailable("stand-in engine does not generate")
        yield  # pragma: no cover


# ---------------------------------------------------------------- plain functions
def test_preview_mode_is_ready():
    report = health.health_report(None, "preview (bundled)")
    assert (report.ready, report.engine, report.model) == (True, "preview", None)
    assert health.readiness_status(report) == 200
    body = report.as_json("ok")
    assert list(body)[0] == "status" and body["profile"] == "preview (bundled)"


@pytest.mark.parametrize(("state", "ready"), [("idle", False), ("loading", False), ("ready", True),
                                              ("failed", False), ("stopped", False), ("paused", False)])
def test_engine_states(state, ready):
    engine = StandInEngine(state=state, message=f"{state} message")
    report = health.health_report(engine, "/models/x")
    assert (report.engine, report.ready, report.message) == (state, ready, f"{state} message")
    assert health.readiness_status(report) == (200 if ready else 503)
    assert report.requests == (0 if state == "ready" else None)  # what the engine holds, once it runs


def test_stand_in_is_a_chat_engine():
    assert isinstance(StandInEngine(), ChatEngine)


def test_model_name_of_each_engine_kind():
    in_process = InProcessEngine(SimpleNamespace(model="/models/Dots3-NOTE"), engine_factory=lambda args: None)
    remote = RemoteEngine("http://h:8000/v1", model="dots3-note")
    assert health.health_report(in_process, "p").model == "/models/Dots3-NOTE"
    assert health.health_report(remote, "p").model == "dots3-note"
    assert health.engine_model(RemoteEngine("http://h:8000/v1")) is None  # not connected yet: not known
    assert health.engine_model(None) is None


def test_app_kwargs_keep_a_lifespan_already_given():
    entered: list[str] = []

    class Lifespan:
        def __init__(self, app):
            self.app = app

        async def __aenter__(self):
            entered.append("in")
            return {"state": 1}

        async def __aexit__(self, *exc):
            entered.append("out")

    app = SimpleNamespace(router=SimpleNamespace(routes=[]), added=[])
    app.add_api_route = lambda path, fn, **kw: app.added.append(path)  # a FastAPI stand-in
    kwargs = health.app_kwargs_with_health({"lifespan": Lifespan, "docs_url": None}, None, "p")
    assert kwargs["docs_url"] is None

    async def run():
        async with kwargs["lifespan"](app) as state:
            assert state == {"state": 1}

    asyncio.run(run())
    assert entered == ["in", "out"] and app.added == [health.HEALTH_PATH, health.READY_PATH]


# ---------------------------------------------------------------- on a real server
def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _json(url: str) -> tuple[int, dict]:
    status, _, body = _get(url)
    return status, json.loads(body)


def _launch(profile, engine):
    from dots3_demo.ui import launch_app

    # _frontend=False skips launch()'s own HEAD / check, which gives up after a single 3 s timeout
    # (seen on the shared 2-core box under load); the tests request the page themselves.
    return launch_app(profile, engine, host="127.0.0.1", port=None, seq=SEQ, prevent_thread_lock=True, quiet=True,
                      _frontend=False)


@pytest.fixture(scope="module")
def preview_url(profile):
    demo = _launch(profile, None)
    try:
        yield demo.local_url.rstrip("/")
    finally:
        demo.close()


def test_preview_server_is_live_and_ready(preview_url, profile):
    status, headers, body = _get(preview_url + health.HEALTH_PATH)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert headers.get("cache-control") == "no-store"
    assert json.loads(body) == {"status": "ok", "ready": True, "engine": "preview",
                                "message": health.health_report(None, "").message, "model": None,
                                "profile": profile.name, "stage": "", "requests": None}
    status, body = _json(preview_url + health.READY_PATH)
    assert status == 200 and body["status"] == "ready" and body["engine"] == "preview"
    assert _get(preview_url + health.READY_PATH, "HEAD")[0] == 200


def test_the_routes_leave_gradio_alone(preview_url):
    status, headers, body = _get(preview_url + "/")
    assert status == 200 and headers["content-type"].startswith("text/html") and b"gradio" in body.lower()
    status, info = _json(preview_url + "/gradio_api/info")
    assert status == 200 and "/inspect_video" in info["named_endpoints"]
    assert _get(preview_url + "/healthz/nothing")[0] == 404


def _wait_for(url: str, status: int, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        got, body = _json(url)
        if got == status or time.monotonic() > deadline:
            assert got == status, body
            return body
        time.sleep(0.1)


def test_readiness_starts_an_idle_engine_and_turns_ready(profile):
    engine = StandInEngine(load_s=0.5)
    demo = _launch(profile, engine)
    url = demo.local_url.rstrip("/")
    try:
        status, body = _json(url + health.HEALTH_PATH)
        assert (status, body["engine"], body["ready"]) == (200, "idle", False)  # liveness does not start it
        assert engine.starts == 0
        status, body = _json(url + health.READY_PATH)
        assert (status, body["status"], body["engine"]) == (503, "not ready", "idle")
        body = _wait_for(url + health.READY_PATH, 200)
        assert (body["engine"], body["model"], body["status"]) == ("ready", "stand-in/model", "ready")
        assert engine.starts == 1
        assert _json(url + health.HEALTH_PATH)[1]["ready"] is True
    finally:
        demo.close()


def test_a_failed_engine_is_not_ready_and_not_restarted_by_probes(profile):
    engine = StandInEngine(outcome="failed", load_s=0.1)
    demo = _launch(profile, engine)
    url = demo.local_url.rstrip("/")
    try:
        assert _json(url + health.READY_PATH)[0] == 503
        deadline = time.monotonic() + 30
        while engine.state != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(5):
            status, body = _json(url + health.READY_PATH)
            assert (status, body["engine"]) == (503, "failed")
        assert "OutOfMemoryError" in body["message"]
        assert engine.starts == 1
        status, body = _json(url + health.HEALTH_PATH)
        assert (status, body["status"], body["ready"]) == (200, "ok", False)
    finally:
        demo.close()


def _image_healthcheck(base_url: str) -> int:
    """Run the Dockerfile's HEALTHCHECK command against ``base_url`` instead of 127.0.0.1:7860."""
    (check,) = files.only(files.instructions(files.DOCKERFILE.read_text()), "HEALTHCHECK")
    argv = [part.replace("http://127.0.0.1:7860", base_url) for part in files.healthcheck_cmd(check)]
    assert argv[0] == "python3"
    return subprocess.run([sys.executable, *argv[1:]], capture_output=True, timeout=60).returncode


def test_the_images_healthcheck_passes_when_ready(preview_url):
    assert _image_healthcheck(preview_url) == 0


def test_loading_and_stopped_engines_are_not_ready(profile):
    engine = StandInEngine(state="loading", message="loading")
    demo = _launch(profile, engine)
    url = demo.local_url.rstrip("/")
    try:
        for state in ("loading", "stopped"):
            engine.state = engine.message = state
            status, body = _json(url + health.READY_PATH)
            assert (status, body["engine"]) == (503, state)
        assert _image_healthcheck(url) != 0  # the container reports unhealthy
        assert engine.starts == 0
    finally:
        demo.close()
