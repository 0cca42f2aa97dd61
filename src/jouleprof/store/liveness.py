"""Who writes a run, and whether that writer is still alive (pure reads of /proc and run.json).

run.json names its writer (`writer_info`: pid, a key of the host and boot, the process's start
time). A run whose status still says "running" while its writer is gone (killed, crashed, the
machine rebooted) is reported as crashed (`effective_status`); where the writer cannot be
checked from here (a copied directory), a run nobody has written for `STALE_S` is.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouleprof.errors import RunDirError
from jouleprof.types import RunRecord


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def host_key() -> str:
    """A key of this host and boot: equal for two processes of one running machine, and names
    neither (a hash of the hostname and the kernel's boot id)."""
    return hashlib.sha256(f"{socket.gethostname()}|{_boot_id()}".encode()).hexdigest()[:16]


def _proc_start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (Linux); None where unknown."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def writer_info() -> dict[str, Any]:
    """run.json extra["writer"]: the process writing the run, to tell later if it is gone."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host_key": host_key(),
        "start_ticks": _proc_start_ticks(pid),
        "started_unix_s": round(time.time(), 3),
    }


def _writer_alive(writer: dict[str, Any]) -> bool | None:
    """True/False where this host can tell, None where it cannot (another machine, no pid)."""
    pid = writer.get("pid")
    if not isinstance(pid, int) or writer.get("host_key") != host_key():
        return None
    ticks = _proc_start_ticks(pid)
    if ticks is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not Path("/proc").is_dir()
    started = writer.get("start_ticks")
    return started is None or ticks == started  # another process with a reused pid: gone


STALE_S = 1800.0
"""A run still "running" whose files nobody has written for this long, on a machine that
cannot check its writer's pid (a copied directory), is reported as crashed."""


@dataclass(frozen=True)
class RunState:
    """What a run's status really is: `status` is run.json's, or "crashed" where the run says
    "running" but its writer is gone; `reason` says why (None when run.json's stands)."""

    status: str
    reason: str | None = None
    recorded: str | None = None
    """The status run.json records."""

    def __str__(self) -> str:
        return self.status if not self.reason else f"{self.status} ({self.reason})"


def last_write_s(run_dir: str | os.PathLike[str]) -> float | None:
    """Seconds since any file of the run was last written (None: no file)."""
    p = Path(run_dir)
    try:
        times = [f.stat().st_mtime for f in p.iterdir() if f.is_file()]
    except OSError:
        return None
    return time.time() - max(times) if times else None


def status_text(run_dir: str | os.PathLike[str], record: RunRecord | None = None) -> str:
    """`effective_status` as a report shows it ("complete", "crashed (its writer … is gone …)");
    run.json's own status where the writer cannot be looked at."""
    try:
        return str(effective_status(run_dir, record))
    except (RunDirError, OSError, ValueError):
        from jouleprof.store.rundir import RunDir

        return (record or RunDir(run_dir).read_record()).status.value


def effective_status(run_dir: str | os.PathLike[str], record: RunRecord | None = None) -> RunState:
    """The status to show for a run: run.json's, except that a run recorded as "running" whose
    writer process is gone (killed, crashed, the machine rebooted) is "crashed".

    Args:
        run_dir: the run directory.
        record: its RunRecord if already read (else run.json is read).

    Raises:
        RunDirError: no readable run.json.
    """
    from jouleprof.store.rundir import RunDir  # rundir imports this module

    rec = record if record is not None else RunDir(run_dir).read_record()
    recorded = rec.status.value
    if recorded != "running":
        return RunState(recorded, None, recorded)
    writer = rec.extra.get("writer") if isinstance(rec.extra.get("writer"), dict) else {}
    alive = _writer_alive(writer) if writer else None
    idle_s = last_write_s(run_dir)
    when = f"; last write {idle_s:,.0f} s ago" if idle_s is not None else ""
    if alive is False:
        return RunState(
            "crashed",
            f"its writer (pid {writer.get('pid')}) is gone: killed or crashed while running"
            f"{when}; everything written until then is kept",
            recorded,
        )
    if alive is None and idle_s is not None and idle_s > STALE_S:
        return RunState(
            "crashed",
            f"still marked running, but nothing was written for {idle_s / 60:,.0f} min and its "
            "writer cannot be checked from here",
            recorded,
        )
    return RunState("running", None, recorded)
