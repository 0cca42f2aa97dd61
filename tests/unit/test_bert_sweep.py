"""benchmarks/bert_sweep.py: the plan resumes a committed sweep (ids stable) and runs every
configuration once, in the priority order."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "benchmarks" / "results" / "bert_sweep"


def _sweep_module():
    spec = importlib.util.spec_from_file_location(
        "bert_sweep", ROOT / "benchmarks" / "bert_sweep.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_ids_stay_in_the_plan():
    """A resumed call skips exactly what results.csv holds: every committed id is a plan id with
    the same configuration (an id renamed by a plan edit would be measured twice)."""
    mod = _sweep_module()
    plan = {r["id"]: r for r in mod.plan()}
    with (SWEEP / "results.csv").open() as f:
        committed = list(csv.DictReader(f))
    assert committed
    for r in committed:
        assert r["id"] in plan, r["id"]
        p = plan[r["id"]]
        for k in (*mod.FIELDS, "strategy"):
            assert str(p[k]) == r[k], (r["id"], k)


def test_run_order_is_a_permutation_led_by_run_first():
    mod = _sweep_module()
    rows = mod.plan()
    ordered = mod.run_order(rows)
    assert sorted(r["id"] for r in ordered) == sorted(r["id"] for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    assert [r["order"] for r in ordered[: len(mod.RUN_FIRST)]] == list(mod.RUN_FIRST)
    biggest = max(r["layers"] * r["hidden"] ** 2 for r in rows)
    # the largest model appears only as held-out or repeated rows, never in a fitting role
    for r in rows:
        if r["layers"] * r["hidden"] ** 2 == biggest:
            assert r["role"] in ("holdout", "repeat"), r["id"]


def test_predict_pending_covers_exactly_what_is_not_measured(tmp_path):
    mod = _sweep_module()
    committed = (SWEEP / "results.csv").read_text().splitlines()
    (tmp_path / "results.csv").write_text("\n".join(committed[:4]) + "\n")  # 3 rows measured
    assert mod.main(["--out", str(tmp_path), "--predict-pending"]) == 0
    with (tmp_path / "predictions_pending.csv").open() as f:
        rows = list(csv.DictReader(f))
    measured = {line.split(",")[0] for line in committed[1:4]}
    assert {r["id"] for r in rows} == {r["id"] for r in mod.plan()} - measured
    for r in rows:
        lo, mid, hi = (float(r[k]) for k in ("j_per_step_lo", "j_per_step", "j_per_step_hi"))
        assert 0 < lo < mid < hi and float(r["s_per_step"]) > 0
