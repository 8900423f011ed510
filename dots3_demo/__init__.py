"""Dots3 NOTE Studio: a Gradio demo for vLLM's dots3_note omni model."""

__version__ = "0.1.0"
