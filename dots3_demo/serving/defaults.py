"""Serving defaults the command line shows; importable without Gradio (``python app.py --help`` imports none)."""

DEFAULT_CLOSED_SESSION_TTL_S = 3600.0  # Gradio's own: how long a closed tab's gr.State values live
