"""A replayed phase weighed together with the phase before it, kept where the replay check finds
energy they share (`attribution.shared_pairs`)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.attribution.result import PhaseResult
from jouleprof.attribution.shared_pairs import keep_shared, phases_before, with_pairs


def _spans(n_steps: int, twice: set[int]) -> pd.DataFrame:
    """gemm, copy (twice in `twice`), then outer/copy2 inside outer; 10 ms each."""
    rows, t = [], 0.0
    for s in range(n_steps):
        names = ["gemm", "copy"] + (["copy"] if s in twice else [])
        for name in names:
            rows.append({"step": s, "phase": name, "t0_s": t, "t1_s": t + 0.01})
            t += 0.01
        rows.append({"step": s, "phase": "outer", "t0_s": t, "t1_s": t + 0.02})
        rows.append({"step": s, "phase": "outer/copy2", "t0_s": t + 0.005, "t1_s": t + 0.015})
        t += 0.02
    return pd.DataFrame(rows)


def test_the_phase_before_a_replayed_one_is_its_neighbour_not_itself_nor_its_parent():
    spans = _spans(30, {3, 4, 9})
    # copy: its first run follows the GEMM (its replay, which follows itself, does not count);
    # outer/copy2 begins inside outer, after copy: outer encloses it and is not "before" it
    assert phases_before(spans, ["copy", "copy2"]) == {"copy": "gemm", "outer/copy2": "copy"}
    assert phases_before(spans, ["gemm"]) == {}  # the step's first phase: nothing before it
    assert phases_before(spans, []) == {} and phases_before(spans, ["nope"]) == {}


def test_pairs_are_asked_for_once_beside_the_users_own_groups():
    cfg = with_pairs(RegressionConfig(joint=("copy+gemm",)), {"copy": "gemm", "x": "w"})
    assert cfg.joint == ("copy+gemm", "w+x")  # the user's gemm+copy is not asked twice
    assert with_pairs(RegressionConfig(), {}).joint == ()
    assert with_pairs(None, {"copy": "gemm"}).joint == ("gemm+copy",)


def _row(name: str, note: str = "") -> PhaseResult:
    return PhaseResult(name, 1.0, 0.01, 10.0, 9.0, 11.0, 10.0, 50.0, "regression", True, note)


def _res(check: dict) -> SimpleNamespace:
    rows = [_row("gemm"), _row("copy"), _row("w"), _row("x"), _row("gemm+copy", "±10%"),
            _row("w+x", "±10%")]  # fmt: skip
    return SimpleNamespace(phases=rows, diagnostics={"replay_check": check}, notes=[])


def test_a_pair_stays_where_the_replay_check_found_shared_energy_and_says_why():
    check = {"copy": {"moved_j": 120.0, "first_run_extra_j_per_step": 2.42},
             "x": {"moved_j": 0.0, "first_run_extra_j_per_step": 0.3}}  # fmt: skip
    res = _res(check)
    assert keep_shared(res, {"copy": "gemm", "x": "w"}, asked=()) == ["gemm+copy"]
    names = [p.phase for p in res.phases]
    assert "gemm+copy" in names and "w+x" not in names  # x's check moved nothing: dropped
    note = res.phases[names.index("gemm+copy")].note
    assert "2.42 J more than its replays" in note and "shares with gemm" in note
    assert note.endswith("; ±10%")
    assert res.diagnostics["shared_pairs"]["kept"] == ["gemm+copy"]


def test_a_pair_the_user_asked_for_stays_whatever_the_check_found():
    check = {"x": {"moved_j": 0.0, "first_run_extra_j_per_step": 0.3},
             "copy": {"moved_j": 50.0, "first_run_extra_j_per_step": -1.0}}  # fmt: skip
    res = _res(check)
    # copy's first runs draw less than its replays: not energy shared with the GEMM, dropped
    assert keep_shared(res, {"copy": "gemm", "x": "w"}, asked=("w+x",)) == []
    names = [p.phase for p in res.phases]
    assert "w+x" in names and "gemm+copy" not in names
    assert res.phases[names.index("w+x")].note == "±10%"  # untouched
