"""The browser UI of Dots3 NOTE Studio (Gradio 6). Layout in ``layout``, wiring in ``app``, plain logic in
``handlers`` and ``chat``, a session's state in ``state``, what the page shows in ``views``, ``chat_views``
and ``figures``."""

from typing import Any

__all__ = ["build_interface", "launch_app"]


def __getattr__(name: str) -> Any:  # the package imports Gradio on first use, not at import
    if name in __all__:
        from dots3_demo.ui import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
