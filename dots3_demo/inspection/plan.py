"""One file's plan: what ``python app.py inspect FILE --json`` prints for it, and the report it came from.

``cli.inspect`` prints these; batch evaluation (``workbench.batch``) stores them as each item's ``plan``.
Both call :func:`plan_file`, so an item's plan is byte for byte the inspect command's line for that file
and budget, errors included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dots3_demo.inspection import InspectionError, Report, VideoSettings, inspect_file, report_to_json
from dots3_demo.inspection.errors import one_line
from dots3_demo.profiles import Profile


@dataclass(frozen=True)
class FilePlan:
    """``item``: the inspect command's JSON object for the file (``{"file", "kind", <kind>: …, "profile"}``,
    or ``{"file", "error"}``); ``report``: the inspector's report it was made from (None for an error)."""

    item: dict[str, Any]
    report: Report | None = field(default=None, compare=False, repr=False)

    @property
    def error(self) -> str | None:
        error = self.item.get("error")
        return None if error is None else str(error)

    @property
    def kind(self) -> str | None:
        """``image`` / ``audio`` / ``video``; None for a file that could not be inspected."""
        kind = self.item.get("kind")
        return None if kind is None else str(kind)


def plan_file(path: str | Path, profile: Profile, settings: VideoSettings) -> FilePlan:
    """Inspect one file under ``settings`` (validated by the caller) as ``app.py inspect --json`` does.

    Never raises for a bad file: the plan then holds ``{"file", "error"}`` with a one-line reason.
    """
    try:
        report = inspect_file(path, profile, settings)
    except InspectionError as exc:
        return FilePlan({"file": str(path), "error": str(exc)})
    except Exception as exc:  # noqa: BLE001 - never a traceback for the user
        detail = one_line(exc) or type(exc).__name__
        return FilePlan({"file": str(path), "error": f"could not inspect this file ({detail})"})
    item = report_to_json(path, report)
    item["profile"] = profile.name
    if profile.approximate:
        item["approximate"] = list(profile.approximate)
    return FilePlan(item, report)
