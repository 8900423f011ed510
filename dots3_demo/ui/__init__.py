"""The browser UI of Dots3 NOTE Studio (Gradio 6). Layout in ``app``, plain logic in ``handlers``."""

from dots3_demo.ui.app import build_interface, launch_app

__all__ = ["build_interface", "launch_app"]
