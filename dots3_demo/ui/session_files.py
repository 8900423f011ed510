"""A browser session as files (issue 12 §3), for the page's Export and Import: plain functions over
``workbench.record`` that ``ui.app`` turns into downloads and component updates.

* :func:`export_session` writes the session's zip and its HTML report into a folder of their own;
* :func:`import_session` reads a zip into this browser session: the conversation (answers, ratings, the mark of
  each reply, so Regenerate works from any reply), the budget and chat settings, and the files the upload
  panels held. A bad file raises ``RecordError`` (one line) and changes nothing.

The zip is unpacked inside Gradio's cache, which Gradio serves files from where they are: a panel shown an
imported file keeps its path, the path the conversation names, so the chat knows the panel's media were sent
with the conversation already and does not attach them again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gradio.utils import get_upload_folder

from dots3_demo.budget import VideoSettings
from dots3_demo.core.records import CompareRound
from dots3_demo.core.settings import ChatSettings
from dots3_demo.core.state import ChatSession, StudioState, current_session
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.engine.remote import server_version
from dots3_demo.profiles import Profile
from dots3_demo.ui import chat
from dots3_demo.workbench import record as rec

IMPORTS_FOLDER = "session-imports"  # inside Gradio's cache: each import unpacks into a folder of its own here


@dataclass(frozen=True)
class ExportedSession:
    zip_path: Path
    html_path: Path
    replies: int
    media: int


@dataclass(frozen=True)
class ImportedSession:
    """What an import puts in the page: the conversation, the panels' files, the settings, and a line about it."""

    session: ChatSession
    panels: rec.Panels  # paths in Gradio's cache
    budget: VideoSettings
    chat: rec.ChatSetup
    compare: tuple[CompareRound, ...]
    summary: str


def export_session(profile: Profile, engine: ChatEngine | None, studio: StudioState, session: ChatSession,
                   settings: ChatSettings, *, compare: Sequence[CompareRound] = (),
                   out_dir: str | Path | None = None, engine_vllm: str | None = None) -> ExportedSession:
    """The session's zip and HTML report (the chat and the ``compare`` rounds), in a new folder under
    ``out_dir`` (default: Gradio's cache, which the page may serve); ``engine_vllm``: the server's vLLM version
    (remote mode; :func:`engine_vllm_version`). Raises ``RecordError`` (one line) when a file of the session is
    gone."""
    shown = current_session(session)
    record = rec.build_record(shown, studio, rec.chat_setup(settings), profile=profile,
                              model=(engine.model or "") if engine is not None else "",
                              engine=engine.label if engine is not None else "", compare=compare,
                              engine_vllm=engine_vllm)
    folder = Path(tempfile.mkdtemp(prefix="session-export-", dir=out_dir or get_upload_folder()))
    return ExportedSession(zip_path=rec.export_zip(record, folder), html_path=rec.export_html(record, folder),
                           replies=shown.reply_count, media=len(record.media))


async def engine_vllm_version(engine: ChatEngine | None) -> str | None:
    """The vLLM that serves ``engine``'s replies when it is not the one installed here: a remote server's
    ``/version`` ("server did not say" when it does not answer); None for an in-process engine or none."""
    endpoint = getattr(engine, "endpoint", None)
    if not isinstance(endpoint, str):
        return None
    return await server_version(endpoint) or "server did not say"


def import_session(path: str | Path, session: ChatSession, *, dest_dir: str | Path | None = None) -> ImportedSession:
    """The session zip at ``path`` as this browser session's conversation (``session`` gives its id and Clear
    count). Unpacks into a new folder under ``dest_dir`` (default: in Gradio's cache: see above); raises
    ``RecordError`` (one line) for a broken, hostile or foreign file, with nothing left behind."""
    dest = Path(dest_dir) if dest_dir is not None else Path(get_upload_folder()) / IMPORTS_FOLDER
    record = rec.import_zip(path, dest)
    restored = rec.restore_session(record, session)
    marks = chat.read_reply_marks(restored)
    restored = replace(restored, reply_marks=marks or ())
    return ImportedSession(session=restored, panels=record.panels, budget=record.budget, chat=record.chat,
                           compare=record.compare,
                           summary=_summary(Path(path).name, record, restored, marks is not None))


def _summary(name: str, record: rec.SessionRecord, session: ChatSession, marked: bool) -> str:
    replies, rated = session.reply_count, len(session.ratings)
    media = len(record.media)
    rounds = f", {len(record.compare)} compare round(s)" if record.compare else ""
    line = (f"Imported {name}: {replies} repl{'y' if replies == 1 else 'ies'} ({rated} rated), {media} media "
            f"file{'' if media == 1 else 's'}{rounds}, exported {record.exported_at} by Dots3 NOTE Studio "
            f"{record.app_version} ({record.model or 'preview'}). The panels are inspected again.")
    if replies and not marked:
        line += " Its replies cannot be regenerated one by one (the conversation's bubbles do not match its messages)."
    return line
