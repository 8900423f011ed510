"""A step in front of one of Gradio's own routes: the serving policy's way into Gradio's app (``cancels``,
``uploads``, ``deferred_assets``, ``pictures``), each pinned by its tests."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute

logger = logging.getLogger(__name__)


def in_front(app: Any, method: str, matches: Callable[[str], bool], endpoint: Callable[[Callable[..., Any]], Any],
             *, path: str | None = None, dependencies: list[Any] | None = None, missing: str) -> bool:
    """Put a route in front of the running app's first ``method`` route whose path ``matches`` (``app``: a FastAPI
    app, e.g. Gradio's in its lifespan): ``endpoint(gradio's endpoint)`` makes its endpoint; it answers at ``path``
    (default: the same path) with the same response class and ``dependencies`` (default: the route's own). False,
    with ``missing`` logged, when the app has no such route (then nothing changed)."""
    routes = app.router.routes
    index = next((i for i, route in enumerate(routes) if isinstance(route, APIRoute)
                  and matches(route.path) and method in route.methods), None)
    if index is None:
        logger.warning(missing)
        return False
    route = routes[index]
    routes.insert(index, APIRoute(path or route.path, endpoint(route.endpoint), methods=[method],
                                  dependencies=list(route.dependencies if dependencies is None else dependencies),
                                  response_class=route.response_class,
                                  include_in_schema=False))
    return True
