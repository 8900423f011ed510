"""Benchmark: how long the studio takes to start, against a bare ``import vllm``.

Run from the repository root (about 5 minutes on 2 cores with the default 5 repetitions)::

    python -m benchmarks.startup_bench               # 5 repetitions
    python -m benchmarks.startup_bench --reps 3 --json startup.json
    python -m benchmarks.startup_bench --app /tmp/old-checkout/app.py   # time another checkout
    python -m benchmarks.startup_bench --before /tmp/old-checkout/app.py  # and compare, in one run

What is timed (wall clock of the whole process, interpreter start included)
---------------------------------------------------------------------------
* **bare import**: ``python -c "import vllm"`` — the floor every vLLM program pays (torch,
  vLLM's environment overrides); the ratios below are against it.
* **--help**: ``python app.py --help`` — every vLLM engine flag and the studio's flags. It runs
  with the engine-flag cache of :mod:`dots3_demo.engine.flag_cache` filled, as every run after the
  first one on a machine does.
* **--help, first run**: the same with an empty cache (a fresh machine, or the first run after vLLM
  or another package changed): vLLM builds its parser, and the cache is written.
* **inspect one image**: ``python app.py inspect one.png --json`` on a small PNG generated here
  (64×48), with the bundled preview profile.
* ``--before OLD/app.py``: that checkout's ``--help`` and ``inspect``, in the same rounds.
* **vLLM's dots3_note processor** (for reference, no goal): ``python -c`` importing
  ``vllm/models/dots3_note/common/processor.py`` — the module whose image processor gives the
  numbers, with the bare-package registration of ``dots3_demo/vllm_compat.py`` — and nothing else:
  the floor for inspecting anything with vLLM's own code.

Each repetition runs every command once, in a rotated order (repetition *i* starts with command
*i*), so a burst of load from other work on the machine hits each command alike; the **median**
of the repetitions is reported, with the minimum and maximum, and two ratios: of the medians, and
the median of each round's own ratio (a command against the bare import of the same round, which
follows the machine's load more closely). The CPU time each process used (user + system, its
children included, from ``getrusage``) is reported too: start-up is CPU-bound, and CPU time
swings far less than wall time when other work shares the cores. The goal verdict uses the wall
clock ratio of the medians. One untimed warm-up run of each
command comes first (it fills the flag cache and the operating system's file cache). The cache
lives in a temporary ``$XDG_CACHE_HOME`` made for this run, so your own cache is not touched.

Goals (issue 10): ``--help`` ≤ 1.5 × the bare import, inspecting one image ≤ 2 ×. The script
exits 1 when a command fails or prints the wrong thing, not when a goal is missed: the machine's
load average is printed before and after, because on a shared machine the figures swing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
GOALS = {"help": 1.5, "inspect": 2.0}


_PROCESSOR_IMPORT = """
import importlib.util, sys, types
from pathlib import Path
spec = importlib.util.find_spec("vllm.models")
bare = types.ModuleType("vllm.models.dots3_note")
bare.__path__ = [str(Path(next(iter(spec.submodule_search_locations))) / "dots3_note")]
sys.modules["vllm.models.dots3_note"] = bare
import vllm.models.dots3_note.common.processor
print("ok")
"""


@dataclass
class Command:
    key: str
    label: str
    argv: list[str]
    expect: str  # a string the output must contain
    cwd: Path = REPO_ROOT
    cold_cache: bool = False  # give each run an empty flag cache
    times: list[float] = field(default_factory=list)  # wall clock, s
    cpu: list[float] = field(default_factory=list)  # user + system CPU of the process and its children, s


def _make_png(folder: Path) -> Path:
    from PIL import Image

    path = folder / "one.png"
    Image.new("RGB", (64, 48), (200, 100, 50)).save(path)
    return path


def _run(cmd: Command, env: dict[str, str], scratch: Path) -> tuple[float, float]:
    env = dict(env)
    if cmd.cold_cache:
        env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="cold-cache-", dir=scratch)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd.argv, cwd=cmd.cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0 or cmd.expect not in proc.stdout:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"{cmd.label}: exit {proc.returncode}, or {cmd.expect!r} missing from its output")
    return elapsed, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup_bench", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each command (default 5)")
    parser.add_argument("--app", type=Path, default=REPO_ROOT / "app.py", help="the app.py to time")
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout's app.py: its --help and inspect join the same run, alternating")
    parser.add_argument("--no-cold", action="store_true", help="skip the first-run --help measurement")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    app = args.app.resolve()

    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        scratch = Path(tmp)
        png = _make_png(scratch)
        env = dict(os.environ, XDG_CACHE_HOME=str(scratch / "cache"), GRADIO_ANALYTICS_ENABLED="False")
        env.pop("DOTS3_STUDIO_ARGS", None)
        py = sys.executable
        commands = [
            Command("bare", "bare `import vllm`", [py, "-c", "import vllm; print('ok')"], "ok"),
            Command("help", "`app.py --help`", [py, str(app), "--help"], "--max-model-len", app.parent),
            Command("inspect", "`app.py inspect one.png --json`", [py, str(app), "inspect", str(png), "--json"],
                    '"grid"', app.parent),
        ]
        commands.append(Command("processor", "vLLM's dots3_note processor module alone",
                                [py, "-c", _PROCESSOR_IMPORT], "ok"))
        if not args.no_cold:
            commands.append(Command("help_cold", "`app.py --help`, first run (empty cache)",
                                    [py, str(app), "--help"], "--max-model-len", app.parent, cold_cache=True))
        if args.before:
            old = args.before.resolve()
            commands += [
                Command("help_before", "before: `app.py --help`", [py, str(old), "--help"], "--max-model-len",
                        old.parent),
                Command("inspect_before", "before: `app.py inspect one.png --json`",
                        [py, str(old), "inspect", str(png), "--json"], '"grid"', old.parent),
            ]
        load_before = os.getloadavg()
        print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
        for cmd in commands:  # warm-up: fills the flag cache and the file cache; not timed
            _run(cmd, env, scratch)
        for rep in range(args.reps):
            order = commands[rep % len(commands):] + commands[:rep % len(commands)]
            for cmd in order:
                wall, cpu = _run(cmd, env, scratch)
                cmd.times.append(wall)
                cmd.cpu.append(cpu)
            print(f"repetition {rep + 1}/{args.reps}: "
                  + ", ".join(f"{c.key} {c.times[-1]:.2f} s ({c.cpu[-1]:.2f} CPU)" for c in commands), flush=True)
        load_after = os.getloadavg()

    medians = {c.key: statistics.median(c.times) for c in commands}
    bare = medians["bare"]
    bare_times = commands[0].times  # per repetition: each command against the bare import of its own round
    paired = {c.key: statistics.median(t / b for t, b in zip(c.times, bare_times, strict=True)) for c in commands}
    cpu = {c.key: statistics.median(c.cpu) for c in commands}
    print()
    print(f"{args.reps} repetitions, alternating; {os.cpu_count()} cores; load average after: "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print()
    print("| command | median s | min–max s | × bare import | × bare, median of rounds | CPU s | × bare, CPU | goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    rows = []
    for c in commands:
        ratio = medians[c.key] / bare
        goal = GOALS.get(c.key)
        verdict = "" if goal is None else f"≤ {goal}×: {'met' if ratio <= goal else 'missed'}"
        print(f"| {c.label} | {medians[c.key]:.2f} | {min(c.times):.2f}–{max(c.times):.2f} | {ratio:.2f} "
              f"| {paired[c.key]:.2f} | {cpu[c.key]:.2f} | {cpu[c.key] / cpu['bare']:.2f} | {verdict} |")
        rows.append({"key": c.key, "command": c.label, "times_s": c.times, "median_s": medians[c.key],
                     "ratio": ratio, "ratio_of_rounds": paired[c.key], "cpu_s": c.cpu, "median_cpu_s": cpu[c.key],
                     "cpu_ratio": cpu[c.key] / cpu["bare"], "goal": goal})
    if args.json:
        args.json.write_text(json.dumps({"reps": args.reps, "load_before": load_before, "load_after": load_after,
                                         "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
