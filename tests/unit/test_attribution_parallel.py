"""The model choice's independent fits in worker processes (`attribution.parallel`) give the
same attribution as in one process, bit for bit.

A simulated run with a power buffer, its phases cut into bins and the stall model left to the
choice: the pool (forced on, it is skipped on runs this small) fits the plain and the stall
model at once, the buffer windows' lengths at once, and the chosen model with its intervals
beside the bin-length check's coarser bins.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from dataclasses import asdict

import pandas as pd
import pytest
from test_attribution_buffer import PHASES, simulated_buffer

from jouleprof.attribution import attribute, parallel
from jouleprof.sensors.simulated_workload import simulate_training

_FIT_IN_POOL = parallel._fit_in_pool

pytestmark = pytest.mark.skipif(
    "fork" not in mp.get_all_start_methods(), reason="the pool needs the fork start method"
)


@pytest.fixture(scope="module")
def buffer_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("parallel_run")
    run = simulate_training(PHASES, 60, seed=3, span_noise_s=20e-6)
    run.samples_frame().to_csv(d / "samples.csv", index=False)
    pd.DataFrame([asdict(x) for x in run.spans]).to_csv(d / "spans.csv", index=False)
    simulated_buffer(run).to_csv(d / "power_buffer.csv", index=False)
    return d


def _attribute(d, monkeypatch, forced: bool, ahead: bool = False) -> tuple[dict, list[int]]:
    """The attribution's JSON with the pool forced on or off (and the fits ahead of the
    choices forced on, or off), and each pool's number of fits."""
    pools: list[int] = []

    def counted(fit, todo, n):
        pools.append(len(todo))
        _FIT_IN_POOL(fit, todo, n)

    monkeypatch.setattr(parallel, "_fit_in_pool", counted)
    monkeypatch.setattr(parallel, "PARALLEL", forced)
    monkeypatch.setattr(parallel, "SPECULATE", ahead)
    res = attribute(d, "regression", None, 0, bins=True, use_buffer=True)
    return json.loads(json.dumps(res.to_json(), default=str)), pools


def test_the_pool_gives_the_serial_result(buffer_run, monkeypatch):
    serial, none = _attribute(buffer_run, monkeypatch, False)
    pooled, pools = _attribute(buffer_run, monkeypatch, True)
    assert none == []
    # stall or plain; the three other buffer windows; the chosen model beside the check
    assert pools == [2, 3, 2]
    assert pooled == serial
    dev = pooled["devices"][0]
    assert any(p["resolved"] for p in dev["phases"])
    assert any(n.startswith("buffer window: ") for n in dev["notes"])


def test_fits_ahead_of_the_choices_give_the_serial_result(buffer_run, monkeypatch):
    serial, _ = _attribute(buffer_run, monkeypatch, False)
    ahead, pools = _attribute(buffer_run, monkeypatch, True, ahead=True)
    # both models and, for each, the three other buffer windows, in one round; the buffer
    # window's search then finds its fits ready; the chosen model beside the check
    assert pools == [8, 2]
    assert ahead == serial


def test_fits_ahead_only_where_each_has_a_core(monkeypatch):
    from dataclasses import replace

    from jouleprof.attribution.parallel import PrefetchingFit, speculate
    from jouleprof.attribution.regression_choice import _fits_ahead
    from jouleprof.attribution.regression_config import RegressionConfig

    cfg = RegressionConfig(stall_model=None, bins=None)
    binned, windows = _fits_ahead(cfg, None)
    assert [(c.bins, c.stall_model, c.intervals) for c in binned] == [
        (True, False, False),
        (True, True, False),
    ]
    n_scales = len(set(cfg.buffer_window_scales) - {1.0})
    assert len(windows) == 4 * n_scales and len(set(windows)) == len(windows)
    assert _fits_ahead(replace(cfg, use_buffer=False), None)[1] == []
    assert _fits_ahead(replace(cfg, stall_model=True), False) == (
        [],
        [c for c in windows if c.stall_model and not c.bins],
    )
    started: list[int] = []
    monkeypatch.setattr(parallel, "_fit_in_pool", lambda fit, todo, n: started.append(n))
    monkeypatch.setattr(parallel, "PARALLEL", None)
    monkeypatch.setattr(parallel, "SPECULATE", None)
    monkeypatch.setattr(parallel, "_fork_is_safe", lambda: True)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(parallel, "_runnable_now", lambda: None)
    fit = PrefetchingFit(lambda c: None, size=10 * parallel.MIN_SAMPLES)
    for cores, fits, runs in ((2, 4, False), (4, 4, True), (16, 16, True), (8, 16, False)):
        monkeypatch.setattr(
            parallel.os, "sched_getaffinity", lambda pid, k=cores: set(range(k)), raising=False
        )
        assert speculate(fit, list(range(fits))) is runs, (cores, fits)
    assert started == [4, 16]
    monkeypatch.setattr(parallel, "SPECULATE", False)
    assert speculate(fit, list(range(4))) is False


def test_the_pool_is_skipped_where_it_does_not_pay(monkeypatch):
    monkeypatch.setattr(parallel, "PARALLEL", None)
    monkeypatch.setattr(parallel, "_runnable_now", lambda: None)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # one core busy
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert parallel.workers(3, 10 * parallel.MIN_SAMPLES) == 2
    assert parallel.workers(3, parallel.MIN_SAMPLES - 1) == 0  # a small run
    assert parallel.workers(1, 10 * parallel.MIN_SAMPLES) == 0  # one fit
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (2.2, 2.0, 2.0))  # both cores busy
    assert parallel.workers(3, 10 * parallel.MIN_SAMPLES) == 0
    monkeypatch.setattr(parallel, "PARALLEL", False)
    assert parallel.workers(3, 10 * parallel.MIN_SAMPLES) == 0
    monkeypatch.setattr(parallel, "PARALLEL", True)
    assert parallel.workers(3, 10) >= 2


def test_idle_cores_count_what_runs_now_where_the_average_still_counts_ended_work(monkeypatch):
    # The load average trails: back-to-back attributions leave it high while nothing else
    # runs. The cores counted busy are the fewer of the average and what is runnable now
    # besides this process; a machine busy now stays busy.
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (2.2, 2.0, 2.0))
    monkeypatch.setattr(parallel, "_runnable_now", lambda: 1)  # this process alone
    assert parallel._idle_cores(2) == 2
    assert parallel._idle_cores(16) == 16
    monkeypatch.setattr(parallel, "_runnable_now", lambda: 3)  # two others run now
    assert parallel._idle_cores(2) == 0
    assert parallel._idle_cores(16) == 14
    monkeypatch.setattr(parallel, "_runnable_now", lambda: 9)  # the average is the fewer
    assert parallel._idle_cores(16) == 14
    monkeypatch.setattr(parallel, "_runnable_now", lambda: None)  # no /proc/stat
    assert parallel._idle_cores(16) == 14
    got = parallel._runnable_now()
    assert got is None or got >= 1  # where Linux answers, at least this process runs


def test_the_default_pool_does_not_fork_beside_other_threads_or_cuda(monkeypatch):
    import threading
    import types

    from jouleprof.attribution import parallel

    torch = __import__("sys").modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    assert parallel._fork_is_safe() is not cuda_started  # pytest's process: one thread
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)  # a user's non-daemon thread (a data loader, say)
    t.start()
    try:
        assert not parallel._fork_is_safe()
        monkeypatch.setattr(parallel, "PARALLEL", None)
        assert parallel.workers(4, 10**6) == 0
    finally:
        stop.set()
        t.join()
    fake_cuda = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    assert not parallel._fork_is_safe()


def test_grids_fitted_beside_the_power_grid_are_the_serial_ones(monkeypatch):
    # The counter's grid and the power grid's pieces fitted in a worker while the parent fits
    # the power grid (`regression._device_grids`, `parallel.Beside`): the same grids, notes and
    # pieces as fitted one after the other, on a 240 s run whose power grid needs pieces.
    from test_refresh import _power_reads

    from jouleprof.attribution.grid import with_power_pieces
    from jouleprof.attribution.regression import _device_grids
    from jouleprof.attribution.regression_config import RegressionConfig

    df = _power_reads(0.10030)
    cfg = RegressionConfig()
    got = {}
    for forced in (False, True):
        monkeypatch.setattr(parallel, "PARALLEL", forced)
        grids, notes, fitted = _device_grids(df, df, cfg)
        assert (fitted is not False) == forced  # the pieces fitted ahead only in the worker
        got[forced] = (grids, with_power_pieces(df, grids, notes, cfg.power_piece_s, fitted))
    assert got[True] == got[False]
    assert got[True][1][2] is not None and len(got[True][1][2]) == 4  # the pieces were used
