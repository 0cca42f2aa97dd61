"""The isolation runner's windows on CPU, in virtual time."""

from __future__ import annotations

import pytest

from jouleprof.bench.isolation import (
    ISOLATION_CSV,
    IsolationConfig,
    IsolationWindow,
    read_isolation_windows,
    run_isolation,
)
from jouleprof.clock import ManualClock


def test_windows_cover_each_replay_alone(tmp_path):
    clock = ManualClock()
    calls = {"forward": 0, "optimizer": 0}

    def replay(name, dt):
        def fn():
            calls[name] += 1
            clock.advance_s(dt)

        return fn

    syncs = []
    cfg = IsolationConfig(duration_s=1.0, warmup_s=0.0, gap_s=0.5)
    windows = run_isolation(
        {"forward": replay("forward", 0.01), "optimizer": replay("optimizer", 0.3)},
        clock,
        out_dir=tmp_path,
        config=cfg,
        synchronize=lambda: syncs.append(clock.now_s()),
    )
    fwd, opt = windows
    assert fwd.replay == "forward" and fwd.n_calls == 100
    assert fwd.duration_s == pytest.approx(1.0) and fwd.time_per_call_s == pytest.approx(0.01)
    assert opt.n_calls == 4 and opt.time_per_call_s == pytest.approx(0.3)
    assert opt.t0_s >= fwd.t1_s + 0.5  # the gap
    assert len(syncs) == 6  # after the first call, after warm-up, at the window's end
    back = read_isolation_windows(tmp_path)
    assert back == windows
    header = (tmp_path / ISOLATION_CSV).read_text().splitlines()[0]
    assert header == "replay,n_calls,t0_s,t1_s,time_per_call_s"


def test_min_calls_and_bad_input(tmp_path):
    clock = ManualClock()
    (w,) = run_isolation(
        {"slow": lambda: clock.advance_s(5.0)},
        clock,
        config=IsolationConfig(duration_s=1.0, warmup_s=0.0, min_calls=3),
    )
    assert w.n_calls == 3
    with pytest.raises(ValueError, match="at least one replay"):
        run_isolation({}, clock)
    with pytest.raises(ValueError, match="duration_s"):
        IsolationConfig(duration_s=0)
    with pytest.raises(ValueError, match="bad times"):
        IsolationWindow("x", 1, 2.0, 1.0)
    with pytest.raises(ValueError, match="does not exist"):
        read_isolation_windows(tmp_path)
    (tmp_path / ISOLATION_CSV).write_text("replay,n_calls\nx,1\n")
    with pytest.raises(ValueError, match="lacks the columns"):
        read_isolation_windows(tmp_path)


def test_repeats_interleave_the_replays_and_the_reference_averages_them(tmp_path):
    from jouleprof.attribution.isolation import IsolationResult, per_call_energies

    clock = ManualClock()
    cfg = IsolationConfig(duration_s=1.0, warmup_s=0.0, gap_s=0.0, repeats=2)
    windows = run_isolation(
        {"forward": lambda: clock.advance_s(0.1), "optimizer": lambda: clock.advance_s(0.01)},
        clock,
        out_dir=tmp_path,
        config=cfg,
    )
    assert [w.replay for w in windows] == ["forward", "optimizer", "forward", "optimizer"]
    assert read_isolation_windows(tmp_path) == windows
    # Two loops of one replay drawing 100 and 110 J a call: the reference is their mean.
    loops = [
        IsolationResult("forward", 10, 1.0, 1000.0, 990.0, 1010.0),
        IsolationResult("forward", 10, 1.0, 1100.0, 1090.0, 1110.0),
    ]
    assert per_call_energies(loops)["forward"].energy_j == pytest.approx(105.0)
    with pytest.raises(ValueError, match="repeats"):
        IsolationConfig(repeats=0)
