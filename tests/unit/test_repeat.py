"""Phase repetition (`timeline.repeat`, `PhaseRecorder.replay`, `profile(repeat=...)`) and the
regression's rule for it (`attribution.repeat_rule`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import pandas as pd
import pytest

import jouleprof
from jouleprof.attribution.repeat_rule import (
    MIN_REPEATED_STEPS,
    fit_with_rule,
    fits_with_rule,
    repeated_steps,
    repetition,
    replayed_phases,
    window_identified,
)
from jouleprof.clock import ManualClock
from jouleprof.timeline.recorder import PhaseRecorder
from jouleprof.timeline.repeat import RepeatConfig, repeat_config
from jouleprof.types import RunRecord


@pytest.mark.parametrize(
    ("kw", "word"), [({"fraction": 0.0}, "fraction"), ({"fraction": 1.5}, "fraction"),
                     ({"window_s": 0.0}, "window_s")],
)  # fmt: skip
def test_bad_config_names_the_field(kw, word):
    with pytest.raises(ValueError, match=word):
        RepeatConfig(**kw)


def test_repeat_argument_forms():
    assert repeat_config(None) is None and repeat_config(False) is None
    assert repeat_config(True) == RepeatConfig()
    cfg = RepeatConfig(fraction=0.1)
    assert repeat_config(cfg) is cfg
    with pytest.raises(ValueError, match="RepeatConfig"):
        repeat_config("often")


def _loop(rec, clock, n_steps, calls):
    """n steps of a replayable 10 ms copy then a 20 ms gemm (host clock)."""

    def copy(tag):
        calls.append((rec_step[0], tag))
        clock.advance_s(0.010)
        return len(calls)

    rec_step = [None]
    results = []
    for _ in range(n_steps):
        with rec.step() as step:
            rec_step[0] = step
            results.append(rec.replay("copy", copy, "x"))
            with rec.phase("gemm"):
                clock.advance_s(0.020)
    rec.close()
    return results


def test_replay_runs_once_without_a_config():
    clock = ManualClock()
    record = RunRecord(run_id="r", kind="test")
    rec = PhaseRecorder(clock, device="cpu", record=record)
    calls: list = []
    results = _loop(rec, clock, 10, calls)
    assert [s for s, _ in calls] == list(range(10)) and calls[0][1] == "x"
    assert results == list(range(1, 11))  # fn's result comes back
    spans = pd.DataFrame([asdict(s) for s in rec.sink.spans])
    assert (spans.groupby(["step", "phase"]).size() == 1).all()
    assert "repeat" not in record.extra and rec.repeater is None


def test_replay_runs_twice_in_drawn_window_steps_only_and_is_recorded():
    clock = ManualClock()
    record = RunRecord(run_id="r", kind="test")
    cfg = RepeatConfig(fraction=0.5, window_s=1.0, seed=3)
    rec = PhaseRecorder(clock, device="cpu", record=record, repeat=cfg)
    calls: list = []
    results = _loop(rec, clock, 100, calls)
    spans = pd.DataFrame([asdict(s) for s in rec.sink.spans])
    per_step = spans.groupby(["step", "phase"]).size().unstack(fill_value=0)
    twice = sorted(per_step.index[per_step["copy"] == 2])
    assert (per_step["gemm"] == 1).all() and per_step["copy"].isin([1, 2]).all()
    # Some but not all of the ~1 s window's steps (30-40 ms each) repeat; none after it.
    t0_of = spans.groupby("step")["t0_s"].min()
    window = [s for s in per_step.index if t0_of[s] - t0_of.min() < 1.0]
    assert 0 < len(twice) < len(window) and set(twice) <= set(window)
    got = record.extra["repeat"]
    assert got["phases"] == ["copy"] and got["repeated_steps"] == twice
    assert got["n_repeated_steps"] == len(twice) and got["repeats_per_phase"] == {
        "copy": len(twice)
    }
    assert got["n_window_steps"] == len(window) and got["config"]["fraction"] == 0.5
    # The second call's result is the one returned.
    prev = [0, *results[:-1]]
    assert [r - q for r, q in zip(results, prev, strict=True)] == [
        2 if s in twice else 1 for s in range(100)
    ]


def test_replay_outside_a_step_runs_once():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu", repeat=RepeatConfig(fraction=1.0))
    n = []
    rec.replay("data", lambda: n.append(1))
    with rec.step():
        rec.replay("copy", lambda: n.append(2))
    rec.close()
    assert n == [1, 2, 2]


def test_replay_of_something_not_callable_says_what_to_pass_and_records_nothing():
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu")
    with rec.step(), pytest.raises(TypeError, match=r"replay\('copy', fn, \.\.\.\): fn must"):
        rec.replay("copy", 5)
    rec.close()
    assert not [s for s in rec.sink.spans if s.phase == "copy"]


def test_profile_takes_repeat_and_refuses_a_bad_value(tmp_path):
    out = tmp_path / "rep"
    cfg = jouleprof.RepeatConfig(fraction=1.0, window_s=60.0)
    with jouleprof.profile(out, report=False, attribute=False, repeat=cfg) as prof:
        for _ in range(4):
            with prof.step():
                prof.replay("copy", lambda: None)
                with prof.phase("gemm"):
                    pass
    rec = json.loads((out / "run.json").read_text())
    assert rec["config"]["profile"]["repeat"] is True
    assert rec["extra"]["repeat"]["n_repeated_steps"] == 4
    spans = pd.read_csv(out / "spans.csv")
    assert (spans[spans["phase"] == "copy"].groupby("step").size() == 2).all()
    with pytest.raises(ValueError, match="repeat"):
        jouleprof.profile(tmp_path / "bad", repeat="yes")


def _spans(n_steps, twice_in):
    rows = []
    t = 0.0
    for s in range(n_steps):
        for name in ["copy"] * (2 if s in twice_in else 1) + ["gemm", "outer/copy"]:
            rows.append({"step": s, "phase": name, "t0_s": t, "t1_s": t + 0.01})
            t += 0.01
    return pd.DataFrame(rows)


def test_repeated_steps_counts_steps_with_a_replayed_phase_twice():
    spans = _spans(50, {3, 7, 40})
    assert repeated_steps(spans, ["copy"], range(50)) == [3, 7, 40]
    assert repeated_steps(spans, ["copy"], range(5, 50)) == [7, 40]  # analysed steps only
    assert repeated_steps(spans, ["gemm"], range(50)) == []
    assert repeated_steps(spans, [], range(50)) == []
    assert replayed_phases({"repeat": {"phases": ["copy"]}}) == ("copy",)
    assert replayed_phases({}) == () and replayed_phases(None) == ()


class _Fit:
    """A stand-in for the regression: records each call's (use_buffer, buffer) and returns a
    result whose buffer-window choice has the given neighbour weights."""

    def __init__(self, weights):
        self.calls = []
        self.weights = weights

    def __call__(self, cfg, buffer):
        self.calls.append((cfg.use_buffer, buffer is not None))
        diag = (
            {"buffer_window_choice": {"neighbour_weight": self.weights}}
            if buffer is not None
            else {}
        )
        return SimpleNamespace(notes=[], diagnostics=diag, phases=[])


def test_the_rule_leaves_buffer_rows_out_where_repeated_and_the_window_unidentified():
    from jouleprof.attribution.regression import RegressionConfig

    extra = {"repeat": {"phases": ["copy"]}}
    many = _spans(100, set(range(0, 100, 4)))  # 25 repeated steps
    few = _spans(100, set(range(0, 4 * (MIN_REPEATED_STEPS - 1), 4)))
    cfg, buf = RegressionConfig(), object()
    assert repetition(extra, many, range(100)) == "copy in 25 analysed steps"
    assert repetition(extra, few, range(100)) is None and repetition({}, many, range(100)) is None

    flat = _Fit({"0.05": 1.0, "0.075": 1.0})  # the H200's case: neighbours not rejected
    res, _ = fits_with_rule(flat, cfg, buf, repetition(extra, many, range(100)))
    assert flat.calls == [(None, True), (False, False)]
    assert "left out, because the run repeated copy in 25 analysed steps" in res.notes[0]
    assert res.diagnostics["buffer_rows_left_out"] == res.notes[0]

    sharp = _Fit({"0.05": 0.3, "0.075": 0.5})  # both neighbours rejected: identified
    res, _ = fits_with_rule(sharp, cfg, buf, repetition(extra, many, range(100)))
    assert sharp.calls == [(None, True)] and "kept although" in res.notes[0]

    for args in ((cfg, buf, extra, few), (cfg, buf, {}, many), (cfg, None, extra, many),
                 (RegressionConfig(use_buffer=True), buf, extra, many)):  # fmt: skip
        f = _Fit({"0.05": 1.0})
        res, _ = fits_with_rule(f, args[0], args[1], repetition(args[2], args[3], range(100)))
        assert len(f.calls) == 1 and not res.notes, args[1:]
    assert window_identified(SimpleNamespace(diagnostics={})) is False


def test_two_replayable_phases_are_drawn_apart():
    """Each replayable phase of a window step is drawn on its own: steps where one runs twice
    and the other once exist both ways (doubling them always together would identify only
    their sum)."""
    clock = ManualClock()
    rec = PhaseRecorder(clock, device="cpu", repeat=RepeatConfig(fraction=0.5, window_s=60.0))
    for _ in range(200):
        with rec.step():
            rec.replay("a", clock.advance_s, 0.001)
            rec.replay("b", clock.advance_s, 0.002)
    rec.close()
    spans = pd.DataFrame([asdict(s) for s in rec.sink.spans])
    n = spans.groupby(["step", "phase"]).size().unstack(fill_value=0)
    only_a = ((n["a"] == 2) & (n["b"] == 1)).sum()
    only_b = ((n["a"] == 1) & (n["b"] == 2)).sum()
    both = ((n["a"] == 2) & (n["b"] == 2)).sum()
    assert only_a > 20 and only_b > 20 and both > 20
    extra = {k: int(n[k].sum() - 200) for k in ("a", "b")}
    assert rec.repeater.to_json()["repeats_per_phase"] == extra


def test_a_null_recorder_runs_a_replayed_phase_once():
    from jouleprof.timeline.markers import NullRecorder

    calls = []
    rec = NullRecorder()
    with rec.step():
        assert rec.replay("copy", lambda x: calls.append(x) or x, 3) == 3
    assert calls == [3]


def test_replay_check_names_each_steps_later_runs_of_a_replayed_phase_apart():
    import pandas as pd

    from jouleprof.attribution.repeat_check import relabel_replays

    spans = pd.DataFrame({
        "step": [0, 0, 0, 0, 1, 1],
        "phase": ["fwd/augment", "fwd/augment", "copy", "copy", "fwd/augment", "copy"],
        "t0_s": range(6), "t1_s": range(1, 7),
    })  # fmt: skip
    out = relabel_replays(spans, ["augment"])
    assert list(out["phase"]) == ["fwd/augment", "fwd/augment#2", "copy", "copy",
                                  "fwd/augment", "copy"]  # fmt: skip
    assert list(relabel_replays(spans, [])["phase"]) == list(spans["phase"])
    assert "copy#2" not in set(spans["phase"])  # the input is left as it was


def _phase(name, power_w, hw_w, time_s=1.0):
    from jouleprof.attribution.result import PhaseResult

    e = power_w * time_s
    return PhaseResult(name, time_s, time_s / 10, e, e - hw_w * time_s, e + hw_w * time_s,
                       power_w, None, "regression", True, "10 sensor intervals; ±5%")  # fmt: skip


def _device(*phases):
    from jouleprof.attribution.result import DeviceAttribution

    return DeviceAttribution("gpu0", "regression", list(phases), 10, 0, 0.2, 1000.0)


def test_replay_check_widens_where_the_first_runs_differ_beyond_their_own_halfwidth():
    from jouleprof.attribution.repeat_check import check_replays

    # first runs at 130 ± 10 W against one power of 100 W: widened by 30 J in quadrature
    res = _device(_phase("copy", 100.0, 5.0), _phase("gemm", 800.0, 20.0))
    split = _device(_phase("copy", 130.0, 10.0), _phase("copy#2", 90.0, 5.0))
    found = check_replays(res, split, ["copy"])
    copy = res.phase("copy")
    assert found["copy"]["moved_j"] == pytest.approx(30.0)
    assert copy.energy_j == pytest.approx(100.0)  # the estimate stays
    assert copy.energy_hi_j - copy.energy_j == pytest.approx((5.0**2 + 30.0**2) ** 0.5)
    assert res.phase("gemm").energy_hi_j == pytest.approx(820.0)  # not replayed: untouched
    assert any("130 W in its first run" in n and "90 W in its replays" in n for n in res.notes)
    # (130 − 90) W × the first runs' 0.1 s a step: 4 J a step shared with the phase before
    assert found["copy"]["first_run_extra_j_per_step"] == pytest.approx(4.0)
    assert any("4 J a step more than at its replays' power" in n for n in res.notes)
    # within the first runs' own half-width: a note, nothing widened
    res = _device(_phase("copy", 100.0, 5.0))
    split = _device(_phase("copy", 108.0, 10.0), _phase("copy#2", 95.0, 5.0))
    assert check_replays(res, split, ["copy"])["copy"]["moved_j"] == 0.0
    assert res.phase("copy").energy_hi_j == pytest.approx(105.0)
    assert any("not widened" in n for n in res.notes)


def test_where_the_fits_with_and_without_buffer_rows_disagree_the_interval_spans_both():
    from jouleprof.attribution.repeat_rule import span_both_fits

    # without the buffer rows: encoder 100 J ± 10; with them 130 J [120, 140], outside
    res = _device(_phase("encoder", 100.0, 10.0), _phase("embed", 50.0, 5.0))
    other = _device(_phase("encoder", 130.0, 10.0), _phase("embed", 52.0, 6.0))
    found = span_both_fits(res, other)
    enc, emb = res.phase("encoder"), res.phase("embed")
    assert enc.energy_j == pytest.approx(100.0)  # the estimate stays the rule's
    assert (enc.energy_lo_j, enc.energy_hi_j) == pytest.approx((90.0, 140.0))
    assert found["encoder"]["spanned"] and not found["embed"]["spanned"]
    assert (emb.energy_lo_j, emb.energy_hi_j) == pytest.approx((45.0, 55.0))  # 52 inside
    assert any("encoder 130 J [120, 140] against 100 J" in n for n in res.notes)
    assert "the buffer's rows move it 30.0%" in enc.note
    # a span wider than the estimate: unresolved, saying why
    res = _device(_phase("copy", 10.0, 1.0))
    span_both_fits(res, _device(_phase("copy", 18.0, 2.0)))
    assert not res.phase("copy").resolved and "wider than the estimate" in res.phase("copy").note
    # both agree: a note, nothing moved
    res = _device(_phase("copy", 10.0, 1.0))
    span_both_fits(res, _device(_phase("copy", 10.5, 3.0)))
    assert res.phase("copy").energy_hi_j == pytest.approx(11.0)
    assert "every phase inside" in res.notes[-1]
    # a whole run's joules: no exponent in the note
    res = _device(_phase("gemm", 26980.0, 100.0))
    span_both_fits(res, _device(_phase("gemm", 28490.0, 1000.0)))
    assert "gemm 28490 J [27490, 29490] against 26980 J" in res.notes[-1]


def test_the_rule_spans_both_fits_where_it_leaves_the_buffer_rows_out():
    from jouleprof.attribution.regression import RegressionConfig

    def fit(cfg, buffer):
        if buffer is not None:  # with the buffer rows: the window not identified, 130 J
            res = _device(_phase("copy", 130.0, 10.0))
            res.diagnostics["buffer_window_choice"] = {"neighbour_weight": {"0.05": 1.0}}
            return res
        return _device(_phase("copy", 100.0, 10.0))

    relabelled = []

    def fit_relabelled(spans, cfg, buffer):  # the replay check's fit, as the chosen one
        relabelled.append((set(spans["phase"]), cfg.use_buffer, buffer))
        return _device(_phase("copy", 100.0, 10.0), _phase("copy#2", 100.0, 10.0))

    many = _spans(100, set(range(0, 100, 4)))
    res = fit_with_rule(fit, fit_relabelled, RegressionConfig(), object(),
                        {"repeat": {"phases": ["copy"]}}, many, range(100))  # fmt: skip
    copy = res.phase("copy")
    # the replay check ran first, without the buffer rows as the chosen fit, and moved nothing
    assert relabelled == [({"copy", "copy#2", "gemm", "outer/copy"}, False, None)]
    assert "replay_check" in res.diagnostics
    assert "buffer_rows_left_out" in res.diagnostics
    assert (copy.energy_j, copy.energy_lo_j, copy.energy_hi_j) == pytest.approx((100, 90, 140))
    assert res.diagnostics["buffer_rows_check"]["copy"]["spanned"]


def test_what_repetition_cost_is_counted_on_the_drawn_steps_and_said_in_one_line():
    from types import SimpleNamespace

    from jouleprof.attribution.excitation import cost_note, overhead

    spans = _spans(50, {3, 7, 40})
    power = {"copy": 400.0, "gemm": 800.0}
    res = SimpleNamespace(warmup_steps=0, n_steps=50, phases=[],
                          diagnostics={"fitted_power_w": power})  # fmt: skip
    cost = overhead(spans, res, set(repeated_steps(spans, ["copy"], range(50))))
    assert (cost["n_excited"], cost["n_plain"]) == (3, 47)
    # each drawn step runs one more 10 ms copy at 400 W: +10 ms (+33 %), +4 J on 12 J
    assert cost["step_ms_excited"] - cost["step_ms_plain"] == pytest.approx(10.0)
    assert cost["step_j_excited"] - cost["step_j_plain"] == pytest.approx(4.0)
    assert cost["run_time_overhead_pct"] == pytest.approx(100 * 3 / 50 * 10 / 30)
    line = cost_note(cost, "repeating copy")
    # every step alike here: the difference is known exactly (±0.00)
    assert line.startswith(
        "repeating copy cost: 3 of 50 analysed steps drawn, each +10.00 ±0.00 ms"
    )
    assert "+33.3 %" in line and "+2.00 % time" in line
    assert cost_note(overhead(spans, res, set()), "repeating copy") is None  # none drawn
