"""A one-line progress display that updates in place on a terminal: done of total, rate, ETA.

Used by ``kbatch convert`` for both engines. Totals come from what is known before reading
(segment sizes, offset spans); the arrow engine reports exact records and bytes, the Spark
engine an estimate from its tasks (shown with ``~``). Nothing is drawn unless enabled (a
TTY, or forced), and at most ten times a second.

>>> import io
>>> out = io.StringIO()
>>> p = Progress(2048, enabled=True, stream=out, clock=iter([0.0, 1.0, 2.0]).__next__)
>>> p.update(1024, records=10)
>>> out.getvalue().split("\\r")[-1].split("\\x1b")[0]
' 50% 1.0 KiB of 2.0 KiB, 10 records, 1.0 KiB/s, ETA 1s'
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "plural", "size"]


def size(n: float) -> str:
    """Bytes for people: ``size(1536) == '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def plural(n: int, word: str) -> str:
    """``plural(1, 'record') == '1 record'``, ``plural(1200, 'record') == '1,200 records'``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _eta(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """Draw ``done of total`` on one line of ``stream``, rewritten in place.

    Parameters
    ----------
    total_bytes : int
        What 100% is (bytes of log to read).
    enabled : bool
        Draw at all (``kbatch convert`` enables it on a TTY, or with ``--progress always``).
    stream : text stream, default sys.stderr
    clock : callable, default time.monotonic
    """

    def __init__(
        self,
        total_bytes: int,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(int(total_bytes), 0)
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.last_draw = -1.0
        self.drawn = False

    def update(
        self, done_bytes: float, *, records: int | None = None, approx: bool = False, force: bool = False
    ) -> None:
        """Show ``done_bytes`` of the total (and ``records`` so far); ``approx`` marks estimates."""
        if not self.enabled:
            return
        now = self.clock()
        if not force and self.drawn and now - self.last_draw < 0.1:
            return
        self.last_draw = now
        elapsed = max(now - self.start, 1e-9)
        done = min(max(done_bytes, 0.0), float(self.total)) if self.total else done_bytes
        tilde = "~" if approx else ""
        pct = f"{100 * done / self.total:3.0f}%" if self.total else "  ?%"
        parts = [f"{pct} {tilde}{size(done)} of {size(self.total)}"]
        if records is not None:
            parts.append(f"{tilde}{plural(records, 'record')}")
        rate = done / elapsed
        parts.append(f"{size(rate)}/s")
        if rate > 0 and self.total and done < self.total:
            parts.append(f"ETA {_eta((self.total - done) / rate)}")
        self.stream.write("\r" + ", ".join(parts) + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Erase the line (the summary follows)."""
        if self.enabled and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False
