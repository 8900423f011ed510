"""vLLM's own last lines, for a load stage and a failure that says why.

vLLM logs to standard output from this process and from the engine-core and worker processes it
spawns; the root cause of a failed start is printed only there (this process gets "Engine core
initialization failed. See root cause above."). :class:`OutputTail` tees file descriptors 1 and 2:
everything still reaches the terminal, children inherit the tee, and the last lines stay in memory.

:func:`load_stage` names the stage a line shows; :func:`root_cause` finds the last error line and
returns its message without the exception class name; :func:`clean` drops vLLM's log prefix.
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import sys
import threading

MAX_LINES = 400
DRAIN_AT_EXIT_S = 1.0  # at most this long at exit for the last lines to reach the terminal

# "(EngineCore pid=123) INFO 12-03 10:00:00 [core.py:98] message" → "message"
_PREFIX = re.compile(r"^(?:\(\w+(?: pid=\d+)?\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s*")
_PROCESS = re.compile(r"^\(\w+(?: pid=\d+)?\)\s+")
_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit))(?::\s*(.*))?$")
# (pattern in a line, the stage it starts), newest match wins
_STAGES = (
    (re.compile(r"Initializing a V1 LLM engine|Resolved architecture|Using max model len"), "configuring"),
    (re.compile(r"Waiting for init message|Starting to load model|Loading weights|load_format"), "loading weights"),
    (re.compile(r"Model loading took|Loading weights took"), "weights loaded"),
    (re.compile(r"torch\.compile|Compiling a graph|Compiling model|compiled graph", re.I), "compiling"),
    (re.compile(r"KV cache|Memory profiling|profiling run", re.I), "sizing the KV cache"),
    (re.compile(r"Capturing CUDA graph|Graph capturing", re.I), "capturing CUDA graphs"),
    (re.compile(r"init engine \(profile, create kv cache, warmup model\) took|warming up", re.I), "warming up"),
)


def clean(line: str) -> str:
    """A log line without vLLM's level/time/file prefix (or its process tag)."""
    line = line.rstrip()
    stripped = _PREFIX.sub("", line, count=1)
    return _PROCESS.sub("", line, count=1) if stripped == line else stripped


def load_stage(lines: list[str]) -> str:
    """The load stage the newest matching line shows ("" when none matches)."""
    for line in reversed(lines):
        for pattern, stage in _STAGES:
            if pattern.search(line):
                return stage
    return ""


# What vLLM's processes say when another one failed: never the cause itself.
_WRAPPERS = re.compile(r"root cause|initialization failed|See stack trace|see the logs", re.I)


def is_wrapper(message: str) -> bool:
    """Whether ``message`` only says that something failed elsewhere (see the logs)."""
    return bool(_WRAPPERS.search(message))


def root_cause(lines: list[str]) -> str:
    """The message of the last ``SomeError: message`` line that is not one of vLLM's wrappers ("an
    exception in a background process…"), without the class name ("" if none)."""
    for line in reversed(lines):
        match = _ERROR.match(clean(line).strip())
        if match and match.group(2) and not is_wrapper(match.group(2)):
            return match.group(2).strip()
    return ""


def last_lines(lines: list[str], count: int = 40) -> tuple[str, ...]:
    """The last ``count`` lines, cleaned, with the root cause's line first when it scrolled out of them
    (vLLM's processes print pages of tracebacks after the line that says what went wrong)."""
    shown = [clean(line) for line in lines[-count:]]
    cause = root_cause(lines)
    if cause and not any(cause in line for line in shown):
        first = next(clean(line) for line in reversed(lines) if cause in line)
        shown = [first, "…", *shown[2:]]
    return tuple(shown)


class OutputTail:
    """Tee this process's stdout and stderr file descriptors into a ring of their last lines.

    One per process (:meth:`shared`); spawned processes inherit the tee. ``mark()`` and
    ``lines(since=mark)`` give the lines of one period (e.g. one engine start).
    """

    _shared: OutputTail | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> OutputTail:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
                atexit.register(cls._shared.close)
            return cls._shared

    def __init__(self, fds: tuple[int, ...] = (1, 2)) -> None:
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=MAX_LINES)
        self._count = 0
        self._lock = threading.Lock()
        self._partial: dict[int, str] = {}
        self._tees: list[tuple[int, int, threading.Thread]] = []  # (fd, the original it passes to, pump)
        for fd in fds:
            self._tee(fd)

    def _tee(self, fd: int) -> None:
        try:
            original = os.dup(fd)
        except OSError:  # no such descriptor (a daemon without stdout): nothing to tee
            return
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        thread = threading.Thread(target=self._pump, args=(fd, read_end, original), daemon=True,
                                  name=f"output-tail-{fd}")
        thread.start()
        self._tees.append((fd, original, thread))

    def close(self, timeout: float = DRAIN_AT_EXIT_S) -> None:
        """Point the descriptors back at the terminal and let the pumps pass on what is still in the
        pipes (at exit: the last lines a process prints, often the reason it stops, are never lost).
        Waits at most ``timeout`` seconds; child processes still holding the pipe keep their tee."""
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        tees, self._tees = self._tees, []
        for fd, original, _ in tees:
            try:
                os.dup2(original, fd)  # the pipe's last write end here is gone: its pump reads to EOF
            except OSError:
                pass
        for _, _, thread in tees:
            thread.join(timeout)

    def _pump(self, fd: int, read_end: int, original: int) -> None:
        while True:
            try:
                chunk = os.read(read_end, 65536)
            except OSError:
                return
            if not chunk:
                return
            view = memoryview(chunk)
            while view:
                try:
                    written = os.write(original, view)
                except OSError:
                    break
                view = view[written:]
            self._add(fd, chunk.decode("utf-8", "replace"))

    def _add(self, fd: int, text: str) -> None:
        text = self._partial.pop(fd, "") + text.replace("\r", "\n")
        *complete, rest = text.split("\n")
        if rest:
            self._partial[fd] = rest[-4096:]
        with self._lock:
            for line in complete:
                if line.strip():
                    self._count += 1
                    self._lines.append((self._count, line))

    def mark(self) -> int:
        with self._lock:
            return self._count

    def lines(self, since: int = 0, last: int = MAX_LINES) -> list[str]:
        with self._lock:
            chosen = [line for number, line in self._lines if number > since]
        return chosen[-last:]
