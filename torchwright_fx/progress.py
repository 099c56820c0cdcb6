"""A one-line progress display for long compiles, on stderr.

Shown when stderr is a terminal and the environment variable ``CI`` is unset, or when asked
(``tw.compile(..., progress=True)``); never with ``progress=False``, and by default not in
notebooks, pipes or CI. On a terminal one line is redrawn in place with the running stage and
its elapsed seconds (a CP-SAT solve can take minutes) and erased at the end (a compile of 5 s
or more leaves a summary line); asked for elsewhere, each stage is printed on its own line.
``pipeline.build`` opens the display with ``compiling``; any stage inside it says where it is
with ``stage`` (a no-op when no display is open).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

PREFIX = "torchwright-fx"
REDRAW_SECONDS = 0.25  # how often a terminal line's seconds are redrawn
SUMMARY_SECONDS = 5.0  # a terminal keeps a summary line of compiles at least this long


def wanted(option: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to show progress: ``option`` when given, else on a terminal outside CI."""
    if option is not None:
        return bool(option)
    stream = sys.stderr if stream is None else stream
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        tty = False
    return tty and not os.environ.get("CI")


class Display:
    def __init__(self, name: str, stream: TextIO, live: bool):
        self.name, self.stream, self.live = name, stream, live
        self.start = self.stage_start = time.perf_counter()
        self.current = ""
        self.seconds: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None
        if live:
            self.ticker = threading.Thread(target=self._tick, daemon=True,
                                           name="torchwright-fx progress")
            self.ticker.start()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (ValueError, OSError):  # the stream went away: drop the display, not the build
            self.live = False

    def _line(self) -> str:
        elapsed = time.perf_counter() - self.stage_start
        line = f"{PREFIX}: compiling {self.name}: {self.current} {elapsed:.1f}s"
        width = shutil.get_terminal_size().columns - 1  # a wrapped line cannot be redrawn
        return line if len(line) <= width else line[:max(width - 3, 0)] + "..."

    def _tick(self) -> None:
        while not self.stop.wait(REDRAW_SECONDS):
            with self.lock:
                if self.live and self.current:
                    self._write("\r\x1b[K" + self._line())

    def _finish_stage(self, now: float) -> None:
        if self.current:
            key = self.current.split(":")[0]
            self.seconds[key] = self.seconds.get(key, 0.0) + now - self.stage_start

    def stage(self, name: str) -> None:
        with self.lock:
            now = time.perf_counter()
            self._finish_stage(now)
            self.current, self.stage_start = name, now
            if self.live:
                self._write("\r\x1b[K" + self._line())
            else:
                self._write(f"{PREFIX}: compiling {self.name}: {name}\n")

    def close(self, ok: bool) -> None:
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            now = time.perf_counter()
            self._finish_stage(now)
            total = now - self.start
            parts = ", ".join(f"{k} {v:.2f}s" for k, v in self.seconds.items())
            summary = (f"{PREFIX}: compiled {self.name} in {total:.2f}s ({parts})" if ok else
                       f"{PREFIX}: compiling {self.name} stopped at {self.current or 'start'}")
            if self.live:
                self._write("\r\x1b[K" + (summary + "\n" if ok and total >= SUMMARY_SECONDS
                                           else ""))
            else:
                self._write(summary + "\n")


_local = threading.local()


@contextmanager
def compiling(name: str, option: bool | None) -> Iterator[None]:
    """Open the display for one compile (nested opens reuse the outer one)."""
    if getattr(_local, "display", None) is not None or not wanted(option):
        yield
        return
    stream = sys.stderr
    display = Display(name, stream, live=wanted(None, stream))
    _local.display = display
    ok = False
    try:
        yield
        ok = True
    finally:
        _local.display = None
        display.close(ok)


def stage(name: str) -> None:
    """Say which stage runs now ("lower", "schedule: CP-SAT solve", ...)."""
    display = getattr(_local, "display", None)
    if display is not None:
        display.stage(name)
