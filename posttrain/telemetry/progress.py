"""Progress bars for long loops: a rich bar on a terminal, compact lines in logs, nothing when disabled.

    with progress_bar(total=steps, description="sft") as bar:
        for step in ...:
            bar.update(1, loss=0.123, lr=3e-4)

On a terminal (stderr is a TTY) it draws description, bar, completed/total, elapsed, ETA and the
fields. When stderr is not a terminal (CI, `> log.txt`) it prints one plain line at every 10% of
the total (and at least once a minute) instead, without control characters. With enabled=False it prints nothing at all.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

LINE_EVERY_FRACTION = 0.10
LINE_EVERY_SECONDS = 60.0  # long runs still show a sign of life in logs between 10% marks


def format_fields(fields: dict[str, Any]) -> str:
    """{"loss": 0.12345, "step": 3} -> "loss=0.1235 step=3"."""
    parts = []
    for key, value in fields.items():
        if isinstance(value, float):
            parts.append(f"{key}={value:.4g}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def format_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Bar:
    """What `progress_bar` yields: update(advance=1, **fields). `completed`, `total`, `fields` are readable."""

    def __init__(self, total: int, description: str):
        self.total = max(0, int(total))
        self.description = description
        self.completed = 0
        self.fields: dict[str, Any] = {}
        self.started = time.monotonic()

    def update(self, advance: int = 1, **fields: Any) -> None:
        self.completed += advance
        self.fields.update(fields)
        self._show()

    def eta_seconds(self) -> float | None:
        if self.completed <= 0 or self.total <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.completed * max(0, self.total - self.completed)

    def _show(self) -> None:  # the silent bar (enabled=False)
        pass

    def _finish(self) -> None:
        pass


class _RichBar(Bar):
    def __init__(self, total: int, description: str, progress, task_id):
        super().__init__(total, description)
        self._progress, self._task = progress, task_id

    def _show(self) -> None:
        self._progress.update(self._task, completed=self.completed, fields=format_fields(self.fields))


class _LineBar(Bar):
    """Plain lines for logs: at every LINE_EVERY_FRACTION of the total, every LINE_EVERY_SECONDS, and at the end."""

    def __init__(self, total: int, description: str, stream):
        super().__init__(total, description)
        self._stream = stream
        self._next_mark = LINE_EVERY_FRACTION
        self._last_printed = -1
        self._last_time = self.started

    def _show(self) -> None:
        due = time.monotonic() - self._last_time >= LINE_EVERY_SECONDS
        if self.total > 0:
            frac = self.completed / self.total
            while self._next_mark <= frac + 1e-12:
                self._next_mark += LINE_EVERY_FRACTION
                due = True
        if due:
            self._print()

    def _print(self) -> None:
        if self.completed == self._last_printed:
            return
        self._last_printed = self.completed
        self._last_time = time.monotonic()
        elapsed = time.monotonic() - self.started
        pct = f" ({100 * self.completed / self.total:.0f}%)" if self.total else ""
        eta = self.eta_seconds()
        eta_s = f" eta {format_seconds(eta)}" if eta is not None else ""
        fields = format_fields(self.fields)
        line = f"{self.description}: {self.completed}/{self.total}{pct} {format_seconds(elapsed)} elapsed{eta_s}"
        print(line + (f" {fields}" if fields else ""), file=self._stream, flush=True)

    def _finish(self) -> None:
        if self.completed > 0:
            self._print()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress_bar(total: int, description: str, enabled: bool = True) -> Iterator[Bar]:
    """A context manager yielding a bar with update(advance=1, **fields)."""
    stream = sys.stderr
    if not enabled:
        yield Bar(total, description)
        return
    if not _is_terminal(stream):
        bar = _LineBar(total, description, stream)
        try:
            yield bar
        finally:
            bar._finish()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[fields]}"),
        console=Console(file=stream),
        transient=False,
    )
    with progress:
        task_id = progress.add_task(description, total=max(0, int(total)) or None, fields="")
        yield _RichBar(total, description, progress, task_id)
