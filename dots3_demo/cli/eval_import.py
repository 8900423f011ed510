"""``python app.py eval-import {videomme,mvbench,longvideobench} ITEMS --out SET.jsonl``: a benchmark's items as a set.

ITEMS is the benchmark's item file as published (JSON list, JSON lines, or parquet with pyarrow); the conversion
is ``workbench.importers``' (the prompt, letter and video as lmms-eval's task code makes them). It writes the set
and prints how many items it wrote, skipped (each with its reason, on stderr) and whose video is not found.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from dots3_demo.workbench.importers import ImportResult

DESCRIPTION = (
    "A benchmark's items as a set for `app.py eval`: ITEMS is the item file as the benchmark publishes it (a JSON "
    "list, JSON lines, or parquet when pyarrow is installed). Video-MME: videoID, question_id, duration, domain, "
    "sub_category, task_type, question, options ('A. ...'), answer (the letter). MVBench: video, question, "
    "candidates, answer (the candidate's text; its letter is its place among them); one file per sub-task "
    "(--subtask, default the file's name). LongVideoBench: id, video_path, duration_group, question_category, "
    "question, option0...option4 ('N/A' left out) or candidates, correct_choice (the option's index). The prompt, "
    "the answer letter and the video are what lmms-eval's task code makes of an item. SET.jsonl gets the header "
    '{"set": {"score": "choice", "cluster": "media"}} (scored by the option letter, intervals clustered by the '
    "video), then per item: id, media (the video, relative to SET.jsonl's folder), prompt, target (the letter), "
    "sampling temperature 0 (the tasks' greedy decoding), metadata (Video-MME: duration, domain, sub_category, "
    "task_type; MVBench: sub_task; LongVideoBench: duration_group, question_category: the summary's breakdowns) "
    "and tags (the benchmark's name). An item that "
    "cannot be converted is skipped with its reason (stderr) and the rest is written; a video not found is "
    "written all the same (the eval reports it as that item's error) and counted. Exit status: 0 the set was "
    "written, 2 ITEMS could not be read, held no item that converts, or SET.jsonl exists (--force replaces it)."
)


def build_parser() -> FlexibleArgumentParser:
    from dots3_demo.cli.parser import new_parser
    from dots3_demo.workbench.importers import BENCHMARKS

    parser = new_parser(prog="app.py eval-import", description=DESCRIPTION)
    parser.add_argument("benchmark", choices=BENCHMARKS, help="the item file's benchmark")
    parser.add_argument("items", metavar="ITEMS", help="the benchmark's item file (.json, .jsonl or .parquet)")
    parser.add_argument("--out", required=True, metavar="SET.jsonl",
                        help="the set file to write (its folder is made if missing)")
    parser.add_argument("--media-root", metavar="DIR", default=None,
                        help="the folder the items' video paths are relative to (Video-MME: the folder of the "
                        "<videoID>.mp4 files; MVBench: the sub-task's video folder; LongVideoBench: its videos "
                        "folder); default: ITEMS's folder")
    parser.add_argument("--subtask", metavar="NAME", default=None,
                        help="MVBench's sub-task (e.g. action_antonym; default: ITEMS's file name without suffix)")
    parser.add_argument("--force", action="store_true", help="replace SET.jsonl when it exists")
    return parser


def summary_lines(result: ImportResult, out: Path) -> list[str]:
    """What the terminal says at the end."""
    from dots3_demo.workbench.importers import NAMES

    written = len(result.lines)
    lines = [f"eval-import: wrote {written} {NAMES[result.benchmark]} item(s) to {out} (scored by the option letter, "
             "clustered by video)"]
    if result.skipped:
        lines.append(f"eval-import: skipped {len(result.skipped)} item(s) that could not be converted (each said "
                     "on stderr)")
    if result.missing:
        lines.append(f"eval-import: {len(result.missing)} of {written} video(s) not found under {result.media_root}, "
                     f"e.g. {result.missing[0]} (written all the same: app.py eval reports each as its item's "
                     "error; --media-root names the videos' folder)")
        if result.missing_hint:
            lines.append(f"eval-import: {result.missing_hint}")
    else:
        lines.append(f"eval-import: every video was found under {result.media_root}")
    lines.append(f"eval-import: next: python app.py eval {out} --out DIR")
    return lines


def main_eval_import(argv: Sequence[str]) -> int:
    """``python app.py eval-import``; returns the exit status."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    from dots3_demo.workbench.importers import NAMES, ImportOptions, ItemsUnreadable, import_items

    if ns.subtask is not None and ns.benchmark != "mvbench":
        parser.error("--subtask is MVBench's (its items come one sub-task per file)")
    items = Path(ns.items)
    out = Path(ns.out)
    media_root = Path(ns.media_root) if ns.media_root is not None else None
    if not items.is_file():
        print(f"eval-import: {items} is not a file", file=sys.stderr)
        return 2
    if media_root is not None and not media_root.is_dir():
        print(f"eval-import: --media-root {media_root} is not a folder", file=sys.stderr)
        return 2
    if out.exists() and not ns.force:
        print(f"eval-import: {out} exists: nothing written (--force replaces it)", file=sys.stderr)
        return 2
    options = ImportOptions(ns.benchmark, items, out, media_root, ns.subtask)
    try:
        result = import_items(options)
    except ItemsUnreadable as exc:
        print(f"eval-import: {exc}", file=sys.stderr)
        return 2
    for skipped in result.skipped:
        print(f"eval-import: skipped {skipped.line()}", file=sys.stderr)
    if not result.lines:
        print(f"eval-import: no item of {items} could be converted as {NAMES[ns.benchmark]}: nothing written",
              file=sys.stderr)
        return 2
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        partial.write_text(result.text(), encoding="utf-8")
        os.replace(partial, out)
    except OSError as exc:
        print(f"eval-import: {exc.strerror or exc}: {exc.filename or out}", file=sys.stderr)
        return 2
    for line in summary_lines(result, out):
        print(line)
    return 0
