"""``python app.py eval-compare RUN_A RUN_B [--out DIR]``: two runs of one set paired item by item.

RUN_A and RUN_B are ``app.py eval`` output folders (their ``results.jsonl``); the comparison is
``workbench.paired``'s. It prints the comparison; with ``--out`` it also writes ``comparison.json`` and
``comparison.html`` there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

DESCRIPTION = (
    "Two runs of one set, paired: RUN_A and RUN_B are `app.py eval` --out folders. Items pair by id where both "
    "runs scored them; each is fixed (B scored higher), broken (B lower) or same. Prints each run's accuracy over "
    "the paired items, the difference B - A with its 95 percent interval (paired: the SE of the per-item "
    "differences, clustered by the set's cluster key when the items carry it), McNemar's exact test for pass/fail "
    "scores, and the media and prompt tokens per item in each run. With --out DIR it also writes "
    "DIR/comparison.json and DIR/comparison.html (one page, no script: every changed item with both runs' plans "
    "and answers side by side, and the frames each run gave the model, drawn again from the media files under "
    "each run's budget with --model's geometry). Exit status: 0 compared, 2 a folder without results.jsonl."
)


def build_parser() -> FlexibleArgumentParser:
    from dots3_demo.cli.parser import new_parser

    parser = new_parser(prog="app.py eval-compare", description=DESCRIPTION)
    parser.add_argument("run_a", metavar="RUN_A", help="the baseline run's --out folder")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared with it")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="folder for comparison.json and comparison.html (made if missing)")
    parser.add_argument("--model", metavar="DIR", default=None,
                        help="the checkpoint or profile folder the runs planned with, for drawing the frames again "
                        "(default: the bundled preview profile, as app.py eval)")
    return parser


def main_eval_compare(argv: Sequence[str]) -> int:
    """``python app.py eval-compare``; returns the exit status."""
    ns = build_parser().parse_args(list(argv))
    from dots3_demo.profiles import ProfileError, load_profile
    from dots3_demo.workbench.eval_results import RESULTS_NAME, ResultsFile
    from dots3_demo.workbench.paired import compare_runs, comparison_html, comparison_json

    runs = []
    for folder in (Path(ns.run_a), Path(ns.run_b)):
        path = folder / RESULTS_NAME
        if not path.is_file():
            print(f"eval-compare: {path} is not a file (give an `app.py eval` --out folder)", file=sys.stderr)
            return 2
        runs.append(ResultsFile(path).load()[0])
    try:
        profile = load_profile(ns.model)
    except ProfileError as exc:
        print(f"eval-compare: {exc}", file=sys.stderr)
        return 2
    paired = compare_runs(runs[0], runs[1])
    for line in paired.lines():
        print(line)
    if ns.out is not None:
        out = Path(ns.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "comparison.json").write_text(json.dumps(comparison_json(paired, ns.run_a, ns.run_b), indent=2,
                                                        ensure_ascii=False) + "\n", encoding="utf-8")
        (out / "comparison.html").write_text(comparison_html(paired, ns.run_a, ns.run_b, profile), encoding="utf-8")
        print(f"wrote {out / 'comparison.json'} and {out / 'comparison.html'}")
    return 0
