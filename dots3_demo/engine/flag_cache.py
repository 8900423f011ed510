"""vLLM's engine flags as ``python app.py --help`` shows them, kept on disk between runs.

Why a cache
-----------
``--help`` lists every ``vllm serve`` engine flag, and only vLLM can say what they are: its
``AsyncEngineArgs.add_cli_args`` builds them from its config classes. Importing
``vllm.engine.arg_utils`` alone pulls in vLLM's whole config tree (transformers, the quantization
registry, the OpenAI server's types, the v1 executor, ~3,000 modules) and building the flags
imports ~650 more: on the 2-core CI machine about 2.2 × the time of a bare ``import vllm``, before
the studio does anything. The goal for ``--help`` is 1.5 ×, so a ``--help`` run shows the flags
recorded by the last run that built them, when nothing they could depend on has changed since.

Only ``--help`` reads the cache (:func:`add_cached_engine_flags`, used when the command line is
nothing but ``-h``, ``--help`` or ``--help=…``). Parsing flags always builds vLLM's parser itself,
and every such build rewrites the record (:func:`record`), so the cache never decides what a flag
does, only what ``--help`` prints.

What is recorded, and when it is thrown away
--------------------------------------------
For each action vLLM added, the attributes argparse's help formatter reads (option strings, dest,
nargs, metavar, choices and default as the formatter prints them, help text, usage form) and its
argument group (title, description). The studio's own flags are never recorded: they are built
live in both cases, and the help text is formatted live by vLLM's ``FlexibleArgumentParser``.

A record is used only when its key matches. The key covers everything vLLM's flags could depend
on: vLLM's version; the size and modification time of every ``.py``/``.so`` file of the installed
``vllm`` package (an edited or reinstalled vLLM of the same version); the names, with versions, of
every installed distribution (``*.dist-info`` on ``sys.path``: a transformers or torch upgrade, a
new vLLM plugin); the Python version; the device type of vLLM's platform (``--mm-processor-device``
offers it); every ``VLLM_*`` environment variable (``VLLM_PLUGINS`` selects plugins); and this
file's format version. Computing it takes ~0.1 s. Files live in
``$XDG_CACHE_HOME/dots3-studio/engine-flags/`` (else ``~/.cache/…``), one per key, the 8 most
recent kept; if none can be written, nothing is cached and ``--help`` builds vLLM's parser every
time, as before.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import site
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
KEEP = 8
_DIR_ENV = "XDG_CACHE_HOME"


def asks_for_help_only(argv: list[str]) -> bool:
    """The command line is one help request (``-h``, ``--help``, ``--help=GROUP|all|WORD``)."""
    return len(argv) == 1 and (argv[0] in ("-h", "--help") or argv[0].startswith("--help="))


# ---------------------------------------------------------------- the key
def cache_dir() -> Path | None:
    if os.environ.get(_DIR_ENV):
        return Path(os.environ[_DIR_ENV]) / "dots3-studio" / "engine-flags"
    try:
        return Path.home() / ".cache" / "dots3-studio" / "engine-flags"
    except RuntimeError:  # no home directory
        return None


def _package_fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".so")):
                stat = os.stat(os.path.join(folder, name))
                digest.update(f"{folder[len(str(root)):]}/{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _distributions() -> list[str]:
    """Installed distributions: ``*.dist-info`` in the site folders and other ``sys.path`` entries.

    Folders inside a site folder are skipped: packages add their vendored copies to ``sys.path``
    while they import (setuptools' ``_vendor`` does, during vLLM's flag build), which would make
    the key depend on what has been imported so far.
    """
    sites = [os.path.abspath(p) for p in (*site.getsitepackages(), site.getusersitepackages())]
    folders = set(sites)
    for entry in sys.path:
        entry = os.path.abspath(entry or ".")
        if not any(entry.startswith(s + os.sep) for s in sites):
            folders.add(entry)
    names: set[str] = set()
    for folder in folders:
        try:
            names.update(n for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info")))
        except OSError:
            continue
    return sorted(names)


def cache_key() -> str:
    """What vLLM's engine flags could depend on, hashed (see the module's docstring)."""
    import vllm
    from vllm.platforms import current_platform

    parts = {
        "format": FORMAT_VERSION,
        "python": sys.version,
        "vllm": vllm.__version__,
        "vllm_files": _package_fingerprint(Path(vllm.__file__).resolve().parent),
        "distributions": _distributions(),
        "device_type": current_platform.device_type,
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("VLLM_")),
    }
    return f"vllm-{vllm.__version__}-" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


# ---------------------------------------------------------------- recording
def _shown(value: Any) -> Any:
    """A value as argparse's help formatter prints it (``%s`` of it, or of its ``__name__``)."""
    if value is argparse.SUPPRESS:
        return {"suppress": True}
    if hasattr(value, "__name__"):
        value = value.__name__
    return None if value is None else str(value)


def _unshown(value: Any) -> Any:
    return argparse.SUPPRESS if value == {"suppress": True} else value


class Mark:
    """Where a parser stood before vLLM added its flags."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.groups = len(parser._action_groups)
        self.actions = len(parser._actions)
        self.exclusive = len(parser._mutually_exclusive_groups)


def _spec(parser: argparse.ArgumentParser, mark: Mark) -> dict[str, Any] | None:
    """What vLLM added to ``parser`` since ``mark``, or None if it is beyond what this file records."""
    if len(parser._mutually_exclusive_groups) != mark.exclusive:
        return None
    new_groups = parser._action_groups[mark.groups:]
    where: dict[int, list[Any]] = {}
    for index, group in enumerate(parser._action_groups):
        for action in group._group_actions:
            where[id(action)] = ["new", index - mark.groups] if index >= mark.groups else ["old", index]
    actions = []
    for action in parser._actions[mark.actions:]:
        if id(action) not in where or not action.option_strings:
            return None  # a positional, or an action outside any group: not recorded
        metavar = action.metavar
        actions.append({
            "group": where[id(action)],
            "usage": action.format_usage(),
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "nargs": _shown(action.nargs) if isinstance(action.nargs, str) else action.nargs,
            "const": _shown(action.const),
            "default": _shown(action.default),
            "type": _shown(action.type),
            "choices": None if action.choices is None else [str(c) for c in action.choices],
            "required": action.required,
            "help": _shown(action.help),
            "metavar": list(metavar) if isinstance(metavar, tuple) else _shown(metavar),
        })
    groups = [{"title": g.title, "description": g.description} for g in new_groups]
    return {"groups": groups, "actions": actions}


def record(parser: argparse.ArgumentParser, mark: Mark) -> None:
    """Keep what vLLM added to ``parser`` since ``mark`` for later ``--help`` runs (best effort)."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        key = cache_key()
        path = folder / f"{key}.json"
        if path.exists():
            os.utime(path)  # recently used: kept when old records are pruned
            return
        spec = _spec(parser, mark)
        if spec is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, **spec}))
        os.replace(tmp, path)
        for old in sorted(folder.glob("vllm-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]:
            old.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - a cache must never break the command line
        logger.debug("engine flags not cached: %s", exc)


# ---------------------------------------------------------------- showing
class _ShownAction(argparse.Action):
    """A vLLM engine flag as recorded: enough for ``--help``; never used to parse a value."""

    def __init__(self, item: dict[str, Any]) -> None:
        metavar = item["metavar"]
        super().__init__(
            option_strings=item["option_strings"],
            dest=item["dest"],
            nargs=_unshown(item["nargs"]),
            const=_unshown(item["const"]),
            default=_unshown(item["default"]),
            type=_unshown(item["type"]),
            choices=item["choices"],
            required=item["required"],
            help=_unshown(item["help"]),
            metavar=tuple(metavar) if isinstance(metavar, list) else _unshown(metavar),
        )
        self._usage = item["usage"]

    def format_usage(self) -> str:
        return self._usage

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise RuntimeError("a recorded engine flag only shows in --help; it cannot parse")


def add_cached_engine_flags(parser: argparse.ArgumentParser) -> bool:
    """Add the recorded vLLM engine flags to ``parser`` for ``--help``; False if no record matches."""
    folder = cache_dir()
    if folder is None:
        return False
    try:
        key = cache_key()
        data = json.loads((folder / f"{key}.json").read_text())
        if data.get("key") != key:
            return False
        actions = [(item["group"], _ShownAction(item)) for item in data["actions"]]
        titles = [(g["title"], g["description"]) for g in data["groups"]]
    except Exception:  # noqa: BLE001 - no record (or an unreadable one): build vLLM's parser
        return False
    old_groups = list(parser._action_groups)
    new_groups = [parser.add_argument_group(title, description) for title, description in titles]
    for (kind, index), action in actions:
        (new_groups if kind == "new" else old_groups)[index]._add_action(action)
    return True
