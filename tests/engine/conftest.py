"""Fixtures for the engine tests."""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
