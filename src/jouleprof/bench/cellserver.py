"""Cells forked from a process that has already imported their heavy modules.

A study cell is a `python -m jouleprof.cli.main ...` process. On the H200 host, its imports
alone (torch, transformers, peft, torchvision) took 14–22 s of a video cell's start
(benchmarks/results/cell_startup), against under a second for CUDA's context and the model's
build. A `CellServer` pays them once: a server process imports the modules, then forks one child
per cell. Each cell is still its own process (its own session, its own log, an OOM or a crash
ends only it, a timeout kills it and its children), started from a copy of an interpreter that
has those modules loaded.

The server never touches CUDA: a process that has initialized CUDA cannot hand it to a forked
child. It refuses to serve if a preloaded module initialized it, and the executor then starts
plain processes, as it does for anything that is not `python -m MODULE` (torchrun launches, other
programs). Packages that initialize CUDA when imported (bitsandbytes, `DEFERRED`) are deferred:
while the server preloads, importing them raises ImportError, so a library that imports them
optionally (peft does, from `import peft`, wherever bitsandbytes is installed) takes its
"not installed" path for that import only; `importlib.util.find_spec` still finds them, so
availability checks (peft's `is_bnb_available`, transformers') answer as they would in a plain
process. A cell imports them itself after the fork. The one difference left in a served cell:
the module-level `bnb` of `peft.helpers` is None (only peft's SVD-based target finder reads it;
jouleprof does not call it).

Protocol (JSON lines): the server says {"ready": ...}; per request {"argv", "env", "cwd", "log"}
on its stdin it answers {"pid"} when the child starts and {"exit"} when it ends (the child's exit
code, minus the signal's number if a signal ended it, as subprocess reports it).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

VIDEO_PRELOAD: tuple[str, ...] = (
    "torch",
    "torchvision.models.video.swin_transformer",
    "transformers",
    "transformers.models.videomae.modeling_videomae",
    "transformers.models.timesformer.modeling_timesformer",
    "peft",
    "jouleprof.cli.main",
    "jouleprof.measurement",
    "jouleprof.timeline.recorder",
    "jouleprof.data.video_dataset",
    "jouleprof.bench.probe_cell",
    "jouleprof.bench.video_run",
    "jouleprof.bench.video_deploy",
    "jouleprof.bench.video_results",
    "jouleprof.workloads.video.step",
    "jouleprof.attribution",
    "jouleprof.timeline.windows",
    "pandas",
)
"""What a `jouleprof run video` cell (or a probe worker) imports from its start to its run
directory's last figure: the frameworks before its first step, the attribution and window
costing after its measurement (1.9 s of imports on a 2-core CPU), and pandas, which reads the
samples back when the measurement closes (0.2–0.34 s more a cell on the 2-core CPU, imported
after torch). hiera and bitsandbytes are left to the cells that use them."""

DEFERRED: tuple[str, ...] = ("bitsandbytes",)
"""Packages that initialize CUDA when imported: bitsandbytes queries the GPU to pick its
library. Without the deferral, `import peft` imported it wherever it is installed, CUDA was
initialized in the server, and every cell started as a plain process (module docstring)."""


class _Refuse(importlib.abc.Loader):
    """The loader of a deferred package while the server preloads: its import fails."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError(f"{module.__name__} is imported by the cell, not the preloading server")


class _Defer(importlib.abc.MetaPathFinder):
    """Finds the deferred packages with a spec that refuses to load (see the module docstring)."""

    def __init__(self, names: Sequence[str]):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.names:
            return None
        real = importlib.machinery.PathFinder.find_spec(fullname, path)
        if real is None:
            return None  # not installed: as without the deferral
        return importlib.machinery.ModuleSpec(fullname, _Refuse(), origin=real.origin)


@contextlib.contextmanager
def _deferred(names: Sequence[str]):
    finder = _Defer(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.partition(".")[0] in finder.names]:
            del sys.modules[name]  # none should be there; a cell must import them afresh


# -- the server ----------------------------------------------------------------------------


def _send(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def serve(preload: Sequence[str], deferred: Sequence[str] = DEFERRED) -> int:
    """Import `preload` (with `deferred` refused), then fork a child per request line on stdin
    until it closes."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # is_available() without cuInit
    loaded, failed = [], {}
    culprit = None
    with _deferred(deferred):
        for name in preload:
            try:
                importlib.import_module(name)
                loaded.append(name)
            except Exception as e:  # noqa: BLE001 — a module a cell may not need: it imports it
                failed[name] = f"{type(e).__name__}: {e}"
            if culprit is None and _cuda_initialized():
                culprit = name
    if culprit is not None:
        why = f"a preloaded module initialized CUDA (importing {culprit})"
        _send({"ready": False, "why": why})
        return 1
    # Ctrl-C at the terminal reaches the executor, which forwards it to each cell's session.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _send(
        {
            "ready": True,
            "loaded": loaded,
            "failed": failed,
            "deferred": list(deferred),
            "pid": os.getpid(),
        }
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req)  # never returns
        _send({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send({"exit": os.waitstatus_to_exitcode(status)})
    return 0


def _child(req: dict) -> None:
    """Become the cell: its own session, its log on stdout and stderr, its environment, then
    `python -m MODULE ARGS` in this interpreter."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.path[0:0] = [req["cwd"]]
        module, args = req["argv"][2], req["argv"][3:]
        sys.argv = [module, *args]
        code = 0
        try:
            import runpy

            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = _exit_code(e.code)
        except BaseException:  # noqa: BLE001 — the cell's own crash, reported like python's
            import traceback

            traceback.print_exc()
            code = 1
        import atexit

        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# -- the executor's side -------------------------------------------------------------------


class ServedCell:
    """A running cell started by a server: its process group id and a wait with a timeout
    (what `executors.interrupt_live_cells` needs of it)."""

    def __init__(self, pid: int, answers: queue.Queue) -> None:
        self.pid = pid
        self._answers = answers
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                msg = self._answers.get(timeout=timeout)
            except queue.Empty:
                raise subprocess.TimeoutExpired("cell", timeout) from None
            self.returncode = int(msg["exit"]) if "exit" in msg else 1
        return self.returncode


class CellServer:
    """A server process with `preload` imported; `start(argv, ...)` forks a cell from it.

    One cell at a time per server (an executor gives each of its slots its own). `accepts`
    says which commands it can start; anything else is started as a plain process.
    """

    def __init__(
        self,
        preload: Sequence[str],
        log_path: Path,
        ready_timeout_s: float = 600.0,
        env: dict[str, str] | None = None,
        deferred: Sequence[str] = DEFERRED,
    ):
        """`env`: the server's environment (default this process's): where it finds the
        modules to preload, and what every cell's `sys.path` is built from. `deferred`: the
        packages the server refuses to import while it preloads (`DEFERRED`)."""
        self.preload = tuple(preload)
        self._log = open(log_path, "a")  # noqa: SIM115 — the server's stderr, for its lifetime
        t0 = time.monotonic()
        self._p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jouleprof.bench.cellserver",
                *self.preload,
                f"{_DEFER_FLAG}{','.join(deferred)}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
            env=env,
        )
        self._answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="cellserver-reader").start()
        try:
            hello = self._answers.get(timeout=ready_timeout_s)
        except queue.Empty:
            hello = {"ready": False, "why": f"no answer in {ready_timeout_s:.0f} s"}
        if not hello.get("ready"):
            self.close()
            raise RuntimeError(f"cell server not ready: {hello.get('why', hello)}")
        self.loaded = hello["loaded"]
        self.failed = hello["failed"]
        self.start_s = time.monotonic() - t0
        log.info("cell server ready in %.1f s (preloaded %s)", self.start_s, ", ".join(self.loaded))

    def _read(self) -> None:
        for line in self._p.stdout:
            with contextlib.suppress(ValueError):
                self._answers.put(json.loads(line))
        self._answers.put({"gone": True})

    @staticmethod
    def accepts(argv: Sequence[str]) -> bool:
        """`python -m MODULE ...` with this interpreter."""
        return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m"

    @property
    def alive(self) -> bool:
        return self._p.poll() is None

    def start(
        self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> ServedCell:
        """Fork the cell `argv` (its output appended to log_path) with the environment `env`
        (None: this process's); raises RuntimeError if the server has gone."""
        env = dict(os.environ) if env is None else env
        req = {"argv": list(argv), "env": env, "cwd": os.getcwd(), "log": str(log_path)}
        try:
            self._p.stdin.write(json.dumps(req) + "\n")
            self._p.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise RuntimeError(f"cell server gone: {e}") from e
        msg = self._answers.get()
        if "pid" not in msg:
            raise RuntimeError(f"cell server gone before starting the cell ({msg})")
        return ServedCell(int(msg["pid"]), self._answers)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._p.stdin.close()
        try:
            self._p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._p.pid, signal.SIGKILL)
            self._p.wait()
        self._log.close()


def start_or_none(preload: Sequence[str], log_path: Path, env=None) -> CellServer | None:
    """A CellServer, or None (with a warning) where one cannot start: the caller then starts
    plain processes."""
    try:
        return CellServer(preload, log_path, env=env)
    except (RuntimeError, OSError) as e:
        log.warning("%s: cells start as plain processes", e)
        return None


_DEFER_FLAG = "--defer="


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jouleprof.bench.cellserver MODULE ... [--defer=PKG,...]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    flags = [a for a in args if a.startswith(_DEFER_FLAG)]
    deferred = [n for f in flags for n in f[len(_DEFER_FLAG) :].split(",") if n]
    preload = [a for a in args if not a.startswith(_DEFER_FLAG)]
    return serve(preload, deferred if flags else DEFERRED)


if __name__ == "__main__":
    raise SystemExit(main())
