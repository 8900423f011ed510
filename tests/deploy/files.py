"""Small readers for the deployment files the tests check (no Docker needed).

- :func:`instructions` splits a Dockerfile into ``(KEYWORD, arguments)`` pairs (continuations
  joined, comments and parser directives dropped).
- :func:`copies` resolves ``COPY`` lines against ``WORKDIR``.
- :func:`dockerignore_excludes` applies ``.dockerignore`` rules the way Docker does: the last
  matching pattern wins, ``!`` re-includes, a pattern matching a parent folder matches its files.
- :func:`front_matter`, :func:`pins` and :func:`runtime_lines` read README.md and requirements.txt.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
README = ROOT / "README.md"
REQUIREMENTS = ROOT / "requirements.txt"
TESTS_MARKER = re.compile(r"^# tests")  # the Dockerfile's `sed '/^# tests/,$d'` cuts here


def instructions(text: str) -> list[tuple[str, str]]:
    """``[(KEYWORD, arguments), ...]`` of a Dockerfile."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comments may sit between continuation lines too
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def only(instrs: list[tuple[str, str]], keyword: str) -> list[str]:
    """The arguments of every ``keyword`` instruction, in order."""
    return [args for kw, args in instrs if kw == keyword]


def exec_form(args: str) -> list[str]:
    """A JSON-array (exec form) instruction's argv; raises ValueError for the shell form."""
    value = json.loads(args)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not an exec-form array: {args}")
    return value


def healthcheck_cmd(args: str) -> list[str]:
    """The argv of ``HEALTHCHECK [--option=…]… CMD [...]``."""
    _, sep, command = args.partition("CMD ")
    if not sep:
        raise ValueError(f"HEALTHCHECK without CMD: {args}")
    return exec_form(command)


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]  # relative to the build context
    dest: str  # absolute path in the image


def copies(instrs: list[tuple[str, str]]) -> list[Copy]:
    """Every ``COPY`` from the build context (not ``--from`` stages), destinations made absolute."""
    workdir = "/"
    result: list[Copy] = []
    for keyword, args in instrs:
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args))
        elif keyword == "COPY":
            if any(p.startswith("--from") for p in args.split()):
                continue
            parts = [p for p in args.split() if not p.startswith("--")]
            *sources, dest = parts
            absolute = posixpath.normpath(posixpath.join(workdir, dest))
            if dest.endswith("/") or dest == ".":
                absolute = absolute.rstrip("/") + "/"
            result.append(Copy(tuple(posixpath.normpath(s) for s in sources), absolute))
    return result


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """``[(is_exception, regex), ...]`` from a ``.dockerignore``."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        rules.append((exception, _pattern_regex(pattern)))
    return rules


def dockerignore_excludes(rules: list[tuple[bool, re.Pattern[str]]], path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) stays out of the build context."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for exception, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not exception
    return excluded


def image_path(copy_source: str, context_file: str, dest: str) -> str:
    """Where ``COPY copy_source dest`` puts ``context_file`` (a file of, or under, the source)."""
    if context_file == copy_source:  # a file: into a folder (dest/) or as dest
        return dest + posixpath.basename(copy_source) if dest.endswith("/") else dest
    inner = posixpath.relpath(context_file, copy_source)  # a folder: its contents go into dest
    return posixpath.join(dest.rstrip("/"), inner)


def useradd(run_args: list[str]) -> tuple[str, str] | None:
    """``(uid, login)`` of the first ``useradd --uid N … LOGIN`` in the RUN lines."""
    import shlex

    for args in run_args:
        for command in re.split(r"&&|;|\bthen\b|\bfi\b", args):
            words = shlex.split(command)
            if words and words[0] == "useradd":
                uid = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--uid", "-u")), None)
                if uid is not None:
                    return uid, words[-1]
    return None


def front_matter(text: str) -> dict:
    """The YAML block a Hugging Face Space reads: it must open the file."""
    if not text.startswith("---\n"):
        raise ValueError("README.md does not start with '---' front matter")
    block, sep, _ = text[4:].partition("\n---\n")
    if not sep:
        raise ValueError("README.md front matter is not closed by '---'")
    value = yaml.safe_load(block)
    if not isinstance(value, dict):
        raise ValueError("README.md front matter is not a mapping")
    return value


def runtime_lines(text: str) -> list[str]:
    """requirements.txt up to its ``# tests`` line, as the Dockerfile's ``sed`` cuts it."""
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if TESTS_MARKER.match(line)), len(lines))
    return lines[:end]


def requirement_names(lines: list[str]) -> list[str]:
    """Normalised project names of requirement lines (comments and blanks skipped)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    names = []
    for line in lines:
        spec = line.split(" #", 1)[0].strip()
        if spec and not spec.startswith(("#", "-")):
            names.append(canonicalize_name(Requirement(spec).name))
    return names


def pins(text: str) -> dict[str, str]:
    """``{name: version}`` for every ``name==version`` requirement."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found = {}
    for line in text.splitlines():
        spec = line.split(" #", 1)[0].strip()
        if not spec or spec.startswith(("#", "-")):
            continue
        req = Requirement(spec)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            found[canonicalize_name(req.name)] = exact[0]
    return found
