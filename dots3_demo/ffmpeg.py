"""FFmpeg's shared libraries for vLLM's video decoder (torchcodec): checked, and provided when missing.

torchcodec decodes every video — frames and sound track — with FFmpeg's shared libraries, which it
does not ship. It tries ``libtorchcodec_core9.so`` down to ``core4.so``, each linked against one
FFmpeg major version (``libavutil.so.60`` …), and decodes nothing when none of them loads; vLLM's
``_decode_audio`` then drops a video's sound track without a word. Debian's ``ffmpeg`` package
provides the libraries. PyAV's wheel (``av``, in requirements.txt) bundles a whole FFmpeg too, but
under renamed files (``site-packages/av.libs/libavutil-<hash>.so.60.…``) that torchcodec cannot
find.

:func:`ensure_libraries` (called by ``app.main`` before anything heavy is imported) makes them
findable: when no FFmpeg version torchcodec was built for can be loaded, it links PyAV's files
under their plain names (``libavutil.so.60`` …) — and every other file of ``av.libs`` under its own
name, because the bundled libraries find each other through ``$ORIGIN``, which is the folder of the
link — in a cache folder (``$XDG_CACHE_HOME/dots3-studio/ffmpeg/…``, else ``~/.cache/…``, else a
private folder under the temp dir), appends that folder to ``LD_LIBRARY_PATH`` and re-executes the
process once. glibc reads the variable only when a process starts, and preloading the files with
ctypes does not satisfy torchcodec, because their SONAMEs are the renamed ones. The variable stays
in the environment, so vLLM's engine-core and worker processes (spawned) find the libraries too.
An FFmpeg the system or the operator's own ``LD_LIBRARY_PATH`` provides always wins: nothing is done
then.

The check loads the libraries with ctypes exactly as torchcodec will (same names, same order,
read from its own ``libtorchcodec_core*.so`` files), so it imports neither torch nor torchcodec.
:func:`libraries_problem` is the one sentence every message uses when it fails.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import struct
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

NOT_INSTALLED = "FFmpeg's libraries are not installed"
INSTALL_HINT = "Install FFmpeg (apt-get install ffmpeg) and restart the studio."
TORCHCODEC_CANNOT = "vLLM's video decoder (torchcodec) cannot read any video or decode its sound track"
# torchcodec itself missing or broken (FFmpeg is not the cause): what to install instead.
TORCHCODEC_NOT_INSTALLED = ("vLLM's video decoder (torchcodec) is not installed, so no video can be read and no "
                            "sound track decoded. Install it (pip install 'torchcodec>=0.14', the build for the "
                            "installed torch, as vLLM's requirements pin it) and restart the studio.")
TORCHCODEC_REINSTALL = ("Reinstall torchcodec in the build for the installed torch (pip install --force-reinstall "
                        "'torchcodec>=0.14' from the index torch came from) and restart the studio.")
# The names FFmpeg's own libraries have in a loader's message (libavutil.so.60, libswresample.so.5 …).
FFMPEG_LIBRARY_NAME = re.compile(r"\blib(?:av[a-z]+|sw[a-z]+|postproc)\.so")
PYAV_CANNOT = "PyAV cannot open any audio or video file"

# FFmpeg's own libraries among a torchcodec core library's dependencies.
_FFMPEG_LIB = re.compile(r"^lib(?:av[a-z]+|sw[a-z]+|postproc)\.so\.\d+$")
# A file of PyAV's bundle: libavutil-5809ad29.so.60.26.102 → ("libavutil", "60").
_BUNDLED = re.compile(r"^(lib(?:av[a-z]+|sw[a-z]+|postproc))-[0-9a-f]+\.so\.(\d+)(?:\.\d+)*$")
_CORE = re.compile(r"^libtorchcodec_core(\d+)\.so$")


@dataclass(frozen=True)
class FFmpegStatus:
    """Which FFmpeg torchcodec will load in this process."""

    major: int | None  # FFmpeg major version of the first core library whose libraries load; None: none
    torchcodec: bool = True  # False: torchcodec is not installed, so there is nothing to check
    links: Path | None = None  # the folder of links to PyAV's FFmpeg, when this process made or found one
    errors: tuple[str, ...] = field(default=())  # why each version did not load (first lines)

    @property
    def available(self) -> bool:
        return self.major is not None or not self.torchcodec


# ---------------------------------------------------------------- what torchcodec needs
def elf_needed(path: str | os.PathLike) -> list[str]:
    """The ``DT_NEEDED`` entries of an ELF shared library (what ``readelf -d`` lists), [] if not ELF."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return []
        wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
        if wide:
            f.seek(0x28)
            shoff, = struct.unpack(end + "Q", f.read(8))
            f.seek(0x3A)
        else:
            f.seek(0x20)
            shoff, = struct.unpack(end + "I", f.read(4))
            f.seek(0x2E)
        shentsize, shnum = struct.unpack(end + "HH", f.read(4))
        word = "Q" if wide else "I"
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link
        header = struct.Struct(end + "II" + word * 4 + "I")
        sections = []
        for i in range(shnum):
            f.seek(shoff + i * shentsize)
            sections.append(header.unpack(f.read(header.size)))
        dyn = struct.Struct(end + ("qQ" if wide else "iI"))
        names: list[str] = []
        for _, sh_type, _, _, offset, size, link in sections:
            if sh_type != 6 or link >= len(sections):  # SHT_DYNAMIC, and its string table
                continue
            f.seek(offset)
            table = f.read(size)
            strtab_offset, strtab_size = sections[link][4], sections[link][5]
            f.seek(strtab_offset)
            strings = f.read(strtab_size)
            for pos in range(0, len(table) - dyn.size + 1, dyn.size):
                tag, value = dyn.unpack_from(table, pos)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    names.append(strings[value:strings.index(b"\0", value)].decode())
        return names


def _package_dir(name: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def torchcodec_installed() -> bool:
    """Whether the ``torchcodec`` package is there at all (found, not imported)."""
    return _package_dir("torchcodec") is not None


def torchcodec_requirements() -> list[tuple[int, tuple[str, ...]]]:
    """``(FFmpeg major, FFmpeg libraries)`` for each core library torchcodec ships, in the order it
    tries them (newest FFmpeg first); [] when torchcodec is not installed."""
    folder = _package_dir("torchcodec")
    if folder is None:
        return []
    found = []
    for path in folder.glob("libtorchcodec_core*.so"):
        match = _CORE.match(path.name)
        if not match:
            continue
        try:
            needed = tuple(n for n in elf_needed(path) if _FFMPEG_LIB.match(n))
        except OSError:
            continue
        if needed:
            found.append((int(match.group(1)), needed))
    return sorted(found, reverse=True)


def _load(name: str) -> str | None:
    """Load a library by name as torchcodec's core library will; None, or why it failed."""
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else name
    return None


def _first_loadable(requirements: Sequence[tuple[int, tuple[str, ...]]]) -> tuple[int | None, tuple[str, ...]]:
    errors = []
    for major, names in requirements:
        failed = next((error for name in names if (error := _load(name))), None)
        if failed is None:
            return major, ()
        errors.append(f"FFmpeg {major}: {failed}")
    return None, tuple(errors)


# ---------------------------------------------------------------- PyAV's bundled FFmpeg
def pyav_bundle() -> Path | None:
    """PyAV's folder of bundled libraries (``site-packages/av.libs``), if it holds FFmpeg."""
    folder = _package_dir("av")
    if folder is None:
        return None
    libs = folder.parent / "av.libs"
    try:
        return libs if any(_BUNDLED.match(p.name) for p in libs.iterdir()) else None
    except OSError:
        return None


def _plain_names(bundle: Path) -> dict[str, str]:
    """``{"libavutil.so.60": "libavutil-5809ad29.so.60.26.102", …}`` for PyAV's FFmpeg files."""
    plain = {}
    for path in bundle.iterdir():
        if match := _BUNDLED.match(path.name):
            plain[f"{match.group(1)}.so.{match.group(2)}"] = path.name
    return plain


def _cache_roots(environ: MutableMapping[str, str]) -> list[Path]:
    roots = []
    if environ.get("XDG_CACHE_HOME"):
        roots.append(Path(environ["XDG_CACHE_HOME"]) / "dots3-studio" / "ffmpeg")
    try:
        roots.append(Path.home() / ".cache" / "dots3-studio" / "ffmpeg")
    except RuntimeError:  # no home directory
        pass
    return roots


def _private_temp_root() -> Path:
    """``$TMPDIR/dots3-studio-<uid>``, only if this user owns it and nobody else can write to it
    (a link there decides which code the studio loads); else a fresh private folder."""
    root = Path(tempfile.gettempdir()) / f"dots3-studio-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
        if root.is_dir() and not root.is_symlink() and info.st_uid == os.getuid() and not info.st_mode & 0o022:
            return root / "ffmpeg"
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="dots3-studio-ffmpeg-"))


def _links_ok(folder: Path, wanted: dict[str, Path]) -> bool:
    try:
        return all(os.readlink(folder / name) == str(target) for name, target in wanted.items())
    except OSError:
        return False


def link_bundle(bundle: Path, environ: MutableMapping[str, str] | None = None) -> Path:
    """A folder where PyAV's FFmpeg can be loaded by its plain names: links ``libavutil.so.60`` →
    ``av.libs/libavutil-<hash>.so.60.…`` and every file of ``av.libs`` under its own name (the
    bundled libraries find one another through ``$ORIGIN``, the folder of the link). One folder per
    bundle (its path and file names), reused when its links are right; OSError if no folder works."""
    environ = os.environ if environ is None else environ
    files = sorted(p.name for p in bundle.iterdir())
    wanted = {name: bundle / name for name in files}
    wanted.update({plain: bundle / real for plain, real in _plain_names(bundle).items()})
    key = hashlib.sha256("\n".join([str(bundle.resolve()), *files]).encode()).hexdigest()[:16]
    last_error: OSError | None = None
    for root in [*_cache_roots(environ), None]:
        try:
            root = _private_temp_root() if root is None else root
            folder = root / key
            if _links_ok(folder, wanted):
                return folder
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
            for name, target in wanted.items():
                os.symlink(target, staging / name)
            try:
                os.replace(staging, folder)  # atomic; fails if another process made a full folder first
            except OSError:
                for link in staging.iterdir():
                    link.unlink()
                staging.rmdir()
                if not _links_ok(folder, wanted):
                    raise
            return folder
        except OSError as exc:
            last_error = exc
    raise last_error or OSError("no folder for the FFmpeg links")


# ---------------------------------------------------------------- start-up
LINKS_ENV = "DOTS3_STUDIO_FFMPEG_LINKS"  # set before re-executing: the new process must not do it again


def _check(requirements: Sequence[tuple[int, tuple[str, ...]]], links: Path | None = None) -> FFmpegStatus:
    if not requirements:
        return FFmpegStatus(None, torchcodec=False)
    major, errors = _first_loadable(requirements)
    return FFmpegStatus(major, links=links, errors=errors)


_status: FFmpegStatus | None = None


def ensure_libraries(*, reexec: bool = True, environ: MutableMapping[str, str] | None = None) -> FFmpegStatus:
    """Make FFmpeg's libraries loadable for torchcodec, and say which ones it will use.

    Nothing happens when an FFmpeg version torchcodec supports already loads (the system's, or one
    on the operator's ``LD_LIBRARY_PATH``). Otherwise, with PyAV's bundle present, its links are
    made, their folder is appended to ``LD_LIBRARY_PATH`` and — with ``reexec`` — the process
    re-executes itself once (``os.execv`` of ``sys.orig_argv``; ``$DOTS3_STUDIO_FFMPEG_LINKS`` tells
    the new process not to do it again). Without ``reexec`` only processes started afterwards benefit.
    """
    global _status
    environ = os.environ if environ is None else environ
    requirements = torchcodec_requirements()
    links = Path(environ[LINKS_ENV]) if environ.get(LINKS_ENV) else None
    _status = _check(requirements, links)
    if _status.available or links is not None:  # it loads, or re-executing already did not help
        return _status
    bundle = pyav_bundle()
    if bundle is None:
        return _status
    try:
        folder = link_bundle(bundle, environ)
    except OSError as exc:
        _status = replace(_status, errors=(*_status.errors, f"PyAV's FFmpeg could not be linked: {exc}"))
        return _status
    path = environ.get("LD_LIBRARY_PATH", "")
    environ["LD_LIBRARY_PATH"] = f"{path}{os.pathsep}{folder}" if path else str(folder)
    environ[LINKS_ENV] = str(folder)
    if reexec and environ is os.environ and sys.orig_argv:
        print(f"note: no FFmpeg libraries on this machine; vLLM's video decoder (torchcodec) will use the "
              f"FFmpeg bundled with PyAV (links in {folder}). Restarting once to load them.",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os.execv(sys.executable, sys.orig_argv)
    _status = replace(_status, links=folder)
    return _status


def status() -> FFmpegStatus:
    """What :func:`ensure_libraries` found in this process (checked now if it never ran)."""
    global _status
    if _status is None:
        links = os.environ.get(LINKS_ENV)
        _status = _check(torchcodec_requirements(), Path(links) if links else None)
    return _status


def libraries_problem() -> str | None:
    """``"FFmpeg's libraries are not installed: …"`` when torchcodec can load no FFmpeg, else None."""
    if status().available:
        return None
    return f"{NOT_INSTALLED}: {TORCHCODEC_CANNOT}. {INSTALL_HINT}"


@cache
def pyav_problem() -> str | None:
    """Why PyAV (which opens and checks every audio and video upload) cannot load FFmpeg, or None."""
    try:
        import av  # noqa: F401
    except (ImportError, OSError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"{NOT_INSTALLED}: PyAV cannot load them ({detail}), so no audio or video file can be "
                f"opened. {INSTALL_HINT}")
    return None


def media_problem() -> str | None:
    """Everything the page header should say about FFmpeg, or None when both decoders have it."""
    torchcodec, pyav = libraries_problem(), pyav_problem()
    if torchcodec and pyav:
        return f"{NOT_INSTALLED}: {TORCHCODEC_CANNOT}, and {PYAV_CANNOT}. {INSTALL_HINT}"
    return torchcodec or pyav


def wants_help(argv: Sequence[str]) -> bool:
    """``-h``/``--help`` anywhere: argparse prints and exits before any media is touched."""
    return any(a in ("-h", "--help") or a.startswith("--help=") for a in argv)
