"""Signals that end a run: SIGINT, SIGTERM and SIGHUP (the terminal or SSH session a run was
started from is gone) become RunInterrupted, so that every `finally` on the way out restores
what the run changed (tierbench.runner, tierbench.advise, tierbench.study)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


class RunInterrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived during a run."""


RESTORING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP (the SSH session or terminal the run was started from
    is gone) into RunInterrupted so that every `finally` restores state."""
    def handler(signum: int, _frame: object) -> None:
        # Ignore further signals so that the restore in progress cannot itself be cut short.
        for s in RESTORING_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGHUP:
            quiet_terminal()
        raise RunInterrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in RESTORING_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def quiet_terminal() -> None:
    """Point standard output and error that are a terminal that hung up at /dev/null, so that
    the restore's messages cannot fail it (a write to a hung-up terminal raises EIO); output
    going to a file or pipe is kept."""
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
                os.close(null)
        except OSError:
            pass
