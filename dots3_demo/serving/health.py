"""Liveness and readiness for deployments: ``GET /healthz`` and ``GET /readyz``.

Both answer the same JSON report (the engine state the chat's status line shows, as data)::

    {"status": "ok", "ready": true, "engine": "preview", "message": "...", "model": null,
     "profile": "preview (bundled)", "stage": "", "requests": null}

``stage`` is the load stage while the engine loads; ``requests`` the requests the engine still holds
(in-process; ``null`` when unknown): 0 once every reply ended or was stopped.

- ``/healthz`` (liveness) is 200 whenever the app's server answers; ``status`` is ``"ok"``.
- ``/readyz`` (readiness) is 200 when the studio can do everything it was started for — preview
  mode (no engine: the inspector is the whole app) or an engine that is ``ready`` — and 503 while
  the engine is ``idle``, ``loading``, ``failed`` or ``stopped``; ``status`` is ``"ready"`` or
  ``"not ready"``.
- The engine starts lazily on the first chat message. A readiness probe asks for the engine, so
  ``/readyz`` starts an ``idle`` engine in the background (the same idempotent ``start()`` the chat
  calls): behind a probe the model loads when the container starts, not when the first user
  writes. It never restarts a ``failed`` engine (a load that failed usually needs other flags).

The report is plain functions (:func:`health_report`, :func:`readiness_status`), testable without
a server; :func:`app_kwargs_with_health` adds the routes to the FastAPI app ``Blocks.launch``
builds, through its ``app_kwargs`` lifespan, so they exist before the server takes a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.serving.cancels import guard_cancels
from dots3_demo.serving.capacity import follow_engine_capacity
from dots3_demo.serving.deferred_assets import defer_ffmpeg
from dots3_demo.serving.pictures import serve_pictures
from dots3_demo.serving.uploads import Uploaded, watch_uploads

logger = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
PREVIEW = "preview"  # the ``engine`` value when no engine is attached
READY_STATES = frozenset({PREVIEW, "ready"})
NO_STORE = {"Cache-Control": "no-store"}
Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]  # FastAPI's lifespan=


@dataclass(frozen=True)
class HealthReport:
    """What both routes answer (besides ``status``)."""

    ready: bool
    engine: str  # preview | idle | loading | ready | failed | stopped
    message: str
    model: str | None
    profile: str
    stage: str = ""  # the load stage while the engine is loading (e.g. "loading weights")
    requests: int | None = None  # requests the engine still holds; None: unknown (preview, remote)

    def as_json(self, status: str) -> dict[str, Any]:
        """The response body, ``status`` first."""
        return {"status": status, **asdict(self)}


def engine_model(engine: ChatEngine | None) -> str | None:
    """The model the engine serves: ``--model`` in-process, the endpoint's model name when remote."""
    return None if engine is None else engine.model


def health_report(engine: ChatEngine | None, profile_name: str) -> HealthReport:
    """The studio's state now. ``engine`` is a ``ChatEngine`` (anything with ``.status``) or None."""
    if engine is None:
        return HealthReport(True, PREVIEW, "no engine attached — preview mode (the inspector works)", None,
                            profile_name)
    status = engine.status
    state = str(status.state)
    return HealthReport(state in READY_STATES, state, str(status.message or ""), engine_model(engine), profile_name,
                        stage=status.stage if state == "loading" else "",
                        requests=engine.unfinished_requests() if state == "ready" else None)


def readiness_status(report: HealthReport) -> int:
    """The HTTP status of ``/readyz``: 200 when ready, else 503."""
    return 200 if report.ready else 503


async def _start_quietly(engine: ChatEngine) -> None:
    """``engine.start()``; a failure is already in ``engine.status`` (and logged by the engine)."""
    try:
        await engine.start()
    except Exception as exc:  # noqa: BLE001 - the status says why; the probe keeps answering 503
        logger.warning("engine start from the readiness probe failed: %s", exc)


def mount_health_routes(app: Any, engine: ChatEngine | None, profile_name: str) -> None:
    """Add ``GET/HEAD /healthz`` and ``/readyz`` to a FastAPI ``app`` (once; a relaunch is a no-op).

    Gradio 6 has no catch-all route on its Python server, so routes added here are reached; they
    sit outside Gradio's auth, like any probe endpoint.
    """
    from fastapi.responses import JSONResponse

    if any(getattr(route, "path", None) == HEALTH_PATH for route in app.router.routes):
        return
    starting: set[asyncio.Task[None]] = set()  # strong references until each start finishes

    async def healthz() -> JSONResponse:
        report = health_report(engine, profile_name)
        return JSONResponse(report.as_json("ok"), status_code=200, headers=NO_STORE)

    async def readyz() -> JSONResponse:
        report = health_report(engine, profile_name)
        if engine is not None and report.engine == "idle" and not starting:
            task = asyncio.get_running_loop().create_task(_start_quietly(engine))
            starting.add(task)
            task.add_done_callback(starting.discard)
        return JSONResponse(report.as_json("ready" if report.ready else "not ready"),
                            status_code=readiness_status(report), headers=NO_STORE)

    app.add_api_route(HEALTH_PATH, healthz, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route(READY_PATH, readyz, methods=["GET", "HEAD"], include_in_schema=False)


def app_kwargs_with_health(app_kwargs: dict[str, Any] | None, engine: ChatEngine | None, profile_name: str, *,
                           start_engine: bool = False, uploaded: Uploaded | None = None,
                           idle_s: Callable[[], float] | None = None,
                           pictures_in: str | None = None) -> dict[str, Any]:
    """``Blocks.launch(app_kwargs=…)`` whose lifespan mounts the health routes at server start-up, puts
    the late-Stop guard in front of Gradio's ``/cancel`` (``dots3_demo.serving.cancels``) and, with
    ``start_engine``, begins loading the engine in the background on the server's loop; once the engine is ready,
    the chat's concurrency limit becomes its capacity (``dots3_demo.serving.capacity``); with ``uploaded``, the
    paths of every upload go to it as Gradio's ``/upload`` route answers (``dots3_demo.serving.uploads``); with
    ``idle_s`` (seconds every inspection worker has been free), Gradio's FFmpeg.wasm waits for the inspections
    (``dots3_demo.serving.deferred_assets``); with ``pictures_in`` (Gradio's upload folder), the galleries' pictures
    there are answered on the server's loop (``dots3_demo.serving.pictures``).

    ``launch()`` builds a new FastAPI app each time; its lifespan runs before uvicorn serves a
    request, so the routes are there from the first probe. A lifespan already in ``app_kwargs``
    still runs (inside ours).
    """
    kwargs = dict(app_kwargs or {})
    inner: Lifespan | None = kwargs.get("lifespan")
    starting: set[asyncio.Task[Any]] = set()  # strong references until each task finishes

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        mount_health_routes(app, engine, profile_name)
        guard_cancels(app)
        if uploaded is not None:
            watch_uploads(app, uploaded)
        if idle_s is not None:
            defer_ffmpeg(app, idle_s)
        if pictures_in is not None:
            serve_pictures(app, pictures_in)
        loop = asyncio.get_running_loop()
        if start_engine and engine is not None and engine.status.state == "idle":
            task = loop.create_task(_start_quietly(engine))
            starting.add(task)
            task.add_done_callback(starting.discard)
        if engine is not None:  # the chat's replies at once follow vLLM's resolved max_num_seqs once it is known
            following = loop.create_task(follow_engine_capacity(app.get_blocks(), engine))
            starting.add(following)
            following.add_done_callback(starting.discard)
        if inner is None:
            yield None
        else:
            async with inner(app) as state:
                yield state

    kwargs["lifespan"] = lifespan
    return kwargs
