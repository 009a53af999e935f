"""A one-line progress bar on standard error (no dependency, redraws in place on a TTY,
prints one line per step otherwise so logs stay readable)."""

from __future__ import annotations

import sys
import time


class Progress:
    """Counts finished steps out of ``total`` (and how many of them failed) and shows the
    time left."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.failed = 0
        self.label = label
        self.enabled = enabled
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._draw("")

    def step(self, what: str, failed: bool = False) -> None:
        """Marks one step done (``failed``: it failed); ``what`` names it."""
        self.done += 1
        self.failed += int(failed)
        self._draw(what)

    def _draw(self, what: str) -> None:
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / self.total)
        elapsed = time.monotonic() - self.start
        eta = ""
        if 0 < self.done < self.total:
            eta = f" ~{elapsed / self.done * (self.total - self.done):.0f}s left"
        line = (
            f"{self.label} [{'#' * filled}{'.' * (width - filled)}] "
            f"{self.done}/{self.total}{f' ({self.failed} failed)' if self.failed else ''} "
            f"{elapsed:.0f}s{eta} {what}"
        )
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + line[:150])
            if self.done >= self.total:
                sys.stderr.write("\n")
        elif what or self.done == 0:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
