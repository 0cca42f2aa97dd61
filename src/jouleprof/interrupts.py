"""SIGTERM taken as Ctrl-C.

`timeout`, `kill`, Slurm's `scancel` and a container's stop send SIGTERM. Python's default is
to die on the spot: a measurement's run directory is left without its closing record, and a
study's cells, each in its own session so that a timeout can kill its whole group, keep running
on the GPU with nobody to record them. `terminate_as_interrupt()` makes SIGTERM raise
`Terminated`, a KeyboardInterrupt, so a terminated run takes the path an interrupted one
takes: the measurement closes its run directory as incomplete with a note, a study passes the
interrupt on to its live cells and records them (`bench.executors.interrupt_live_cells`).
"""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM was received (raised in the main thread by the handler)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated(f"terminated by signal {signum} (SIGTERM)")


def terminate_as_interrupt() -> bool:
    """Install the handler; True if installed. Only from the main thread, and only where
    SIGTERM still has its default action (a program that handles it itself keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return signal.getsignal(signal.SIGTERM) is _raise_terminated
    signal.signal(signal.SIGTERM, _raise_terminated)
    return True


def interrupt_note(e: KeyboardInterrupt) -> str:
    """How a run directory's notes name the interruption."""
    if isinstance(e, Terminated):
        return "terminated (SIGTERM): figures cover the run up to then"
    return "interrupted (Ctrl-C): figures cover the run up to then"


def exit_code_of(e: KeyboardInterrupt) -> int:
    """The exit code a shell reports for the signal: 143 for SIGTERM, 130 for Ctrl-C."""
    return 143 if isinstance(e, Terminated) else 130
