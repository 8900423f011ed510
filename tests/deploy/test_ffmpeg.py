"""The first run on a machine without FFmpeg (``dots3_demo.ffmpeg``), with real libraries and no mocks.

FFmpeg's libraries are hidden from the dynamic loader in a private mount namespace (``unshare
--mount``, root): an empty file is bind-mounted over every library file the loader resolves the
names torchcodec links against to (Debian's ``libavutil.so.57`` …), so none of them loads, and for
"nothing at all" an empty folder over PyAV's bundle (``av.libs``). Nothing else on the machine
changes. The app's code then runs in a child process there:

* Debian's libraries hidden, PyAV's present: ``python app.py inspect`` decodes the bundled example
  clip with its sound track (through the links and one re-execution), and a process spawned the way
  vLLM spawns its engine core decodes it too;
* no FFmpeg at all, or no fallback: every message says "FFmpeg's libraries are not installed", the
  page header says it, and nothing blames the file.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dots3_demo import ffmpeg

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "assets" / "examples" / "room_clip.mp4"
NOT_INSTALLED = "FFmpeg's libraries are not installed"
BLAMES_FILE = ("truncated", "may be corrupt", "could not read this video")
TIMEOUT_S = 600


def system_ffmpeg_files() -> list[Path]:
    """Every file the dynamic loader resolves one of torchcodec's FFmpeg names to (``ldconfig -p``)."""
    names = {n for _, needed in ffmpeg.torchcodec_requirements() for n in needed}
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    files = set()
    for line in listing.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] in names and path:
            files.add(Path(path).resolve())
    return sorted(files)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def hide(tmp_path_factory):
    """``hide(cmd, pyav=False)``: ``cmd`` as a command line that runs with FFmpeg's libraries hidden."""
    if not _can_unshare():
        pytest.fail("`unshare --mount` is not permitted here (needs root, in a container with CAP_SYS_ADMIN): "
                    "these tests hide FFmpeg's libraries with bind mounts in a private mount namespace")
    bundle = ffmpeg.pyav_bundle()
    assert bundle is not None, "PyAV's wheel bundles FFmpeg in site-packages/av.libs"
    folder = tmp_path_factory.mktemp("hide")
    empty_file, empty_dir = folder / "empty", folder / "empty.d"
    empty_file.touch()
    empty_dir.mkdir()
    system = system_ffmpeg_files()

    def command(cmd: list[str], *, pyav: bool = False) -> list[str]:
        targets = [(empty_file, lib) for lib in system] + ([(empty_dir, bundle)] if pyav else [])
        mounts = [f"mount --bind '{src}' '{dst}'" for src, dst in targets]
        return ["unshare", "--mount", "--propagation", "private", "sh", "-ec",
                "; ".join([*mounts, 'exec "$@"']), "sh", *cmd]

    return command


def run(cmd: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", ffmpeg.LINKS_ENV)}
    env.update(XDG_CACHE_HOME=str(cache), GRADIO_ANALYTICS_ENABLED="False", VLLM_LOGGING_LEVEL="WARNING",
               TOKENIZERS_PARALLELISM="false")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def inspect_line(out: str) -> dict:
    """The inspect command's JSON line for the clip in a child's output."""
    return next(item for line in out.splitlines() if line.startswith("{") and (item := json.loads(line)).get("file"))


# ---------------------------------------------------------------- plain checks, this machine as it is
def test_torchcodec_needs_are_read_from_its_libraries():
    requirements = ffmpeg.torchcodec_requirements()
    assert requirements, "torchcodec is installed (requirements.txt)"
    majors = [major for major, _ in requirements]
    assert majors == sorted(majors, reverse=True), "tried newest first, as torchcodec does"
    for _, needed in requirements:
        assert {n.split(".so.")[0] for n in needed} >= {"libavutil", "libavcodec", "libavformat"}


def test_a_system_ffmpeg_wins():
    environ: dict[str, str] = {}
    status = ffmpeg.ensure_libraries(reexec=False, environ=environ)
    assert status.available and status.major is not None and status.links is None
    assert environ == {}, "nothing is linked or set when the system's FFmpeg loads"
    assert ffmpeg.libraries_problem() is None


def test_links_fall_back_to_a_private_temp_folder(tmp_path, monkeypatch):
    """No writable cache folder: the links go under the temp dir, in a folder only this user can write."""
    monkeypatch.setenv("HOME", "/dev/null")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bundle = ffmpeg.pyav_bundle()
    folder = ffmpeg.link_bundle(bundle, {"XDG_CACHE_HOME": "/dev/null"})
    assert folder.is_relative_to(tmp_path)
    assert not os.stat(folder.parent.parent).st_mode & 0o022
    plain = {p.name for p in folder.iterdir() if ".so." in p.name and "-" not in p.name}
    assert {n for _, needed in ffmpeg.torchcodec_requirements() if set(needed) <= plain for n in needed}, plain
    assert ffmpeg.link_bundle(bundle, {"XDG_CACHE_HOME": "/dev/null"}) == folder, "reused, not made again"


def test_help_skips_the_check():
    assert ffmpeg.wants_help(["--help"]) and ffmpeg.wants_help(["inspect", "-h"])
    assert ffmpeg.wants_help(["--help=Dots3 NOTE Studio"]) and not ffmpeg.wants_help(["inspect", "a.mp4"])


def test_header_says_it(profile):
    from dots3_demo.ui import views

    assert "d3-ffmpeg" not in views.header_html(profile, "preview")
    problem = f"{NOT_INSTALLED}: {ffmpeg.TORCHCODEC_CANNOT}. {ffmpeg.INSTALL_HINT}"
    header = views.header_html(profile, "preview", problem)
    assert 'id="d3-ffmpeg"' in header and problem in html.unescape(header)


# ---------------------------------------------------------------- in a namespace without FFmpeg
def test_pyav_ffmpeg_decodes_the_example_through_inspect(hide, tmp_path):
    """(a) Debian's FFmpeg hidden: ``python app.py inspect`` links PyAV's, re-executes, decodes."""
    done = run(hide([sys.executable, "app.py", "inspect", str(CLIP), "--json"]), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FFmpeg bundled with PyAV" in done.stderr and "Restarting once" in done.stderr
    assert NOT_INSTALLED not in done.stderr
    video = last_json(done.stdout)["video"]
    assert len(video["frames"]) == 8 and video["complete"] is True
    assert video["audio"]["kept"] and video["audio"]["decoded"] and len(video["audio_segments"]) >= 2
    links = list((tmp_path / "dots3-studio" / "ffmpeg").iterdir())
    assert len(links) == 1 and any(p.name.startswith("libavutil.so.") for p in links[0].iterdir())


def test_spawned_processes_inherit_the_libraries(hide, tmp_path):
    """(a) vLLM's engine processes are spawned: they must find PyAV's FFmpeg too (LD_LIBRARY_PATH)."""
    done = run(hide([sys.executable, "-m", "tests.deploy.ffmpeg_child", "spawn"]), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = last_json(done.stdout)
    assert result["links"] and result["major"] is not None
    child = result["child"]
    assert child["available"] and child["ffmpeg_major"] == result["major"]
    assert result["links"] in child["ld_library_path"].split(os.pathsep)
    assert child["frames"] == 80 and child["audio_samples"] == 8 * 16000


def test_without_the_fallback_nothing_blames_the_file(hide, tmp_path):
    """The bug this fixes: PyAV opens the clip, torchcodec has no FFmpeg → "the file may be truncated".
    Debian's FFmpeg hidden and no re-execution: handler, header and inspect say what is missing."""
    done = run(hide([sys.executable, "-m", "tests.deploy.ffmpeg_child", "ui"]), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result, item = last_json(done.stdout), inspect_line(done.stdout)
    assert result["torchcodec_ffmpeg"] is None, "control: torchcodec really finds no FFmpeg here"
    for message in (result["error"], html.unescape(result["status"]), item["error"]):
        assert NOT_INSTALLED in message and "vLLM's video decoder (torchcodec) cannot read any video" in message
        assert not any(word in message for word in BLAMES_FILE), message
    assert result["inspect_rc"] == 2 and f"warning: {NOT_INSTALLED}" in done.stderr
    assert 'id="d3-ffmpeg"' in result["header"] and result["problem"] in html.unescape(result["header"])
    assert "PyAV" not in result["problem"], "PyAV still opens files here"


def test_no_ffmpeg_at_all_everything_says_so(hide, tmp_path):
    """(b, c) Neither Debian's nor PyAV's FFmpeg: the video handler, the inspect output, the header."""
    done = run(hide([sys.executable, "-m", "tests.deploy.ffmpeg_child", "ui"], pyav=True), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result, item = last_json(done.stdout), inspect_line(done.stdout)
    assert result["error"].startswith("Video rejected")
    for message in (result["error"], html.unescape(result["status"]), item["error"]):
        assert NOT_INSTALLED in message and "apt-get install ffmpeg" in message
        assert not any(word in message for word in BLAMES_FILE), message
    assert result["inspect_rc"] == 2 and f"warning: {NOT_INSTALLED}" in done.stderr
    assert result["problem"].startswith(NOT_INSTALLED) and "PyAV" in result["problem"]
    assert 'id="d3-ffmpeg"' in result["header"] and result["problem"] in html.unescape(result["header"])
    assert not (tmp_path / "dots3-studio").exists(), "no bundle to link"


def test_readme_quotes_the_messages():
    """Troubleshooting quotes exactly what the header and the upload panels say."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f'"{NOT_INSTALLED}: {ffmpeg.TORCHCODEC_CANNOT}. {ffmpeg.INSTALL_HINT}"' in readme
    assert f"…cannot read any video or decode its sound track, and {ffmpeg.PYAV_CANNOT}. …" in readme
    assert ffmpeg.TORCHCODEC_CANNOT.endswith("cannot read any video or decode its sound track")
    assert "⚠ incomplete: sound track not decoded" in readme
