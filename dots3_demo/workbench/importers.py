"""Benchmark items into a studio set (``python app.py eval-import``): Video-MME, MVBench and LongVideoBench.

An item file as a benchmark publishes it (a JSON list, JSON lines, or parquet when pyarrow is installed) becomes
the lines of a set (``workbench.evalset``): a header ``{"set": {"score": "choice", "cluster": "media"}}`` (every
item scored by the option letter; the intervals clustered by the video, as lmms-eval clusters them), then one
item per question with its ``id``, ``media`` (the video, relative to the set file's folder), ``prompt``,
``target`` (the letter), ``sampling`` (temperature 0: greedy, as the three tasks' ``generation_kwargs``; their
``max_new_tokens`` of 16 or 32 is not copied, it would cut a reasoning model's answer short: the eval's own
default applies), ``metadata`` (the benchmark's breakdown fields: the summary gives the accuracy per value of
each) and ``tags`` (the benchmark's name, so that the items of several benchmarks in one set keep apart; the
breakdown fields are not repeated as tags, the summary would break the accuracy down twice).

The prompt, the letter and the video are what lmms-eval's own task code makes of an item
(``EvolvingLMMs-Lab/lmms-eval``, ``lmms_eval/tasks/<benchmark>/utils.py`` and the task's YAML, default
``lmms_eval_specific_kwargs``), so a score here is comparable with lmms-eval's:

- **Video-MME** (``videomme/utils.py``: ``videomme_doc_to_text``, ``videomme_doc_to_visual``,
  ``videomme_process_results``; ``videomme.yaml``): fields ``videoID``, ``question_id``, ``duration``,
  ``domain``, ``sub_category``, ``task_type``, ``question``, ``options`` (strings lettered ``"A. …"``) and
  ``answer`` (the letter). The prompt is lmms-eval's option prompt (its words mention subtitles even where none
  are given), the question, the options one per line, then the post-prompt ``"\\nAnswer with the option's letter
  from the given choices directly."``. The video is ``videoID + ".mp4"`` in the videos folder (lmms-eval's
  ``.MP4`` and ``.mkv`` fall-backs too). Id: ``question_id``; metadata: ``duration``, ``domain``,
  ``sub_category``, ``task_type`` (lmms-eval's breakdowns; it clusters by ``videoID``).
- **MVBench** (``mvbench/utils.py``: ``mvbench_doc_to_text``, ``mvbench_doc_to_visual``,
  ``mvbench_process_results``; ``mvbench_<sub_task>.yaml``): fields ``video``, ``question``, ``candidates``
  and ``answer`` (the right candidate's *text*: its letter is its index among the candidates, the first that
  equals it). The prompt is ``"Question:" + question + "\\nOption:\\n"``, a line ``"(A) …"`` per candidate, then
  ``"Only give the best option.\\n"``. The video is ``video`` inside the sub-task's video folder (lmms-eval's
  ``DATA_LIST`` names it: :data:`MVBENCH_VIDEO_FOLDERS`). Each sub-task is a file of its own
  (``json/<sub_task>.json`` on Hugging Face): the sub-task is ``--subtask`` or the file's name, and is the
  metadata ``sub_task``. Id: the item's ``id`` when it has one, else ``<sub_task>-<index>`` (the index from 0
  in the file, lmms-eval's ``doc_id``). Segment bounds (``start``, ``end``) are not read: lmms-eval plays the
  whole file.
- **LongVideoBench** (``longvideobench/utils.py``: ``longvideobench_doc_to_text``,
  ``longvideobench_doc_to_visual_v``, ``longvideobench_process_results``; ``longvideobench_val_v.yaml``):
  fields ``id``, ``video_path``, ``duration_group``, ``question_category``, ``question``, ``option0`` …
  ``option4`` (``"N/A"``: unused and left out; the official ``lvb_val.json`` gives a ``candidates`` list
  instead, read the same way) and ``correct_choice`` (the option's index: its letter is ``"A"`` + it). The
  prompt is the question, a line ``"A. …"`` per option, then ``"Answer with the option's letter from the given
  choices directly.\\n"``. The video is ``video_path`` inside its videos folder. Id: ``id``; metadata:
  ``duration_group``, ``question_category`` (lmms-eval's breakdowns).

Media paths are written relative to the set file's folder (the set resolves them from there), from the media
root (the folder the benchmark's video paths are relative to). A video not found there is still imported (the
eval reports it as that item's error) and counted in :attr:`ImportResult.missing`. An item that cannot be
converted (a missing field, an answer not among the options, more options than the letters A–E the choice
scorer reads, an id seen before) is :class:`Skipped` with the reason, and the rest still imports. The whole
file unreadable is :class:`ItemsUnreadable`.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dots3_demo.inspection.errors import one_line
from dots3_demo.workbench.evalset import MEDIA_CLUSTER
from dots3_demo.workbench.scoring import LETTERS

BENCHMARKS = ("videomme", "mvbench", "longvideobench")
NAMES = {"videomme": "Video-MME", "mvbench": "MVBench", "longvideobench": "LongVideoBench"}
SCORE = "choice"
GREEDY = 0.0  # the three tasks' generation_kwargs: temperature 0, do_sample false

# lmms_eval/tasks/videomme/utils.py, videomme_doc_to_text, and videomme.yaml's default post_prompt
VIDEOMME_OPTION_PROMPT = (
    "Select the best answer to the following multiple-choice question based on the video and the subtitles. "
    "Respond with only the letter (A, B, C, or D) of the correct option."
)
VIDEOMME_POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
VIDEOMME_VIDEO_SUFFIXES = (".mp4", ".MP4", ".mkv")  # videomme_doc_to_visual's order
# lmms_eval/tasks/mvbench/mvbench_<sub_task>.yaml's post_prompt (the same for all 20)
MVBENCH_POST_PROMPT = "Only give the best option.\n"
# lmms_eval/tasks/longvideobench/longvideobench_val_v.yaml's default post_prompt
LONGVIDEOBENCH_POST_PROMPT = "Answer with the option's letter from the given choices directly.\n"
LONGVIDEOBENCH_UNUSED = "N/A"
# lmms_eval/tasks/mvbench/utils.py's DATA_LIST: each sub-task's video folder under MVBench's video root
MVBENCH_VIDEO_FOLDERS = {
    "object_interaction": "star/Charades_segment",
    "action_sequence": "star/Charades_segment",
    "action_prediction": "star/Charades_segment",
    "action_localization": "sta/sta_video_segment",
    "moving_count": "clevrer/video_validation",
    "fine_grained_pose": "nturgbd_convert",
    "character_order": "perception/videos",
    "object_shuffle": "perception/videos",
    "egocentric_navigation": "vlnqa",
    "moving_direction": "clevrer/video_validation",
    "episodic_reasoning": "tvqa/video_fps3_hq_segment",
    "fine_grained_action": "Moments_in_Time_Raw/videos",
    "scene_transition": "scene_qa/video",
    "state_change": "perception/videos",
    "moving_attribute": "clevrer/video_validation",
    "action_antonym": "ssv2_video_mp4",
    "unexpected_action": "FunQA_test/test",
    "counterfactual_inference": "clevrer/video_validation",
    "object_existence": "clevrer/video_validation",
    "action_count": "perception/videos",
}

MetadataValue = str | int | float | bool


class ItemsUnreadable(ValueError):
    """The item file as a whole cannot be read (its message is one line)."""


class _ItemProblem(ValueError):
    """Why one item cannot be converted (its message is the skip's reason)."""


@dataclass(frozen=True)
class ImportOptions:
    """What to import: the benchmark (one of :data:`BENCHMARKS`), its item file, the set file the lines are for
    (media paths are relative to its folder), the folder the benchmark's video paths are relative to (None: the
    item file's) and MVBench's sub-task (None: the item file's name)."""

    benchmark: str
    items_path: Path
    set_path: Path
    media_root: Path | None = None
    subtask: str | None = None

    @property
    def root(self) -> Path:
        return self.media_root if self.media_root is not None else self.items_path.parent


@dataclass(frozen=True)
class Record:
    """One entry of the item file: where it is (``item 3``, ``line 3``), its position from 0 and its value
    (``problem`` set when the entry is not even JSON)."""

    where: str
    index: int
    data: Any
    problem: str | None = None


@dataclass(frozen=True)
class SetLine:
    """One item of the set, as written (``media`` relative to the set file's folder)."""

    id: str
    media: tuple[str, ...]
    prompt: str
    target: str
    metadata: tuple[tuple[str, MetadataValue], ...]
    tags: tuple[str, ...]
    temperature: float = GREEDY

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "media": list(self.media), "prompt": self.prompt, "target": self.target,
                "sampling": {"temperature": self.temperature}, "metadata": dict(self.metadata),
                "tags": list(self.tags)}


@dataclass(frozen=True)
class Skipped:
    """An item left out: where it was in the item file (with its id when it has one) and why."""

    where: str
    reason: str

    def line(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class ImportResult:
    """The set's lines, the items left out, and the videos not found (as looked for under the media root)."""

    benchmark: str
    lines: tuple[SetLine, ...]
    skipped: tuple[Skipped, ...]
    missing: tuple[str, ...]
    media_root: str
    subtask: str | None = None  # MVBench's sub-task

    @staticmethod
    def header() -> dict[str, Any]:
        """The set's first line: every item scored by its letter, the intervals clustered by the video."""
        return {"set": {"score": SCORE, "cluster": MEDIA_CLUSTER}}

    def text(self) -> str:
        """The set file: the header, then one item per line."""
        return "".join(json.dumps(line, ensure_ascii=False) + "\n"
                       for line in (self.header(), *(item.to_json() for item in self.lines)))

    @property
    def missing_hint(self) -> str | None:
        """Where lmms-eval keeps an MVBench sub-task's videos, when its videos were not found here."""
        folder = MVBENCH_VIDEO_FOLDERS.get(self.subtask or "")
        if self.benchmark != "mvbench" or not self.missing or folder is None:
            return None
        return (f"lmms-eval keeps {self.subtask}'s videos in MVBench's video folder under {folder}/: give --media-root "
                "that folder")


@dataclass(frozen=True)
class _Converted:
    """An item in the studio's terms, before its video is looked for: ``videos`` are the names to try under the
    media root, the first found is used (none found: the first)."""

    id: str
    videos: tuple[str, ...]
    prompt: str
    target: str
    metadata: tuple[tuple[str, MetadataValue], ...]


# ---------------------------------------------------------------- reading the item file
def read_records(path: Path) -> tuple[Record, ...]:
    """The entries of an item file: parquet (by its ``.parquet`` suffix; needs pyarrow), a JSON list, or JSON
    lines (an entry per non-blank line; a line that is not JSON is that entry's problem). Raises
    :class:`ItemsUnreadable`."""
    if path.suffix.lower() == ".parquet":
        return _parquet(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ItemsUnreadable(f"{path} is not UTF-8 text (give a JSON list, JSON lines or a .parquet file)") from None
    except OSError as exc:
        raise ItemsUnreadable(f"{path}: {exc.strerror or exc}") from None
    try:
        whole = json.loads(text)
    except ValueError as exc:
        if text.lstrip().startswith("["):
            raise ItemsUnreadable(f"{path} starts like a JSON list but is not JSON: {one_line(exc)}") from None
    else:  # a JSON list, or one item alone
        entries = whole if isinstance(whole, list) else [whole]
        return tuple(Record(f"item {number}", number - 1, data) for number, data in enumerate(entries, start=1))
    records: list[Record] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(Record(f"line {number}", len(records), json.loads(line)))
        except ValueError as exc:
            records.append(Record(f"line {number}", len(records), None, f"not JSON: {one_line(exc)}"))
    return tuple(records)


def _parquet(path: Path) -> tuple[Record, ...]:
    try:
        import pyarrow  # type: ignore[import-untyped]
        import pyarrow.parquet  # type: ignore[import-untyped]
    except ImportError:
        raise ItemsUnreadable(f"{path}: reading parquet needs pyarrow, which is not installed (pip install pyarrow); "
                              "or give the items as JSON or JSON lines") from None
    try:
        rows = pyarrow.parquet.read_table(path).to_pylist()
    except (OSError, ValueError, pyarrow.ArrowException) as exc:
        raise ItemsUnreadable(f"{path} is not a parquet file pyarrow reads: {one_line(exc)}") from None
    return tuple(Record(f"item {number}", number - 1, row) for number, row in enumerate(rows, start=1))


# ---------------------------------------------------------------- one item per benchmark
def _videomme(data: dict[str, Any], index: int, subtask: str) -> _Converted:
    item_id = _id(data, "question_id")
    video = _text(data, "videoID")
    question = _text(data, "question")
    options = _strings(data, "options")
    letters = _letters(len(options), "options")
    for position, (letter, option) in enumerate(zip(letters, options, strict=True)):
        if not re.match(rf"{letter}\.(\s|$)", option):
            raise _ItemProblem(f"options[{position}] is not lettered {letter + '. …'!r} (Video-MME's options are "
                               f"'A. …' strings), got {_shown(option)}")
    answer = _text(data, "answer").strip().upper()
    if answer not in letters:
        raise _ItemProblem(f"answer {data['answer']!r} is not among the options {letters[0]}–{letters[-1]}")
    prompt = f"{VIDEOMME_OPTION_PROMPT}\n{question}\n" + "\n".join(options) + "\n" + VIDEOMME_POST_PROMPT
    metadata = tuple((key, _breakdown(data, key)) for key in ("duration", "domain", "sub_category", "task_type"))
    return _Converted(item_id, tuple(video + suffix for suffix in VIDEOMME_VIDEO_SUFFIXES), prompt, answer, metadata)


def _mvbench(data: dict[str, Any], index: int, subtask: str) -> _Converted:
    item_id = _id(data, "id") if "id" in data else f"{subtask}-{index}"
    video = _text(data, "video")
    question = _text(data, "question")
    candidates = _strings(data, "candidates")
    letters = _letters(len(candidates), "candidates")
    answer = _text(data, "answer")
    if answer not in candidates:
        raise _ItemProblem(f"answer {_shown(answer)} is not one of the candidates")
    target = letters[candidates.index(answer)]  # the first candidate equal to it, as mvbench_process_results
    options = "".join(f"({letter}) {candidate}\n" for letter, candidate in zip(letters, candidates, strict=True))
    prompt = "Question:" + question + "\nOption:\n" + options + MVBENCH_POST_PROMPT
    return _Converted(item_id, (video,), prompt, target, (("sub_task", subtask),))


def _longvideobench(data: dict[str, Any], index: int, subtask: str) -> _Converted:
    item_id = _id(data, "id")
    video = _text(data, "video_path")
    question = _text(data, "question")
    options = _lvb_options(data)
    letters = _letters(len(options), "options")
    choice = data.get("correct_choice")
    if choice is None:
        raise _ItemProblem("missing field 'correct_choice' (LongVideoBench's test split has no answers)")
    if isinstance(choice, bool) or not isinstance(choice, int):
        raise _ItemProblem(f"correct_choice must be an option's index, got {_shown(choice)}")
    if not 0 <= choice < len(options):
        raise _ItemProblem(f"correct_choice {choice} is not among the options {letters[0]}–{letters[-1]} "
                           f"(0–{len(options) - 1})")
    lines = "\n".join(f"{letter}. {option}" for letter, option in zip(letters, options, strict=True))
    prompt = f"{question}\n{lines}\n{LONGVIDEOBENCH_POST_PROMPT}"
    metadata = tuple((key, _breakdown(data, key)) for key in ("duration_group", "question_category"))
    return _Converted(item_id, (video,), prompt, letters[choice], metadata)


def _lvb_options(data: dict[str, Any]) -> list[str]:
    """option0 … option4 without the unused ("N/A") ones, or the ``candidates`` list of ``lvb_val.json``."""
    keys = [f"option{i}" for i in range(5)]
    if not any(key in data for key in keys) and "candidates" in data:
        return _strings(data, "candidates")
    options: list[str] = []
    unused = None
    for key in keys:
        value = data.get(key)
        if value is None or value == LONGVIDEOBENCH_UNUSED:
            unused = unused or key
            continue
        if not isinstance(value, str):
            raise _ItemProblem(f"{key} must be a string, got {_shown(value)}")
        if unused is not None:  # lmms-eval's prompt would skip it, its letters stop there: they would disagree
            raise _ItemProblem(f"{key} follows the unused {unused}: the options' letters would shift")
        options.append(value)
    if not options:
        raise _ItemProblem("missing field 'option0' (no options)")
    return options


CONVERTERS: dict[str, Callable[[dict[str, Any], int, str], _Converted]] = {
    "videomme": _videomme, "mvbench": _mvbench, "longvideobench": _longvideobench,
}


# ---------------------------------------------------------------- the whole file
def import_items(options: ImportOptions) -> ImportResult:
    """The set made from ``options.items_path`` (raises :class:`ItemsUnreadable`)."""
    return convert(options, read_records(options.items_path))


def convert(options: ImportOptions, records: Sequence[Record]) -> ImportResult:
    """``records`` of ``options.benchmark`` as the set's lines, the items left out, the videos not found."""
    if options.benchmark not in CONVERTERS:
        raise ValueError(f"unknown benchmark {options.benchmark!r} (known: {', '.join(BENCHMARKS)})")
    converter = CONVERTERS[options.benchmark]
    subtask = options.subtask or options.items_path.stem
    root = os.path.abspath(options.root)
    set_folder = os.path.abspath(os.path.dirname(options.set_path) or ".")
    lines: list[SetLine] = []
    skipped: list[Skipped] = []
    missing: list[str] = []
    seen: dict[str, str] = {}
    for record in records:
        if record.problem is not None:
            skipped.append(Skipped(record.where, record.problem))
            continue
        if not isinstance(record.data, dict):
            skipped.append(Skipped(record.where, f"not a JSON object: {_shown(record.data)}"))
            continue
        try:
            item = converter(record.data, record.index, subtask)
        except _ItemProblem as exc:
            skipped.append(Skipped(_where(record), str(exc)))
            continue
        if item.id in seen:
            skipped.append(Skipped(_where(record), f"id {item.id!r} again (first at {seen[item.id]})"))
            continue
        seen[item.id] = record.where
        paths = [os.path.normpath(os.path.join(root, video)) for video in item.videos]
        found = next((path for path in paths if os.path.isfile(path)), None)
        if found is None:
            missing.append(paths[0])
        lines.append(SetLine(item.id, (_relative(found or paths[0], set_folder),), item.prompt, item.target,
                             item.metadata, (options.benchmark,)))
    return ImportResult(options.benchmark, tuple(lines), tuple(skipped), tuple(missing), root,
                        subtask if options.benchmark == "mvbench" else None)


def _relative(path: str, folder: str) -> str:
    """``path`` relative to the set's folder, with forward slashes (absolute where no relative path exists)."""
    try:
        return Path(os.path.relpath(path, folder)).as_posix()
    except ValueError:  # another drive (Windows)
        return Path(path).as_posix()


def _where(record: Record) -> str:
    data = record.data
    for key in ("question_id", "id"):
        value = data.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return f"{record.where} ({key} {value})"
    return record.where


# ---------------------------------------------------------------- fields
def _field(data: dict[str, Any], key: str) -> Any:
    if key not in data or data[key] is None:
        raise _ItemProblem(f"missing field {key!r}")
    return data[key]


def _text(data: dict[str, Any], key: str) -> str:
    value = _field(data, key)
    if not isinstance(value, str) or not value.strip():
        raise _ItemProblem(f"{key} must be a non-empty string, got {_shown(value)}")
    return value


def _id(data: dict[str, Any], key: str) -> str:
    value = _field(data, key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _text(data, key)


def _strings(data: dict[str, Any], key: str) -> list[str]:
    value = _field(data, key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _ItemProblem(f"{key} must be a list of strings, got {_shown(value)}")
    return value


def _breakdown(data: dict[str, Any], key: str) -> MetadataValue:
    value = _field(data, key)
    if (not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and not value)
            or (isinstance(value, float) and not math.isfinite(value))):
        raise _ItemProblem(f"{key} must be a string or a number, got {_shown(value)}")
    return value


def _letters(count: int, key: str) -> str:
    if count < 2:
        raise _ItemProblem(f"{key}: {count} option(s); a choice needs 2 or more")
    if count > len(LETTERS):
        raise _ItemProblem(f"{key}: {count} options; the choice scorer reads the letters {LETTERS[0]}–{LETTERS[-1]}")
    return LETTERS[:count]


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"
