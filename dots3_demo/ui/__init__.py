"""The browser UI of Dots3 NOTE Studio (Gradio 6). Layout in ``layout``, wiring in ``app``, plain logic in
``handlers`` and ``chat``, what the page shows in ``views``, ``chat_views`` and ``figures``; compare's tab in
``compare``. A session's state, the turn builder and the reply accumulator are ``dots3_demo.core``'s."""

from typing import Any

__all__ = ["build_interface", "launch_app"]


def __getattr__(name: str) -> Any:  # the package imports Gradio on first use, not at import
    if name in __all__:
        from dots3_demo.ui import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
