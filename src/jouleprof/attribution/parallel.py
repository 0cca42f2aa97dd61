"""The model choice's independent fits in parallel processes, where that pays.

`regression_choice.choose_model` fits one run several times, and some of those fits do not
depend on each other: the plain and the stall model, the buffer windows' lengths, the chosen
model with its intervals beside the bin-length check's coarser bins. `PrefetchingFit` wraps
the regression's fit function; `prefetch(fit, cfgs)` fits those configs at once in forked
worker processes (one per usable core, BLAS on one thread in each), and the choice's own code
then asks for them one by one, in its own order, exactly as without the pool: a prefetched
fit is handed back (or its AttributionError raised) at that call. The choices, their order,
their tie-breaks and every note are therefore those of the serial code; a fit is the same
deterministic computation in a worker as in the parent, so the results are identical.

A worker also carries back the passes its fit placed (the rows and the placement), so that
the chosen model's fit with intervals reuses them as it does without the pool.

The pool is used only where it pays: at least two configs, at least two usable cores
(`os.sched_getaffinity`), the fork start method (workers inherit the run's grids without
copying them), not inside a daemonic worker, and a run of at least MIN_SAMPLES samples of
the device (below, forking and carrying results back cost more than a fit: on a simulated
20 s run a fit takes ~0.1 s), and with one worker more than the cores the last minute's load
average leaves idle (rounded; the attributing process waits while they fit): on 2 cores the
pool is used below a load of 1.5. Measured on run11 on a 2-core machine: with the others'
load near 1, the pool took 17.0 s against 18.7 s in one process; near 2, 20.6 s against
20.9 s, its two workers taking turns on one core. `PARALLEL` forces it on or off.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from jouleprof.attribution.stages import stage
from jouleprof.cores import pool_cores
from jouleprof.errors import AttributionError

PARALLEL: bool | None = None
"""None: the pool where it pays (module docstring); True: wherever two configs and the fork
start method allow it (tests); False: never."""

SPECULATE: bool | None = None
"""None: the model choice's later fits are also started early, for every outcome the earlier
choices can have, only where idle cores run all of them at once (`speculate`); True: wherever
the pool runs (tests); False: never."""

MIN_SAMPLES = 4000
"""The device's samples below which the fits stay in this process (`PrefetchingFit.size`)."""

_JOB: PrefetchingFit | None = None
"""The fit the forked workers run (set just before the pool forks)."""


class PrefetchingFit:
    """A fit function (`regression_choice.Fit`) that hands back prefetched fits first."""

    def __init__(self, fit: Callable, passes: dict | None = None, size: int = 0):
        """`fit`: config → DeviceAttribution. `passes`: the fit's own cache of placed passes,
        keyed by the config with intervals=True (`regression._Grids.passes`), filled from the
        workers. `size`: the device's samples (whether the pool pays)."""
        self.fit, self.passes, self.size = fit, passes, size
        self.ready: dict = {}

    def __call__(self, cfg):
        if cfg in self.ready:
            ok, value = self.ready.pop(cfg)
            if not ok:
                raise value
            return value
        return self.fit(cfg)

    def _carry(self, cfg) -> tuple:
        """The fit of `cfg` in a worker: (ok, result or error, its passes or None)."""
        try:
            res = self.fit(cfg)
        except AttributionError as e:
            return False, e, None
        key = replace(cfg, intervals=True)
        return True, res, (self.passes or {}).get(key)


def workers(n_cfgs: int, size: int) -> int:
    """How many worker processes fit `n_cfgs` configs of a run of `size` samples (0: none)."""
    if PARALLEL is False or n_cfgs < 2 or "fork" not in mp.get_all_start_methods():
        return 0
    if mp.current_process().daemon:
        return 0
    if PARALLEL is None and not _fork_is_safe():
        return 0
    cores = pool_cores()
    if PARALLEL:
        return max(2, min(n_cfgs, cores))
    if size < MIN_SAMPLES:
        return 0
    n = min(n_cfgs, cores, _idle_cores(cores) + 1)  # the idle cores, and this process's
    return n if n >= 2 else 0


def _fork_is_safe() -> bool:
    """Forking copies only the calling thread: where other threads run (a user's data loader
    or sampler, torch's CUDA context after a `jouleprof.profile` loop), a lock one of them
    holds stays held in the workers. The default pool runs only where no other non-daemon
    thread is alive (a progress bar's refresh thread is a daemon, and the workers never
    render) and torch, if imported, has not started CUDA, as in `jouleprof attribute`."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon for t in threading.enumerate()):
        return False
    torch = sys.modules.get("torch")
    try:
        return not (torch is not None and torch.cuda.is_initialized())
    except Exception:  # a torch without cuda, or half-imported: do not fork
        return False


def _idle_cores(cores: int) -> int:
    """Cores left idle, rounded: on a machine whose cores are busy, workers only take turns
    with each other and what else runs. The busy cores are the last minute's load average, or
    the processes runnable right now besides this one where that is fewer (Linux's
    /proc/stat): the average still counts work that has ended, such as an attribution's own
    workers a few seconds before (on the H200's 16-core host, back-to-back attributions of
    run11 then left too few idle cores to start the fits ahead of the choices)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores - 1
    running = _runnable_now()
    if running is not None:
        load = min(load, max(running - 1, 0))
    return max(0, int(cores + 0.5 - load))


def _runnable_now() -> int | None:
    """Processes runnable now, this one included (/proc/stat's procs_running), or None."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def prefetch(fit, cfgs: Iterable) -> None:
    """Fit `cfgs` at once in worker processes where that pays (`workers`), for `fit`'s later
    calls; nothing where `fit` is not a PrefetchingFit or the pool does not pay."""
    _start(fit, cfgs, one_round=False)


def speculate(fit, cfgs: Iterable) -> bool:
    """Fit `cfgs` at once in worker processes, as `prefetch`, but only where every one of them
    gets its own worker (one round; SPECULATE True: wherever the pool runs). For fits a later
    choice may ask for whatever the earlier choices decide: the choices then take theirs as
    they come, in their own order, and the rest are discarded unused, so the result is the one
    the serial code gives. True where the fits were started."""
    if SPECULATE is False:
        return False
    return _start(fit, cfgs, one_round=not SPECULATE, label=", ahead of the choices")


def _start(fit, cfgs: Iterable, one_round: bool, label: str = "") -> bool:
    """The pool for those of `cfgs` not fitted yet, where it pays (and, `one_round`, only where
    each gets a worker of its own); True where it ran."""
    if not isinstance(fit, PrefetchingFit):
        return False
    todo = [c for c in dict.fromkeys(cfgs) if c not in fit.ready]
    n = workers(len(todo), fit.size)
    if n < 2 or (one_round and n < len(todo)):
        return False
    with stage(f"{len(todo)} fits in {n} processes{label}"):
        _fit_in_pool(fit, todo, n)
    return True


def _fit_in_pool(fit: PrefetchingFit, todo: list, n: int) -> None:
    """`prefetch`'s pool: `todo` fitted in `n` forked workers, into fit.ready."""
    global _JOB
    _JOB = fit
    try:
        try:
            pool = mp.get_context("fork").Pool(n, initializer=_one_blas_thread)
        except OSError:
            return  # no processes to be had: the fits run in this process, as without a pool
        try:
            outcomes = pool.map(_run, todo, chunksize=1)
            pool.close()
        finally:
            pool.terminate()
            pool.join()
    finally:
        _JOB = None
    for cfg, (ok, value, passes) in zip(todo, outcomes, strict=True):
        fit.ready[cfg] = (ok, value)
        if passes is not None and fit.passes is not None:
            fit.passes.setdefault(replace(cfg, intervals=True), passes)


def discard(fit) -> None:
    """Forget prefetched fits nobody asked for."""
    if isinstance(fit, PrefetchingFit):
        fit.ready.clear()


_LIMIT = None


def _one_blas_thread() -> None:
    """Worker start: BLAS on one thread (as the regression's fits are in the parent); progress
    reports stay with the parent; SIGTERM back to its default action. `Pool.terminate` ends
    the workers with SIGTERM, and a handler inherited from the parent (jouleprof's own,
    `jouleprof.interrupts`, or a framework's) kept a worker blocked on the pool's queue alive:
    the suite once hung there for 25 minutes."""
    global _LIMIT
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from threadpoolctl import threadpool_limits

    from jouleprof.attribution.stages import _progress, _times

    _LIMIT = threadpool_limits(limits=1, user_api="blas")
    _progress.set(None)
    _times.set(None)


def _run(cfg):
    assert _JOB is not None
    return _JOB._carry(cfg)


_BESIDE: Callable | None = None
"""The function `beside`'s worker runs (set just before its pool forks)."""


def _run_beside():
    assert _BESIDE is not None
    return _BESIDE()


class Beside:
    """`fn()` running in one forked worker while this process goes on; `get()` returns its
    result (or raises what it raised). Where a worker does not pay (`workers`), `get()` calls
    `fn()` here instead: the same computation either way."""

    def __init__(self, fn: Callable, size: int) -> None:
        global _BESIDE
        self._fn, self._pool, self._async = fn, None, None
        if workers(2, size) < 2:
            return
        _BESIDE = fn
        try:
            self._pool = mp.get_context("fork").Pool(1, initializer=_one_blas_thread)
            self._async = self._pool.apply_async(_run_beside)
        except OSError:
            self._pool = None  # no process to be had: get() computes it here
        finally:
            _BESIDE = None

    @property
    def runs(self) -> bool:
        """Whether `fn` runs in a worker."""
        return self._pool is not None

    def get(self):
        if self._pool is None:
            return self._fn()
        try:
            return self._async.get()
        finally:
            self._pool.close()
            self._pool.terminate()
            self._pool.join()
            self._pool = None


__all__ = [
    "Beside",
    "MIN_SAMPLES",
    "PARALLEL",
    "SPECULATE",
    "PrefetchingFit",
    "discard",
    "prefetch",
    "speculate",
    "workers",
]
