"""The Hugging Face Space config: README.md's front matter, packages.txt, the requirements pins."""

from __future__ import annotations

import importlib.metadata
import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.deploy import files
from tests.deploy.files import ROOT

COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}  # HF's thumbnail palette
REQUIRED = {"title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "python_version", "app_file",
            "suggested_hardware", "startup_duration_timeout", "pinned"}


@pytest.fixture(scope="module")
def meta() -> dict:
    return files.front_matter(files.README.read_text())


def test_front_matter_opens_the_readme_with_every_key(meta):
    assert REQUIRED <= set(meta), f"missing: {sorted(REQUIRED - set(meta))}"
    assert meta["sdk"] == "gradio" and meta["pinned"] is False
    assert meta["colorFrom"] in COLORS and meta["colorTo"] in COLORS
    assert (ROOT / meta["app_file"]).is_file()
    assert re.fullmatch(r"\d+(m|h)", str(meta["startup_duration_timeout"]))
    assert len(meta.get("short_description", "")) <= 60  # the Hub's limit


def test_gradio_pin_is_the_spaces_sdk_version(meta):
    assert str(meta["sdk_version"]) == files.pins(files.REQUIREMENTS.read_text())["gradio"]


def test_python_version_is_one_vllm_supports(meta):
    version = meta["python_version"]
    assert isinstance(version, str), "quote python_version: YAML reads 3.10 as the number 3.1"
    requires = importlib.metadata.metadata("vllm")["Requires-Python"]
    assert Version(version) in SpecifierSet(requires), f"vLLM needs Python {requires}"


def test_suggested_hardware_is_a_hub_hardware_flavor(meta):
    from huggingface_hub import SpaceHardware

    assert meta["suggested_hardware"] in {flavor.value for flavor in SpaceHardware}


def test_license_only_when_the_repository_has_one(meta):
    has_license = any(ROOT.glob("LICENSE*")) or any(ROOT.glob("COPYING*"))
    assert ("license" in meta) == has_license


def test_packages_txt_installs_ffmpeg():
    packages = [line.split("#")[0].strip() for line in (ROOT / "packages.txt").read_text().splitlines()]
    assert "ffmpeg" in packages


def test_readme_documents_the_deploy_routes_and_files():
    text = files.README.read_text()
    deploy = text[text.index("\n## Deploy\n"):]
    deploy = deploy[:deploy.index("\n## ", 1)]
    for needed in ("/healthz", "/readyz", "docker build", "docker run", "packages.txt", "ZeroGPU", "--endpoint"):
        assert needed in deploy, needed


def test_the_app_binds_where_a_space_tells_it(monkeypatch):
    import app

    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    args = app.parse_args([])
    assert (args.host, args.port) == ("0.0.0.0", 7861)


def test_flags_from_the_environment_come_first(monkeypatch):
    """A Gradio Space cannot pass arguments: DOTS3_STUDIO_ARGS carries them; the command line wins."""
    from dots3_demo.cli import studio

    monkeypatch.setenv(studio.ENV_ARGS, "--endpoint http://gpu:8000/v1 --port 7001 --seq '65536'")
    argv = studio.arguments(["--port", "7002"])
    assert argv == ["--endpoint", "http://gpu:8000/v1", "--port", "7001", "--seq", "65536", "--port", "7002"]
    args = studio.parse_args(argv)
    assert (args.endpoint, args.port, args.seq) == ("http://gpu:8000/v1", 7002, 65536)
    assert studio.arguments(["inspect", "clip.mp4"]) == ["inspect", "clip.mp4"]  # the CLI takes files, not flags
