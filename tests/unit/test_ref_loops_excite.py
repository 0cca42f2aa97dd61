"""Excited reference loops `<loop>_excite` (benchmarks/ref_loops.py): the framework loops get
their excitation gaps through jouleprof's Lightning and Trainer callbacks (the callbacks
themselves: tests/unit/test_integrations.py), a loop that records
no gap fails, the budget holds several excited loops, and the evaluation finds an excited
loop's references (its own, or its base loop's) or says which are missing."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from jouleprof.timeline.excite import GAP_PHASE, ExciteConfig

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _mod(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def _fine_gaps(run_dir: Path) -> tuple[pd.DataFrame, dict]:
    spans = pd.read_csv(run_dir / "fine" / "spans.csv")
    return spans, json.loads((run_dir / "fine" / "run.json").read_text())["extra"]["excite"]


@pytest.mark.parametrize("loop", ["pl_resnet50", "hf_bert"])
def test_an_excited_framework_loop_records_gaps_between_backward_and_optimizer(
    tmp_path, monkeypatch, loop
):
    """pl_resnet50_excite / hf_bert_excite (smoke, fine run only): the fine run through the
    framework's trainer and jouleprof's callback has excitation gaps, some right before the
    optimizer (what separates the backward from the optimizer step that always follows it)."""
    pytest.importorskip("timm" if loop == "pl_resnet50" else "accelerate")
    if loop == "pl_resnet50":
        pytest.importorskip("lightning.pytorch")
    rl = _mod("ref_loops")
    # Every step of the window excited: a few steps of a slow smoke loop are enough.
    cfg = ExciteConfig(fraction=1.0, window_s=100.0, max_gap_s=2e-3, gap="sync")
    monkeypatch.setattr(rl, "excite_config", lambda fine_s: cfg)
    name = f"{loop}_excite"
    row = rl.run_loop(name, tmp_path, 0.5, 0.3, True, "cpu", references=False)
    assert row["n_steps"] >= 5 and row["n_windows"] == 0
    spans, info = _fine_gaps(tmp_path)
    assert info["n_gaps"] == (spans["phase"] == GAP_PHASE).sum() > 0
    before = {}
    for _, s in spans.sort_values("t0_s").groupby("step"):
        names = list(s["phase"])
        for a, b in zip(names, names[1:], strict=False):
            if a == GAP_PHASE:
                before[b] = before.get(b, 0) + 1
    assert before.get("optimizer", 0) > 0 and before.get("backward", 0) > 0, before
    assert not (tmp_path / "ref").exists()


def test_an_excited_loop_that_records_no_gap_is_an_error_row(tmp_path, monkeypatch):
    """A loop whose phases never reach the recorder's begin_phase after a step's first phase
    (here: one phase a step) cannot be excited: its `_excite` row is an error, not a plain
    run under an excited name."""
    rl = _mod("ref_loops")
    defs = _mod("ref_loops_defs")

    class OnePhase(defs.Loop):
        name = "onephase"

        def cycle(self):
            return [[("only", lambda again: time.sleep(1e-3))]]

    monkeypatch.setitem(rl.LOOPS, "onephase", OnePhase)
    out = tmp_path / "res"
    assert rl.main(["--out", str(out), "--smoke", "--loops", "onephase_excite"]) == 0
    row = pd.read_csv(out / "loops.csv").iloc[0]
    assert row["status"] == "error" and "no excitation gap" in row["error"]


def test_the_budget_gives_each_excited_loop_its_excite_s():
    rl = _mod("ref_loops")
    args = SimpleNamespace(ref_s=2.0, smoke=False, excite_s=60.0, fine_s=60.0, min_fine_s=20.0)
    names = ["pl_resnet50_excite", "user4_excite", "vit_accum", "infer_mixed"]
    refs = {n: not rl.is_excited(n) or rl.base_of(n) not in names for n in names}
    assert all(refs.values())  # no base loop in the call: each makes its own references
    reserve = sum(rl._reserve_s(n, 2.0, False, refs[n]) for n in names)
    assert rl._budget_fine_s(names, 0, reserve + 240, args, refs) == 60.0
    # Short of budget: the later excited loop keeps its 60 s, the plain ones their minimum.
    got = rl._budget_fine_s(names, 0, reserve + 150, args, refs)
    assert got == pytest.approx(150 - 60 - 2 * 20)
    # The plain loops share what the excited one after them leaves.
    mixed = ["vit_accum", "infer_mixed", "user4_excite"]
    refs = {n: True for n in mixed}
    reserve = sum(rl._reserve_s(n, 2.0, False, True) for n in mixed)
    assert rl._budget_fine_s(mixed, 0, reserve + 100, args, refs) == pytest.approx(20.0)
    # An excited loop whose base runs in the call makes no references and reserves less.
    assert rl._reserve_s("user4_excite", 2.0, False, False) < rl._reserve_s("user4", 2.0, False)
    with pytest.raises(SystemExit):
        rl.main(["--out", "/nonexistent", "--smoke", "--loops", "nosuch_excite"])


def test_the_evaluation_finds_an_excited_loops_references_or_says_which_are_missing(tmp_path):
    ev = _mod("ref_loops_eval")
    loops = tmp_path / "loops"
    (loops / "user4" / "ref").mkdir(parents=True)
    (loops / "user4_excite" / "fine").mkdir(parents=True)
    (loops / "pl_resnet50_excite" / "fine").mkdir(parents=True)
    (loops / "vit_accum_excite" / "ref").mkdir(parents=True)
    assert ev.reference_dir(loops, "user4_excite") == loops / "user4" / "ref"
    assert ev.reference_dir(loops, "vit_accum_excite") == loops / "vit_accum_excite" / "ref"
    with pytest.raises(FileNotFoundError, match="base loop pl_resnet50 has no pl_resnet50/ref"):
        ev.reference_dir(loops, "pl_resnet50_excite")
    with pytest.raises(FileNotFoundError, match="no references: hf_bert"):
        ev.reference_dir(loops, "hf_bert")
    # In the evaluation it is the loop's target row, and the other loops are evaluated.
    _, targets, _ = ev.evaluate(tmp_path, {}, 5.0)
    by = {t["loop"]: t for t in targets}
    assert not by["pl_resnet50_excite"]["met"]
    assert "no references for the excited loop" in by["pl_resnet50_excite"]["fails"]
