"""Benchmark: inspections side by side through the real app, and what a visitor waits for the frames.

Run from the repository root (~4 min on 2 cores; ``--quick`` ~1 min)::

    python -m benchmarks.inspect_concurrency                  # 30 s 720p clips, 1/2/4/8 sessions, Chromium
    python -m benchmarks.inspect_concurrency --quick          # 10 s clips, 1/2/4 sessions
    python -m benchmarks.inspect_concurrency --workers 1      # the app with --inspect-workers 1
    python -m benchmarks.inspect_concurrency --before DIR     # also another checkout's app (DIR/app.py)
    python -m benchmarks.inspect_concurrency --browser-only   # only time to frames in Chromium (~2 min)

Sessions at once
----------------
The app runs as its own process (``python app.py --port … [--inspect-workers N]``, preview mode).
Each session speaks Gradio's own protocol as the page does (``gradio_api/upload``, ``queue/join``
with a session hash of its own, the ``queue/data`` event stream), all of them on one asyncio loop of
this process (``gradio_client`` spends ~0.4 of 2 cores on its threads at 4 sessions, which the app then
lacks). At one moment 1, 2, 4 and 8 sessions each upload a *different* video to the
``/inspect_video`` event, the one the page's video panel calls (the 1-session row once per video at
least: it is the reference). A session's time runs from the start of its upload to the event's
result: the status line and the frames gallery, encoded and in Gradio's cache. Throughput = videos /
(last result − first upload's start); it is set against the host's usable cores
(``dots3_demo.inspection.session.usable_cores``) and against one inspection alone, measured in the same
run (the 1-session row); p95 is over every upload of the row.
"Four in a row" is one session uploading four of the videos one after another; the ratio
"four at once / four in a row" compares the 4-session row's wall time with it (the goal: ≤ 0.6 on
2 cores). The app's CPU time over each row (``/proc/PID/stat``) says how many cores it kept busy.

Videos are made with FFmpeg (``ffmpeg -f lavfi``): 1280×720, 25 fps, H.264 (ultrafast) with an AAC
tone, each a different test pattern, hue and tone; cached in ``--cache-dir``.

Time to frames in a browser
---------------------------
Debian's Chromium (playwright, as ``tests/browser`` launches it) opens the page, and the clock starts
when the video panel's file input fires ``change`` (the file is in the page, as after a visitor's
drop; the page's own clock stamps each milestone): *upload* ends when the panel shows the
uploaded video, *first frame* when the gallery shows a first picture (the frames come as vLLM makes them),
*frames* when the gallery holds every frame vLLM sampled with each picture decoded,
*figures* when the Interleave tab's time line has been redrawn; *inspector* is the app's own time for the
inspection, as its status line says. The app keeps Gradio's own trace of each event (``GRADIO_PROFILING``):
the video event's wait in Gradio's queue, its preprocessing, the inspection (the generator's steps: the
frames, then the rest) and Gradio's postprocessing of its steps are printed too. In the same run, alternating with the
browser, this process calls vLLM's own ``preprocess_dots3_note_video`` on the same file's bytes with
the arguments the inspector passes (``benchmarks.inspect_bench.vllm_kwargs``). Each round uses a new
file (and a new browser context), medians over ``--browser-rounds``; ratio = frames in the browser / vLLM,
of the medians and, since one slow round on a loaded box moves either median alone, the median of each
round's own ratio. The goal: ≤ 1.3.

On a small box Chromium competes with the app for the same cores (it decodes the uploaded video for
its player, renders the page); ``--pin`` runs the app on one core (an inspection uses one) and
Chromium, with vLLM's baseline, on the others, as when the visitor's browser is another machine.

The machine's load average is printed before and after: other work on a shared box slows every row.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import gradio_queue
from dots3_demo.inspection.session import usable_cores

ROOT = Path(__file__).resolve().parents[1]
SEQ = 32768
CONTROLS = (SEQ, True, 0, 0, 1.0, "eval_ek")  # the Budget tab's defaults: seq, auto reserve, …, k_mode
PATTERNS = ("testsrc2", "smptehdbars", "rgbtestsrc", "testsrc", "pal100bars", "yuvtestsrc", "smptebars")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


# ---------------------------------------------------------------- videos
def make_video(path: Path, index: int, seconds: float) -> Path:
    """A 720p clip with sound, different for each ``index`` (pattern, hue, tone), made by FFmpeg's
    test sources (a pattern comes back after seven, with another hue and tone)."""
    if path.exists() and path.stat().st_size > 0:
        return path
    pattern = PATTERNS[index % len(PATTERNS)]
    hue = (index * 47) % 360
    tone = 220 + 55 * index
    tmp = path.with_suffix(".part.mp4")
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y",
         "-f", "lavfi", "-i", f"{pattern}=size=1280x720:rate=25:duration={seconds},hue=h={hue}",
         "-f", "lavfi", "-i", f"sine=frequency={tone}:duration={seconds}:sample_rate=44100",
         "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(tmp)],
        check=True)
    tmp.rename(path)
    return path


# ---------------------------------------------------------------- the app
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class App:
    """``app.py`` of a checkout, serving preview mode on a loopback port."""

    def __init__(self, checkout: Path, workers: int | None, log: Path, cores: set[int] | None = None,
                 profiling: bool = False):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "app.py", "--host", "127.0.0.1", "--port", str(self.port)]
        if workers:
            command += ["--inspect-workers", str(workers)]
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
        if profiling:  # Gradio's own timings of each event (gradio_queue.profiling_traces)
            env.update(gradio_queue.PROFILING_ENV)
        env.pop("DOTS3_STUDIO_ARGS", None)
        self.log = log.open("w")
        self.process = subprocess.Popen(command, cwd=checkout, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)

    def wait(self, seconds: float = 300) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the app exited ({self.process.returncode}); see {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the app did not answer in {seconds:.0f} s; see {self.log.name}")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# ---------------------------------------------------------------- sessions at once
class Endpoint:
    """``/inspect_video`` as the page calls it, through Gradio's own protocol (``gradio_api/upload``,
    ``queue/join``, the ``queue/data`` event stream) on one asyncio loop for every session: a
    ``gradio_client.Client`` per session cost ~0.4 of this box's 2 cores at 4 sessions (its threads
    and polling), taken from the app it measures."""

    def __init__(self, url: str):
        import json
        import urllib.request

        self.url = url
        with urllib.request.urlopen(f"{url}/config", timeout=30) as response:
            config = json.load(response)
        components = {c["id"]: c for c in config["components"]}
        dependency = next(d for d in config["dependencies"] if d.get("api_name") == "inspect_video")
        self.fn_index = dependency["id"]
        self.inputs = [components[i] for i in dependency["inputs"]]
        outputs = [components[i]["type"] for i in dependency["outputs"]]
        self.status_at, self.gallery_at = outputs.index("markdown"), outputs.index("gallery")

    def payload(self, uploaded: str, video: Path) -> list[Any]:
        """Every input as the page sends it: the video, the Budget tab's defaults, ``null`` for a state."""
        controls = iter(CONTROLS)
        data: list[Any] = []
        for component in self.inputs:
            kind = component["type"]
            if kind == "state":
                data.append(None)
            elif kind == "video":
                data.append({"path": uploaded, "orig_name": video.name, "size": video.stat().st_size,
                             "mime_type": "video/mp4", "meta": {"_type": "gradio.FileData"}})
            else:
                data.append(next(controls))
        return data

    async def upload(self, http: Any, video: Path) -> float:
        """Seconds from the upload's start to the endpoint's result; raises unless the frames came."""
        session = gradio_queue.new_session()  # a session of its own, as a new tab
        started = time.perf_counter()
        with video.open("rb") as handle:
            sent = await http.post(f"{self.url}/gradio_api/upload", files={"files": (video.name, handle, "video/mp4")})
        sent.raise_for_status()
        await gradio_queue.join(http, self.url, self.fn_index, self.payload(sent.json()[0], video), session)
        replies = gradio_queue.messages(http, self.url, session, clock=time.perf_counter)
        async with contextlib.aclosing(replies) as stream:
            async for now, message in stream:
                if message.get("msg") != "process_completed":
                    continue
                output = message.get("output") or {}
                data = output.get("data") or []
                status = data[self.status_at] if data else output
                if not message.get("success") or f"✓ **{video.name}**" not in str(status) or not data[self.gallery_at]:
                    raise RuntimeError(f"{video.name}: no frames ({str(status)[:160]!r})")
                return now - started
        raise RuntimeError(f"{video.name}: the event stream ended without a result")


def _sessions(app: App, videos: list[Path], *, at_once: bool) -> tuple[list[float], float]:
    """Upload ``videos`` all at the same moment (each a session of its own) or one after another;
    each upload's seconds and the wall time."""
    import asyncio

    import httpx

    endpoint = Endpoint(app.url)

    async def run() -> tuple[list[float], float]:
        async with httpx.AsyncClient(timeout=600) as http:
            await http.get(f"{app.url}/config")  # the connection pool is warm before the clock
            start = time.perf_counter()
            if at_once:
                times = await asyncio.gather(*(endpoint.upload(http, video) for video in videos))
            else:
                times = [await endpoint.upload(http, video) for video in videos]
            return list(times), time.perf_counter() - start

    return asyncio.run(run())


def at_once(app: App, videos: list[Path]) -> dict[str, Any]:
    """``len(videos)`` sessions upload one video each at the same moment."""
    cpu0 = app.cpu_seconds()
    times, wall = _sessions(app, videos, at_once=True)
    return {"sessions": len(videos), "times": times, "wall": wall, "cpu": app.cpu_seconds() - cpu0}


def in_a_row(app: App, videos: list[Path]) -> float:
    return _sessions(app, videos, at_once=False)[1]


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def concurrency_table(app: App, videos: list[Path], sessions: list[int], rounds: int) -> tuple[list[dict], float]:
    rows = []
    for n in sessions:
        if n == 1:  # the reference: every video once at least (they differ in how hard they are to decode)
            runs = [at_once(app, [videos[i % len(videos)]]) for i in range(max(rounds, len(videos)))]
        else:
            runs = [at_once(app, videos[:n]) for _ in range(rounds)]
        best = min(runs, key=lambda r: r["wall"])  # the least disturbed round (a shared box)
        rows.append({"sessions": n, "wall": statistics.median(r["wall"] for r in runs),
                     "times": [t for r in runs for t in r["times"]], "cpu": best["cpu"] / best["wall"]})
    four = statistics.median(in_a_row(app, videos[:4]) for _ in range(rounds)) if 4 in sessions else math.nan
    return rows, four


def print_concurrency(label: str, rows: list[dict], four_in_a_row: float, cores: int) -> None:
    alone = statistics.median(rows[0]["times"])
    base = rows[0]["sessions"] / rows[0]["wall"]
    print(f"\n{label}: {cores} usable cores; one inspection alone (upload → frames): {alone:.2f} s")
    print("| sessions at once | wall s | videos/s | × one session | per core | p50 upload→frames s | "
          "p95 upload→frames s | p95 × alone | app CPU (cores busy) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        rate = row["sessions"] / row["wall"]
        print(f"| {row['sessions']} | {row['wall']:.2f} | {rate:.3f} | {rate / base:.2f} | {rate / cores:.3f} | "
              f"{statistics.median(row['times']):.2f} | {p95(row['times']):.2f} | {p95(row['times']) / alone:.2f} | "
              f"{row['cpu']:.2f} |")
    four = next((r for r in rows if r["sessions"] == 4), None)
    if four is not None and not math.isnan(four_in_a_row):
        print(f"four at once {four['wall']:.2f} s / four in a row {four_in_a_row:.2f} s = "
              f"**{four['wall'] / four_in_a_row:.2f}** (goal ≤ 0.6 on 2 cores)")


# ---------------------------------------------------------------- time to frames, in Chromium
def vllm_seconds(video: Path) -> float:
    """vLLM's own preprocessing of ``video``'s bytes, with the arguments the inspector passes."""
    from benchmarks.inspect_bench import vllm_kwargs
    from dots3_demo import vllm_compat
    from dots3_demo.inspection.video import VideoSettings
    from dots3_demo.profiles import load_profile

    profile = load_profile()
    data = video.read_bytes()
    function = vllm_compat.video_module().preprocess_dots3_note_video
    kwargs = vllm_kwargs(profile, VideoSettings(seq=SEQ))
    started = time.perf_counter()
    function(data, **kwargs)
    return time.perf_counter() - started


def frames_expected(video: Path) -> int:
    from dots3_demo.inspection import VideoSettings, inspect_file
    from dots3_demo.profiles import load_profile

    return len(inspect_file(video, load_profile(), VideoSettings(seq=SEQ), expected="video").frames)


def browser_round(browser: Any, url: str, video: Path, frames: int) -> dict[str, float]:
    """One drop of ``video`` on a fresh page; seconds from the file input's ``change`` event (the file
    is in the page: what a visitor's drop does) to each milestone, stamped by the page's own clock at
    the animation frame it was first seen (not counting playwright handing the file to the page)."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(url)
    page.wait_for_selector("#video-input input[type=file]", state="attached")
    page.get_by_role("tab", name="Interleave").click()  # the figures' tab, to see them drawn
    timeline = page.locator("#timeline-plot img")
    before = timeline.get_attribute("src") if timeline.count() else None
    page.get_by_role("tab", name="Frames").click()
    page.evaluate("""() => { window.__marks = {};
        document.querySelector('#video-input input[type=file]').addEventListener(
            'change', () => { window.__marks.drop = performance.now(); }, {capture: true, once: true}); }""")
    page.set_input_files("#video-input input[type=file]", str(video))

    def mark(name: str, condition: str, arg: Any = None) -> None:
        page.wait_for_function(
            f"""arg => {{ const ok = ({condition})(arg);
                         if (ok && !window.__marks['{name}']) window.__marks['{name}'] = performance.now();
                         return ok; }}""", arg=arg, polling="raf")

    mark("upload", "() => document.querySelector('#video-input video[src*=\"/gradio_api/file=\"]') !== null")
    mark("first", """() => [...document.querySelectorAll('#frames-gallery .thumbnail-item img')]
                             .some(i => i.complete && i.naturalWidth > 0)""")
    mark("listed", "n => document.querySelectorAll('#frames-gallery .thumbnail-item img').length === n", frames)
    mark("frames", """n => { const imgs = [...document.querySelectorAll('#frames-gallery .thumbnail-item img')];
                             return imgs.length === n && imgs.every(i => i.complete && i.naturalWidth > 0); }""",
         frames)
    page.get_by_role("tab", name="Interleave").click()
    mark("figures", """old => { const i = document.querySelector('#timeline-plot img');
                                return i && i.getAttribute('src') !== old && i.complete && i.naturalWidth > 0; }""",
         before)
    # the pictures' fetches (Resource Timing; none when the gallery gets them inline)
    marks = page.evaluate("""() => { const pictures = performance.getEntriesByType('resource')
        .filter(e => /picture_\\d+\\./.test(e.name) && e.startTime >= window.__marks.drop);
      const none = pictures.length === 0;
      return {...window.__marks, fetch_start: none ? NaN : Math.min(...pictures.map(e => e.startTime)),
              fetch_end: none ? NaN : Math.max(...pictures.map(e => e.responseEnd))}; }""")
    status = page.locator("#status").inner_text()
    context.close()
    match = re.search(rf"{re.escape(video.name)}.*?\((\d+\.\d) s\)", status)
    seconds = {key: (marks[key] - marks["drop"]) / 1000  # NaN stays NaN (playwright hands it over as such)
               for key in ("upload", "first", "listed", "fetch_start", "fetch_end", "frames", "figures")}
    traces = gradio_queue.profiling_traces(url, "inspect_video")  # the newest: this drop's
    newest = traces[-1] if traces else dict.fromkeys((*gradio_queue.PHASES, "steps"), math.nan)
    phases = {f"gradio_{key}": value for key, value in newest.items()}
    return {**seconds, "inspector": float(match.group(1)) if match else math.nan, **phases}


def time_to_frames(url: str, videos: list[Path], rounds: int) -> dict[str, Any] | None:
    if not Path(CHROMIUM).exists():
        print("\ntime to frames: skipped (Debian chromium is not installed)")
        return None
    from playwright.sync_api import sync_playwright

    counts = {v: frames_expected(v) for v in videos[:rounds]}
    vllm_seconds(videos[0])  # warm: imports, tokenizer, FFmpeg's libraries
    browser_rows, vllm_rows = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        browser_round(browser, url, videos[-1], frames_expected(videos[-1]))  # warm the page and the app
        for i in range(rounds):
            video = videos[i]
            if i % 2:  # alternate which goes first
                browser_rows.append(browser_round(browser, url, video, counts[video]))
                vllm_rows.append(vllm_seconds(video))
            else:
                vllm_rows.append(vllm_seconds(video))
                browser_rows.append(browser_round(browser, url, video, counts[video]))
        browser.close()
    return {"vllm": vllm_rows, "browser": browser_rows, "frames": [counts[v] for v in videos[:rounds]]}


def print_time_to_frames(label: str, result: dict[str, Any]) -> None:
    vllm = statistics.median(result["vllm"])
    keys = ("upload", "inspector", "first", "listed", "fetch_start", "fetch_end", "frames", "figures")
    med = {key: statistics.median(r[key] for r in result["browser"]) for key in keys}
    print(f"\n{label}: time to frames in Chromium ({len(result['vllm'])} rounds, medians; "
          f"{'/'.join(map(str, result['frames']))} frames)")
    # the rounds' own ratios too: on a loaded box one slow round moves either median alone
    by_round = statistics.median(b["frames"] / v for v, b in zip(result["vllm"], result["browser"], strict=True))
    print("| vLLM's preprocessing s | upload shown s | inspector in the app s | first frame shown s | "
          "gallery listed s | pictures fetched s | frames shown s | × vLLM | × vLLM, median of the rounds | "
          "figures drawn s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {vllm:.2f} | {med['upload']:.2f} | {med['inspector']:.1f} | {med['first']:.2f} | {med['listed']:.2f} | "
          f"{med['fetch_start']:.2f}–{med['fetch_end']:.2f} | {med['frames']:.2f} | "
          f"**{med['frames'] / vllm:.2f}** | {by_round:.2f} | {med['figures']:.2f} |")
    gradio = {key: statistics.median(r[f"gradio_{key}"] for r in result["browser"])
              for key in (*gradio_queue.PHASES, "steps")}
    if not math.isnan(gradio["fn_call"]):
        print(f"the video event in Gradio (its profiling traces, medians): queue wait {gradio['queue_wait']:.0f} ms, "
              f"preprocess {gradio['preprocess']:.0f} ms, the inspection {gradio['fn_call']:.0f} ms and "
              f"postprocess {gradio['postprocess']:.0f} ms over its {gradio['steps']:.0f} steps (the frames, then "
              "the rest)")
    print("rounds (vLLM s / frames s): " + ", ".join(
        f"{v:.2f}/{b['frames']:.2f}" for v, b in zip(result["vllm"], result["browser"], strict=True)))


# ---------------------------------------------------------------- main
def run_app(label: str, checkout: Path, args: argparse.Namespace, videos: list[Path], cache: Path) -> None:
    workers = None if label.startswith("before") else args.workers  # an older app.py may lack the flag
    name = label.split()[0]
    if not args.browser_only:
        app = App(checkout, workers, cache / f"{name}.log")
        try:
            app.wait()
            in_a_row(app, videos[-1:])  # warm: the app's first inspection imports and loads
            rows, four = concurrency_table(app, videos, args.sessions, args.rounds)
            print_concurrency(label, rows, four, usable_cores())
        finally:
            app.close()
    if args.no_browser:
        return
    cores = sorted(os.sched_getaffinity(0))
    pinned = args.pin and len(cores) >= 2
    app = App(checkout, workers, cache / f"{name}-browser.log", cores={cores[0]} if pinned else None, profiling=True)
    mine = set(os.sched_getaffinity(0))
    try:
        if pinned:  # the app on one core; this process, vLLM's baseline and Chromium on the others
            os.sched_setaffinity(0, set(cores[1:]))
        app.wait()
        in_a_row(app, videos[-1:])
        result = time_to_frames(app.url, videos, args.browser_rounds)
        if result is not None:
            where = (f"the app on core {cores[0]}, Chromium and vLLM's baseline on the other"
                     f"{'s' if len(cores) > 2 else ''}") if pinned else "Chromium on the same cores as the app"
            print_time_to_frames(f"{label} ({where})", result)
    finally:
        os.sched_setaffinity(0, mine)
        app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 s clips, 1/2/4 sessions, 3 browser rounds")
    parser.add_argument("--seconds", type=float, default=None, help="clip length (default 30; --quick 10)")
    parser.add_argument("--sessions", type=int, nargs="+", default=None, help="rows (default 1 2 4 8)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per row (the median wall is shown)")
    parser.add_argument("--browser-rounds", type=int, default=5, help="time-to-frames rounds (default 5)")
    parser.add_argument("--workers", type=int, default=None, help="the app's --inspect-workers (default: its own)")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium measurement")
    parser.add_argument("--browser-only", action="store_true",
                        help="only the Chromium measurement (time to frames), with its --browser-rounds")
    parser.add_argument("--pin", action="store_true",
                        help="time to frames with the app on one core and Chromium on the others, as when the "
                        "visitor's browser runs on another machine (one inspection needs one core)")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run another checkout's app.py (DIR) the same way, after this one")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/dots3_bench/concurrency"))
    args = parser.parse_args(argv)
    if args.browser_only and args.no_browser:
        parser.error("--browser-only and --no-browser exclude each other")
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    args.sessions = args.sessions or ([1, 2, 4] if args.quick else [1, 2, 4, 8])
    if args.quick:
        args.browser_rounds = min(args.browser_rounds, 3)
    if shutil.which("ffmpeg") is None:
        print("FFmpeg is needed to make the videos (apt-get install ffmpeg)", file=sys.stderr)
        return 2
    cache = args.cache_dir / f"{seconds:g}s"
    cache.mkdir(parents=True, exist_ok=True)
    count = max(max(args.sessions), 4, args.browser_rounds + 1)
    videos = [make_video(cache / f"clip{i}.mp4", i, seconds) for i in range(count)]
    print(f"{len(videos)} different {seconds:g} s 1280×720 H.264 + AAC clips; load average "
          f"{os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} (1 / 5 min)")
    run_app("this checkout", ROOT, args, videos, cache)
    if args.before is not None:
        run_app(f"before ({args.before})", args.before.resolve(), args, videos, cache)
    print(f"\nload average after: {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} (1 / 5 min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
