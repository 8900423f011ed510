"""``python app.py --help`` lists every vLLM engine flag on this CPU host, as vLLM defines them.

The reference comes from vLLM alone: ``AsyncEngineArgs.add_cli_args`` in a subprocess where vLLM's
own switch ``VLLM_TARGET_DEVICE=cpu`` gives it a platform, independent of the studio's
work-around (``vllm_compat.engine_flags_platform``). ``--help`` on its own shows the flags
recorded by the last build (``engine.flag_cache``); the tests check that the record prints the
same help as vLLM's parser, that the real entry point uses it, and when it is thrown away.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import app
from dots3_demo.engine import flag_cache

REPO = Path(__file__).resolve().parents[2]
STUDIO_SECTIONS = ("options", "Dots3 NOTE Studio", "Dots3 NOTE Studio engine")
FLAG = re.compile(r"^--?[A-Za-z][\w.-]*$")

_REFERENCE = r"""
import json
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(add_help=False))
print(json.dumps([action.option_strings for action in parser._actions]))
"""


@pytest.fixture(scope="module")
def reference() -> subprocess.Popen:
    """Started first, so its ~20 s of vLLM imports overlap the in-process tests."""
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu")
    return subprocess.Popen([sys.executable, "-c", _REFERENCE], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _reference_flags(proc: subprocess.Popen) -> list[list[str]]:
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def records(reference, tmp_path_factory) -> Path:
    """A cache folder filled by one real build of the app's parser (as any run of the app does)."""
    folder = tmp_path_factory.mktemp("xdg-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(folder))
        app.parse_args([])
    assert list((folder / "dots3-studio" / "engine-flags").glob("vllm-*.json"))
    return folder


def _printed_help(argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        app.parse_args(argv)
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _sections(text: str) -> dict[str, set[str]]:
    """``--help=all`` output: the option strings listed under each section title."""
    sections: dict[str, set[str]] = {}
    title = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            title = line[:-1]
            sections.setdefault(title, set())
        elif title is not None and line.startswith("  -"):
            invocation = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            sections[title].update(
                token for part in re.split(r", (?=-)", invocation)
                if FLAG.match(token := part.split(" ", 1)[0])
            )
    return sections


def _usage_flags(text: str) -> set[str]:
    """The flags in the usage lines of plain ``--help`` (the first option string of each, and
    both forms of a ``--flag | --no-flag`` pair)."""
    usage = text.split("\n\n", 1)[0]
    return {a or b for a, b in re.findall(r"\[(-[^\s\]|]+)|\| (-[^\s\]|]+)", usage)}


def _run_app_help(argv: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    env.pop("DOTS3_STUDIO_ARGS", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "app.py", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# ---------------------------------------------------------------- the record prints what vLLM's parser prints
@pytest.mark.parametrize("argv", [["--help"], ["--help=all"], ["--help=ModelConfig"], ["--help=kv-cache"], ["-h"]],
                         ids=["help", "all", "group", "keyword", "h"])
def test_recorded_flags_print_the_same_help(argv, tmp_path, monkeypatch, capsys, records):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # empty: vLLM builds its parser, and it is recorded
    built = _printed_help(argv, capsys)
    assert "--kv-cache-dtype" in built or argv == ["--help=ModelConfig"]
    used = []
    monkeypatch.setattr(flag_cache, "add_cached_engine_flags",
                        lambda parser, _real=flag_cache.add_cached_engine_flags: used.append(_real(parser)) or used[-1])
    assert _printed_help(argv, capsys) == built
    assert used == [True]


def test_a_keyword_search_does_not_narrow_later_help(records, monkeypatch, capsys):
    """vLLM stores ``--help=KEYWORD`` on its parser class; a later ``--help`` in the process is whole."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(records))
    narrowed = _printed_help(["--help=kv-cache"], capsys)
    assert "Arguments matching 'kv-cache'" in narrowed and "--max-file-size" not in narrowed
    whole = _printed_help(["--help"], capsys)
    assert "Arguments matching" not in whole and "--max-file-size" in whole and "--endpoint" in whole
    from dots3_demo.cli import smoke
    assert "--keep-model" in smoke.build_parser().format_help()


def test_parsing_never_uses_the_record(records, monkeypatch):
    """Flags other than a lone --help are parsed by vLLM's own parser (types, choices, errors)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(records))
    monkeypatch.setattr(flag_cache, "add_cached_engine_flags", lambda parser: pytest.fail("record used to parse"))
    args = app.parse_args(["--kv-cache-dtype", "fp8", "--language-model-only", "-tp", "2"])
    assert (args.kv_cache_dtype, args.language_model_only, args.tensor_parallel_size) == ("fp8", True, 2)
    assert args.model is None and args.mm_processor_cache_gb is None


# ---------------------------------------------------------------- when a record is thrown away
def test_cache_key_follows_what_the_flags_depend_on(monkeypatch, tmp_path):
    import vllm
    from vllm.platforms import current_platform

    key = flag_cache.cache_key()
    assert key.startswith(f"vllm-{vllm.__version__}-") and flag_cache.cache_key() == key
    with monkeypatch.context() as mp:
        mp.setattr(vllm, "__version__", "0.32.1")
        assert flag_cache.cache_key() != key
    with monkeypatch.context() as mp:
        mp.setenv("VLLM_PLUGINS", "some_plugin")
        assert flag_cache.cache_key() != key
    with monkeypatch.context() as mp:
        mp.setattr(type(current_platform), "device_type", "cuda")
        assert flag_cache.cache_key() != key
    with monkeypatch.context() as mp:
        mp.setattr(flag_cache, "_distributions", lambda real=flag_cache._distributions: [*real(), "x-1.0.dist-info"])
        assert flag_cache.cache_key() != key
    # an edited file of the installed package (same version) changes its fingerprint
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "a.py").write_text("x = 1\n")
    before = flag_cache._package_fingerprint(package)
    (package / "sub" / "a.py").write_text("x = 22\n")
    assert flag_cache._package_fingerprint(package) != before


def test_a_record_is_used_only_under_its_key(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = flag_cache.cache_dir()
    folder.mkdir(parents=True)
    key = flag_cache.cache_key()
    parser = argparse.ArgumentParser()
    assert not flag_cache.add_cached_engine_flags(parser)  # no record
    (folder / f"{key}.json").write_text("{not json")
    assert not flag_cache.add_cached_engine_flags(parser)  # unreadable
    (folder / f"{key}.json").write_text(json.dumps({"key": "vllm-0.0.0-other", "groups": [], "actions": []}))
    assert not flag_cache.add_cached_engine_flags(parser)  # another key's content
    assert len(parser._actions) == 1  # only -h: nothing was added


@pytest.mark.parametrize("argv, only", [
    (["--help"], True), (["-h"], True), (["--help=all"], True), (["--help=kv-cache"], True),
    ([], False), (["--help", "--port", "1"], False), (["--port", "1", "--help"], False), (["inspect", "x"], False),
])
def test_asks_for_help_only(argv, only):
    assert flag_cache.asks_for_help_only(argv) is only


# ---------------------------------------------------------------- the real entry point
# (last: its reference subprocess started with the first test)
def test_help_lists_every_vllm_engine_flag(reference, records):
    """``python app.py --help=all`` and ``--help``: the engine flags are exactly vLLM's."""
    vllm_actions = _reference_flags(reference)
    vllm_flags = {s for strings in vllm_actions for s in strings}
    assert {"--language-model-only", "--kv-cache-dtype", "--max-model-len", "-tp"} <= vllm_flags

    full = _run_app_help(["--help=all"], records)
    sections = _sections(full.stdout)
    assert set(STUDIO_SECTIONS) <= set(sections), sorted(sections)
    shown = set().union(*sections.values())
    studio = set().union(*(sections[s] for s in STUDIO_SECTIONS)) - vllm_flags
    assert {"--host", "--engine", "--endpoint", "--closed-session-ttl", "-h", "--help"} <= studio
    assert shown - studio == vllm_flags
    # the recorded flags were shown: vLLM's parser was not even imported
    assert "vllm.engine.arg_utils" not in full.stderr

    plain = _run_app_help(["--help"], records)
    usage = _usage_flags(plain.stdout)
    assert "vllm.engine.arg_utils" not in plain.stderr
    assert usage - studio <= vllm_flags
    missing = [strings for strings in vllm_actions if not set(strings) & usage]
    assert not missing, f"vLLM flags absent from `app.py --help`: {missing[:5]}"
    assert "--language-model-only" in usage and "--kv-cache-dtype" in usage
