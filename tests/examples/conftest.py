"""Fixtures for the example files: the build script as a module, and a fresh rebuild of its output."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_examples.py"


@pytest.fixture(scope="session")
def build_script() -> ModuleType:
    """``scripts/build_examples.py`` imported as a module (its constants say what the files hold)."""
    spec = importlib.util.spec_from_file_location("build_examples", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples rebuilt by running the script as documented (a module, from the repository root)."""
    out = tmp_path_factory.mktemp("examples_rebuilt")
    done = subprocess.run([sys.executable, "-m", "scripts.build_examples", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "total in" in done.stdout
    return out
