"""The record slice: export the session (its zip and HTML report, as downloads) and import one back, laid out
(``render_record_buttons``, under the chat) and wired (``setup_record_events``). The work is ``session_files``'
(over ``dots3_demo.workbench.record``).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import gradio as gr

from dots3_demo.core.settings import chat_settings_from_controls
from dots3_demo.core.state import ChatSession, StudioState
from dots3_demo.engine.protocol import ChatEngine
from dots3_demo.profiles import Profile
from dots3_demo.ui import chat_views, layout, session_files, views
from dots3_demo.ui import compare as compare_ui
from dots3_demo.workbench.compare import CompareSession
from dots3_demo.workbench.record import RecordError

if TYPE_CHECKING:
    pass


def render_record_buttons() -> dict[str, Any]:
    export = gr.Button("⇩ Export session", size="sm", min_width=90, elem_id="export-session")
    zip_file = gr.DownloadButton("session .zip", size="sm", visible=False, elem_id="export-zip")
    report_file = gr.DownloadButton("report .html", size="sm", visible=False, elem_id="export-html")
    import_file = gr.UploadButton("⇧ Import session", size="sm", file_types=[".zip"], file_count="single",
                                  min_width=90, elem_id="import-session")
    return dict(export=export, zip_file=zip_file, report_file=report_file, import_file=import_file)


def on_export(profile: Profile, engine: ChatEngine | None, studio: StudioState, session: ChatSession,
              compared: CompareSession, *controls: Any) -> tuple[Any, Any, str]:
    """The session's zip and HTML report (the chat and the compare rounds) as two download buttons; a session
    that cannot be exported (a file of it is gone) says why and offers nothing."""
    settings = chat_settings_from_controls(**layout.ChatControls.named(controls))
    served_by = asyncio.run(session_files.engine_vllm_version(engine))  # a worker thread: no loop runs here
    try:
        exported = session_files.export_session(profile, engine, studio, session, settings,
                                                compare=compared.rounds, engine_vllm=served_by)
    except RecordError as exc:
        gr.Warning(str(exc), duration=8)
        hidden = gr.DownloadButton(visible=False)
        return hidden, hidden, f"⚠ Not exported: {views.esc(exc)}"
    line = (f"Exported {exported.replies} repl{'y' if exported.replies == 1 else 'ies'} and {exported.media} media "
            f"file{'' if exported.media == 1 else 's'}: download the session (`{views.esc(exported.zip_path.name)}`, "
            "to import later) and its report (one HTML page that opens offline).")
    return (gr.DownloadButton(f"⇩ {exported.zip_path.suffix[1:]}", value=str(exported.zip_path), visible=True),
            gr.DownloadButton("⇩ report", value=str(exported.html_path), visible=True), line)


# What an import updates, in its output order (``setup_record_events`` wires the components by these names).
IMPORT_OUTPUTS = ("session", "chatbot", "tool_panel", "figures", "reply_picker", "rating_status", "rating_note",
                  "record_status", *(f"compare_{n}" for n in compare_ui.RoundShown.names()),
                  "video", "images", "audio_file", "audio_mic", *layout.BudgetControls.names(),
                  *layout.ChatControls.names())


def on_import(profile: Profile, session: ChatSession, compared: CompareSession, path: str | None) -> tuple[Any, ...]:
    """A session zip into this browser session: the conversation and its ratings, the settings, the files the
    panels held (the panels' change events inspect them again), and compare's rounds (its columns show the last
    one again). A bad file: one line, nothing changed."""
    if not path:
        return tuple(gr.skip() for _ in IMPORT_OUTPUTS)
    try:
        imported = session_files.import_session(path, session)
    except RecordError as exc:
        gr.Warning(f"Not imported: {exc}", duration=10)
        kept = {name: gr.skip() for name in IMPORT_OUTPUTS}
        kept["record_status"] = f"⚠ Not imported: {views.esc(exc)} The conversation is as it was."
        return tuple(kept[name] for name in IMPORT_OUTPUTS)
    restored, panels, budget, setup = imported.session, imported.panels, imported.budget, imported.chat
    latest = chat_views.picked_reply(restored)
    picker = gr.Dropdown(choices=chat_views.reply_choices(restored), value=latest)
    microphone = panels.audio_source == "microphone"
    sampling = setup.sampling
    values: dict[str, Any] = {
        "session": restored, "chatbot": list(restored.display), "tool_panel": chat_views.tool_rows(restored),
        "figures": restored.figures, "reply_picker": picker,
        "rating_status": chat_views.rating_md(restored, latest), "rating_note": chat_views.note_of(restored, latest),
        "record_status": views.esc(imported.summary),
        **{f"compare_{n}": v for n, v in zip(compare_ui.RoundShown.names(), compare_ui.show_round(
            profile, replace(compared, rounds=imported.compare)).components(), strict=True)},
        "video": panels.video, "images": list(panels.images) or None,
        "audio_file": None if microphone else panels.audio, "audio_mic": panels.audio if microphone else None,
        "seq": budget.seq, "reserve_auto": budget.output_reserve is None, "reserve": budget.configured_reserve,
        "max_new_tokens": budget.max_new_tokens, "audio_cap": budget.audio_cap, "k_mode": budget.k_mode,
        "system_prompt": setup.system_prompt, "tools_json": setup.tools_json, "temperature": sampling.temperature,
        "top_p": sampling.top_p, "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "max_tokens": sampling.max_tokens, "seed": -1 if sampling.seed is None else sampling.seed,
        "repetition_penalty": sampling.repetition_penalty, "tool_choice": setup.tool_choice,
    }
    return tuple(values[name] for name in IMPORT_OUTPUTS)


def setup_record_events(panel: layout.ChatPanel, uploads: layout.UploadPanels, budget: layout.BudgetControls,
                        controls: layout.ChatControls, tools: layout.ToolsPanel, studio: gr.State,
                        compare: compare_ui.ComparePanel, *, profile: Profile, engine: ChatEngine | None) -> None:
    """Export (the session's zip and HTML report, as downloads) and Import (a zip back into this session)."""
    record = panel.record
    record.export.click(partial(on_export, profile, engine),
                        [studio, panel.session, compare.session, *controls.components()],
                        [record.zip_file, record.report_file, record.status], api_name="export_session",
                        concurrency_id="record", concurrency_limit=2)
    by_name = {"session": panel.session, "chatbot": panel.chatbot, "tool_panel": tools.panel,
               "figures": panel.figures, "reply_picker": panel.rating.reply, "rating_status": panel.rating.status,
               "rating_note": panel.rating.note,
               **{f"compare_{n}": c for n, c in zip(compare_ui.RoundShown.names(),
                                                    compare_ui.round_outputs(compare).components(), strict=True)},
               "record_status": record.status, "video": uploads.video, "images": uploads.images,
               "audio_file": uploads.audio_file, "audio_mic": uploads.audio_mic,
               **dict(zip(layout.BudgetControls.names(), budget.components(), strict=True)),
               **dict(zip(layout.ChatControls.names(), controls.components(), strict=True))}
    record.import_file.upload(partial(on_import, profile), [panel.session, compare.session, record.import_file],
                              [by_name[n] for n in IMPORT_OUTPUTS],
                              api_name="import_session", concurrency_id="record", concurrency_limit=2)
