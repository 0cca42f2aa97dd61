"""Where a matrix's cells run: processes on this machine, or a Slurm job array (submitit).

`LocalExecutor` runs one cell at a time by default. Given GPUs, it runs a cell on each at once,
each cell seeing only its own GPU(s) (CUDA_VISIBLE_DEVICES; a shared GPU spoils energy figures),
and a cell that needs several GPUs (Cell.gpus > 1) is started through torchrun on that many. Before
a GPU cell starts, its GPUs may cool down to near their idle power (bench/cooldown.py), recorded in
the cell's cell.json. `SlurmExecutor` (executors_slurm.py) submits the whole matrix as job arrays.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jouleprof.bench.cellserver import CellServer
    from jouleprof.bench.cooldown import CooldownConfig
    from jouleprof.bench.matrix import Cell, Executor, Plan

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124
_LIVE: set[Any] = set()
"""Running cells: subprocess.Popen or cellserver.ServedCell (each has pid and wait(timeout))."""
_LIVE_LOCK = threading.Lock()


def start_process(
    argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, server=None
) -> Any:
    """Start `argv` in a session of its own, its output to log_path (truncated): forked from
    `server` (a `cellserver.CellServer`) where given and it accepts the command, its heavy
    imports already done; otherwise (or if the server has gone) a plain process. Returns a
    subprocess.Popen or a cellserver.ServedCell (each has pid and wait(timeout)); raises
    OSError where the program cannot be started."""
    env = os.environ.copy() if env is None else env
    if server is not None and server.accepts(argv):
        Path(log_path).write_text("")
        try:
            return server.start(argv, log_path, env)
        except RuntimeError as e:
            log.warning("%s: starting it as a plain process", e)
    with Path(log_path).open("w") as f:
        return subprocess.Popen(
            list(argv), stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def wait_process(p: Any, timeout_s: float) -> int | None:
    """`p`'s exit code (minus the signal's number where a signal ended it), or None where it
    ran past `timeout_s`: then it was killed with every child it started. While it runs, Ctrl-C
    reaches it through `interrupt_live_cells`."""
    with _LIVE_LOCK:
        _LIVE.add(p)
    try:
        return p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(p, signal.SIGKILL)
        p.wait()
        return None
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(p)


def run_process(
    argv: Sequence[str],
    cell_dir: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    server: CellServer | None = None,
) -> int:
    """Run one cell's command, its output to cell_dir/cell.log; returns its exit code.

    The process gets its own session, so a timeout kills it with every child it started
    (data loader workers, torchrun's ranks); past the timeout error.txt says so and the code is
    124. A signal-killed process returns minus the signal's number. With a `server` the process
    is forked from it (`start_process`).
    """
    cell_dir = Path(cell_dir)
    try:
        p = start_process(argv, cell_dir / "cell.log", env, server)
    except OSError as e:  # no such program: the cell fails with the reason
        (cell_dir / "error.txt").write_text(f"cannot start {argv[0]!r}: {e.strerror or e}\n")
        return 127
    code = wait_process(p, timeout_s)
    if code is None:
        (cell_dir / "error.txt").write_text(
            f"TimeoutExpired: the cell ran past its {timeout_s:.0f} s limit and was killed\n"
        )
        return EXIT_TIMEOUT
    return code


def _signal_group(p: Any, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, sig)


def interrupt_live_cells(grace_s: float = 20.0) -> None:
    """Ctrl-C reaches the cells too (they have their own sessions): SIGINT, so each writes its
    run directory as interrupted, then SIGKILL whatever is left after `grace_s`."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        _signal_group(p, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)


def torchrun_argv(argv: Sequence[str], nproc: int) -> list[str]:
    """A python command (`python -m mod ...` or `python script.py ...`) as a torchrun launch on
    `nproc` local GPUs; any other command is returned as it is (it starts its own ranks)."""
    argv = list(argv)
    if nproc <= 1 or not Path(argv[0]).name.startswith("python") or len(argv) < 2:
        return argv
    if argv[1] == "-c":
        return argv
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*run, f"--nproc-per-node={nproc}", *argv[1:]]


def cell_env(gpus: Sequence[int] | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a cell: this one, restricted to `gpus` (None: left as it is), with
    `extra` (e.g. the launcher's git record, `hardware.git_record_env`)."""
    env = os.environ.copy()
    env.update(extra or {})
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    return env


Slot = Callable[["Cell", Path], int]
"""Runs one cell in its directory and returns the exit code (a `gpu` attribute names its GPU)."""


class LocalExecutor:
    """Cells as processes on this machine.

    Args:
        gpus: None: one cell at a time, seeing what this process sees. A list of GPU indices:
            one cell per GPU at once, each seeing only the GPU(s) it was given.
        cooldown: wait for a GPU cell's GPUs to cool before it starts (None: never).
        slots: instead of `gpus`, run a cell through each of these at once.
        preload: modules to import once in a `cellserver.CellServer` that forks the cells
            (`python -m MODULE` commands on at most one GPU; others start as plain processes).
            Each running cell has its own server; `close()` ends them. None: plain processes.
    """

    def __init__(
        self,
        gpus: Sequence[int] | None = None,
        cooldown: CooldownConfig | None = None,
        slots: Sequence[Slot] | None = None,
        preload: Sequence[str] | None = None,
    ) -> None:
        if gpus is not None:
            gpus = [int(g) for g in gpus]
            if not gpus or len(set(gpus)) != len(gpus) or min(gpus) < 0:
                raise ValueError(f"gpus must be distinct GPU indices ≥ 0, got {list(gpus)}")
        if slots is not None and not slots:
            raise ValueError("slots must hold at least one runner")
        if slots is not None and gpus is not None:
            raise ValueError("give either gpus or slots, not both")
        self.gpus, self.cooldown, self.slots = gpus, cooldown, slots
        self._cool = None
        self.preload = tuple(preload) if preload else None
        self._servers: list[CellServer] = []  # idle servers, kept across execute() calls
        self._servers_lock = threading.Lock()
        self._server_failed = False  # a server could not start: plain processes from then on

    # -- cell servers --------------------------------------------------------------------------

    def _take_server(self, plan: Plan) -> CellServer | None:
        """An idle live server (started if none is idle); None where preloading is off or a
        server could not start (then every cell starts as a plain process, said once)."""
        if self.preload is None or self._server_failed:
            return None
        with self._servers_lock:
            while self._servers:
                server = self._servers.pop()
                if server.alive:
                    return server
                server.close()
        from jouleprof.bench.cellserver import start_or_none

        server = start_or_none(self.preload, plan.out / "cellserver.log")
        self._server_failed = server is None
        return server

    def _give_server(self, server: CellServer | None) -> None:
        if server is not None:
            with self._servers_lock:
                self._servers.append(server)

    def close(self) -> None:
        """End the idle cell servers (a later cell starts a new one)."""
        with self._servers_lock:
            servers, self._servers = self._servers, []
        for server in servers:
            server.close()

    # -- one cell ------------------------------------------------------------------------------

    def _launch(self, plan: Plan, cell: Cell, held: list[Any]) -> None:
        cdir = plan.prepare(cell, **self._attempt_info(cell, held))
        if self.slots is not None:
            slot = held[0]
            t0 = time.monotonic()
            code = slot(cell, cdir)
            plan.finish(cell, code, time.monotonic() - t0, gpu=getattr(slot, "gpu", None))
            return
        gpus = held if self.gpus is not None else None
        if self.cooldown is not None and cell.gpus > 0:
            plan.update_attempt(cell, cooldown=self._cooldown(gpus, cell.gpus))
        argv = cell.command(cdir)
        if cell.gpus > 1:
            argv = torchrun_argv(argv, cell.gpus)
        server = None
        if self.preload is not None and cell.gpus <= 1:
            from jouleprof.bench.cellserver import CellServer

            if CellServer.accepts(argv):
                server = self._take_server(plan)
        t0 = time.monotonic()
        try:
            code = run_process(
                argv,
                cdir,
                cell.timeout_s,
                cell_env(gpus if cell.gpus else [], plan.launch_env),
                server=server,
            )
        finally:
            self._give_server(server)
        label = ",".join(str(g) for g in gpus) if gpus else None
        plan.finish(cell, code, time.monotonic() - t0, gpu=label, launched=argv[:6])

    def _attempt_info(self, cell: Cell, held: list[Any]) -> dict[str, Any]:
        if self.slots is not None:
            return {"executor": "local", "gpu": getattr(held[0], "gpu", None)}
        return {"executor": "local", "gpus": held if self.gpus is not None else "inherited"}

    def _cooldown(self, gpus: list[int] | None, n: int) -> dict[str, Any]:
        from jouleprof.bench.cooldown import Cooldown

        if self._cool is None:
            self._cool = Cooldown(self.cooldown)
        return self._cool.wait(gpus if gpus is not None else list(range(n)))

    # -- the matrix ----------------------------------------------------------------------------

    def execute(self, plan: Plan) -> None:
        pool: list[Any] = list(self.slots or self.gpus or [None])
        free = list(pool)
        cond = threading.Condition()
        waiting = [False]
        errors: list[BaseException] = []

        def need(cell: Cell) -> int:
            if self.slots is not None or self.gpus is None:
                return 1
            return max(cell.gpus, 1)

        def worker() -> None:
            try:
                while True:
                    with cond:
                        while waiting[0]:
                            cond.wait()
                        cell = plan.take()
                        if cell is None:
                            return
                        k = need(cell)
                        if k > len(pool):
                            plan.prepare(cell, executor="local")
                            why = f"needs {k} GPUs; this executor has {len(pool)} ({pool})"
                            (plan.out / "cells" / cell.cell_id / "error.txt").write_text(why + "\n")
                            plan.finish(cell, 1, 0.0, why=why)
                            continue
                        waiting[0] = True
                        while len(free) < k:
                            cond.wait()
                        held, free[:] = free[:k], free[k:]
                        waiting[0] = False
                        cond.notify_all()
                    try:
                        self._launch(plan, cell, held)
                    finally:
                        with cond:
                            free.extend(held)
                            free.sort(key=pool.index)
                            cond.notify_all()
            except BaseException as e:  # a slot that dies stops the study; the caller says why
                errors.append(e)
                plan.stop()
                with cond:
                    cond.notify_all()
            finally:
                ended.release()

        # The main thread waits on a semaphore the slots release as they end, in slices, so
        # that Ctrl-C (or SIGTERM, `jouleprof.interrupts`) reaches it. Not Thread.join: a join
        # interrupted by Ctrl-C can leave the thread marked as ended while it runs (CPython
        # 3.11), and the study then exited before its slots recorded their interrupted cells.
        ended = threading.Semaphore(0)
        threads = [
            threading.Thread(target=worker, name=f"matrix-slot{i}", daemon=True)
            for i in range(len(pool))
        ]
        for t in threads:
            t.start()
        left = len(threads)
        try:
            while left:
                if ended.acquire(timeout=0.5):
                    left -= 1
        except KeyboardInterrupt:
            plan.stop()
            interrupt_live_cells()
            deadline = time.monotonic() + 30
            while left and ended.acquire(timeout=max(0.0, deadline - time.monotonic())):
                left -= 1
            raise
        if errors:
            raise errors[0]


def visible_gpu_indices() -> list[int]:
    """The GPUs this process may use, as CUDA numbers them (0..n-1), via NVML; [] without."""
    from jouleprof.sensors.visible import parse_visible_devices

    tokens = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if tokens is not None:
        return list(range(len(tokens)))
    try:
        from jouleprof.sensors.nvml import import_pynvml

        nv = import_pynvml()
        nv.nvmlInit()
        try:
            return list(range(nv.nvmlDeviceGetCount()))
        finally:
            nv.nvmlShutdown()
    except Exception:  # no NVML, no driver: no GPU to hand out
        return []


def make_executor(name: str, **options: Any) -> Executor:
    """An executor by name: "local" or "slurm" (options go to its constructor)."""
    if name == "local":
        return LocalExecutor(**options)
    if name == "slurm":
        from jouleprof.bench.executors_slurm import SlurmExecutor

        return SlurmExecutor(**options)
    raise ValueError(f"unknown executor {name!r}: choose local or slurm")
