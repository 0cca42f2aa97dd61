"""benchmarks/ref_loops.py (the reference-loop GPU script) in its CPU smoke mode, its
references on the simulated GPU (ref_loops_refs.py, ref_loops_sim.py) and the evaluation's
target check (ref_loops_eval.py)."""

from __future__ import annotations

import importlib
import json
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _mod(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_smoke_run_packs_a_loop_and_the_evaluation_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("JP_COMMIT", "abc123")
    rl = _mod("ref_loops")
    out = tmp_path / "res"
    assert rl.main(["--out", str(out), "--smoke", "--loops", "user4", "--pack"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["git_commit"] == "abc123" and meta["device"] == "cpu"
    assert "--smoke" in meta["command"] and meta["date_utc"] and meta["torch"]
    rows = pd.read_csv(out / "loops.csv")
    assert list(rows["status"]) == ["ok"] and rows["n_steps"].iloc[0] > 0
    assert not (out / "loops").exists() or not any((out / "loops").iterdir())
    with tarfile.open(out / "user4.tar.gz") as tar:
        names = tar.getnames()
    assert "loops/user4/fine/spans.csv" in names and "loops/user4/ref/ref_windows.csv" in names

    ev = _mod("ref_loops_eval")
    assert ev.main([str(out), "--out", str(tmp_path / "ev")]) == 0
    table = pd.read_csv(tmp_path / "ev" / "ref_loops_eval.csv")
    assert set(table["method"]) == {"regression", "proportional"}
    assert {"gemm", "copy", "spin", "tiny"} <= set(table["phase"])
    wins = pd.read_csv(tmp_path / "ev" / "unpacked" / "loops/user4/ref/ref_windows.csv")
    assert list(wins["kind"]).count("plain") == 2 and (wins["kind"] == "idle").sum() == 1
    for kind in ("alone", "added"):
        assert set(wins.loc[wins["kind"] == kind, "phase"]) == {"gemm", "copy", "spin", "tiny"}
    # user4's phases can each be left out, and its GEMM and copy together
    assert set(wins.loc[wins["kind"] == "removed", "phase"]) == {
        "gemm", "copy", "spin", "tiny", "gemm+copy"}  # fmt: skip
    assert table["ref_removed_j"].notna().any()
    # the pair the reference run left out is weighed together, priced by that window
    pair = table[(table["method"] == "regression") & (table["phase"] == "gemm+copy")]
    assert len(pair) == 1 and pair["ref_removed_j"].notna().all()
    assert (tmp_path / "ev" / "ref_loops_eval.md").read_text().count("| user4 |") >= 8


def test_infer_mixed_is_also_run_without_its_loss_and_its_logging(tmp_path):
    rl = _mod("ref_loops")
    out = tmp_path / "res"
    args = ["--out", str(out), "--smoke", "--loops", "infer_mixed", "--fine-s", "2"]
    assert rl.main(args) == 0
    wins = pd.read_csv(out / "loops" / "infer_mixed" / "ref" / "ref_windows.csv")
    assert set(wins.loc[wins["kind"] == "removed", "phase"]) == {"loss_fp32", "log"}
    assert (wins.loc[wins["kind"] == "removed", "n"] > 0).all()


def test_a_loop_that_fails_is_a_row_and_the_next_one_runs(tmp_path, monkeypatch):
    rl = _mod("ref_loops")
    defs = _mod("ref_loops_defs")

    class Boom(defs.Loop):
        name = "boom"

        def build(self):
            raise RuntimeError("out of memory (on purpose)")

    class Tiny(defs.Loop):
        name = "tiny1"

        def cycle(self):
            return [[("only", lambda again: None)]]

    monkeypatch.setitem(rl.LOOPS, "boom", Boom)
    monkeypatch.setitem(rl.LOOPS, "tiny1", Tiny)
    out = tmp_path / "res"
    assert rl.main(["--out", str(out), "--smoke", "--loops", "boom,tiny1"]) == 0
    rows = pd.read_csv(out / "loops.csv").set_index("loop")
    assert rows.loc["boom", "status"] == "error"
    assert "out of memory (on purpose)" in rows.loc["boom", "error"]
    assert "RuntimeError" in (out / "loops" / "boom" / "error.txt").read_text()
    assert rows.loc["tiny1", "status"] == "ok"
    with pytest.raises(SystemExit):
        rl.main(["--out", str(out), "--smoke", "--loops", "nosuch"])


def test_the_two_references_agree_with_the_simulated_truth(tmp_path):
    sim = _mod("ref_loops_sim")
    refs = _mod("ref_loops_refs")
    loop = sim.SIM_LOOPS["user4"]
    sim.write_ref(loop, tmp_path / "ref", ref_s=1.5)
    got = refs.references(tmp_path / "ref", power_limit_w=700.0)
    assert abs(got["idle_w"] - loop.idle_w) < 2.0
    for ph in loop.phases:
        r = got["phases"][ph.name]
        truth = ph.power_w * ph.duration_s  # its time varies ±1 % a call around duration_s
        assert abs(r.alone_j / truth - 1) < 0.01, (ph.name, r.alone_j, truth)
        assert r.added_lo_j <= truth <= r.added_hi_j, (ph.name, r)
        assert r.agree
        # Only the 850 W GEMM reads above 95 % of a 700 W limit.
        assert r.near_limit == (ph.power_w > 700 * 0.95), ph.name
        # the third way, the step without the phase: the simulator's phases do not touch
        # their neighbours, so it prices the phase alone, at its time in the step
        assert r.removed_lo_j <= truth <= r.removed_hi_j, (ph.name, r)
        assert abs(r.removed_j - truth) < 0.03 * truth + 0.05, (ph.name, r.removed_j, truth)
        assert abs(r.removed_ms - 1e3 * ph.duration_s) < 0.02 * 1e3 * ph.duration_s + 0.1
    # the GEMM and the copy left out at once: the pair (the simulator's phases share nothing)
    e, lo, hi, ms = got["removed_groups"]["gemm+copy"]
    by = {ph.name: ph for ph in loop.phases}
    truth = sum(by[n].power_w * by[n].duration_s for n in ("gemm", "copy"))
    assert lo <= truth <= hi and abs(e - truth) < 0.03 * truth, (e, lo, hi, truth)
    assert abs(ms - 1e3 * (by["gemm"].duration_s + by["copy"].duration_s)) < 1.0


def test_target_check():
    ev = _mod("ref_loops_eval")

    def row(phase, share, resolved, err=None, inside=None, need=None):
        r = {"method": "regression", "phase": phase, "share_pct": share, "resolved": resolved,
             "ref_j": 1.0, "steps_to_resolve": need}  # fmt: skip
        if resolved:
            r.update(error_pct=err, half_width_pct=4.0, inside=inside)
        return r

    ok = [row("a", 80, True, 1.0, True), row("b", 5, False, need=4000), row("c", 1, False)]
    assert ev.target("L", ok, 5.0)["met"]
    bad = ev.target("L", [row("a", 80, True, 6.0, True), row("b", 5, False)], 5.0)
    assert not bad["met"] and "a (80 %)" in bad["fails"] and "b (5 %)" in bad["fails"]
    outside = ev.target("L", [row("a", 30, True, 1.0, False)], 5.0)
    assert "outside" in outside["fails"]


def _displace(model):
    """What Lightning's `Strategy.teardown()` does to the model after `trainer.fit` on a GPU
    (`lightning_module.cpu()`: off the loop's device), on a CPU: float64 stands in for "not
    where build() put it", and breaks the replay the same way (weights unlike the input)."""
    import torch

    return model.to(torch.float64)


def test_pl_resnet50_replay_runs_after_the_model_was_moved_off_its_device():
    """The H200 run of 2026-12-02 failed pl_resnet50's references: the replay ran the model
    Lightning had moved to the CPU. restore_placement() puts it back; the replay then runs
    and its optimizer still steps the model's parameters."""
    pytest.importorskip("timm")
    import torch

    defs = _mod("ref_loops_defs")
    loop = defs.PlResNet50("cpu", smoke=True)
    loop.build()
    _displace(loop.model)
    with pytest.raises(RuntimeError):
        loop.cycle()[0][0][1](False)  # the forward, as the references replayed it
    loop.reset()
    loop.restore_placement()
    assert all(p.dtype == torch.float32 and p.device == loop.device
               for p in loop.model.parameters())  # fmt: skip
    before = next(loop.model.parameters()).detach().clone()
    for _, call in loop.cycle()[0]:
        call(False)
    assert not torch.equal(before, next(loop.model.parameters()).detach())  # the step moved it
    loop.model.to(torch.float64)
    with pytest.raises(RuntimeError, match="not on cpu in fp32"):
        defs._check_placement(loop.model, loop.device)


def test_pl_resnet50_smoke_runs_its_references_after_lightning_tears_down(tmp_path, monkeypatch):
    """The whole path of the failure: the fine run through Lightning's Trainer, whose teardown
    moves the model (here to float64, as `.cpu()` moves it off a GPU), then the references."""
    pytest.importorskip("timm")
    pl = pytest.importorskip("lightning.pytorch")
    rl = _mod("ref_loops")
    monkeypatch.setattr(pl.LightningModule, "cpu", _displace, raising=False)
    out = tmp_path / "res"
    assert rl.main(["--out", str(out), "--smoke", "--loops", "pl_resnet50"]) == 0
    rows = pd.read_csv(out / "loops.csv")
    assert list(rows["status"]) == ["ok"], rows["error"].tolist()
    wins = pd.read_csv(out / "loops" / "pl_resnet50" / "ref" / "ref_windows.csv")
    assert set(wins.loc[wins["kind"] == "alone", "phase"]) == {"forward", "backward", "optimizer"}


def test_a_reference_off_the_steps_pace_both_ways_is_none():
    """A phase whose alone replay and added copies both ran at another pace than in its steps
    (the H200's tiny kernels: 1.06 ms in the steps, 6.25 ms alone, 4.8 ms per added copy) has
    no reference; one whose added copies kept the pace takes the added one."""
    refs = _mod("ref_loops_refs")
    ev = _mod("ref_loops_eval")
    base = dict(phase="tiny", alone_j=0.76, alone_lo_j=0.75, alone_hi_j=0.77, alone_ms=6.25,
                added_j=0.71, added_lo_j=0.32, added_hi_j=1.10, k=5, occ=1, diff_pct=6.8,
                agree=True, max_read_w=123.0, near_limit=False, ref_j=0.76, ref_lo_j=0.75,
                ref_hi_j=0.77, ref_source="alone", added_ms=4.8, added_ms_hw=0.01)  # fmt: skip
    off = ev._paced(refs.PhaseReference(**base), 1.06)
    assert off.ref_j is None and off.ref_source == "off pace"
    kept = ev._paced(refs.PhaseReference(**{**base, "added_ms": 1.1}), 1.06)
    assert kept.ref_j == 0.71 and kept.ref_source == "added (pace)"
    assert ev._paced(refs.PhaseReference(**{**base, "alone_ms": 1.1}), 1.06).ref_j == 0.76


def test_an_unresolved_phase_beside_an_unphysical_partner_counts_as_not_by_steps():
    """The attribution says "more steps alone will not split it" of a phase whose joint-row
    partner was fitted unphysically (user4_repeat's spin beside the tiny kernels, H100): the
    evaluation reports it as steps-alone-cannot, not as a phase missing its step count."""
    from jouleprof.attribution.steps_needed import UnresolvedNeed

    ev = _mod("ref_loops_eval")

    def need(kind, steps_to_resolve, fixed_rel):  # as the attribution's diagnostics hold it
        return UnresolvedNeed("spin", kind, 1000, None, None, fixed_rel, steps_to_resolve,
                              None, None, None, 0.05).to_json()  # fmt: skip

    assert ev.not_by_steps(need("partner", None, None))
    assert ev.not_by_steps(need("wide", None, 1.1))
    assert not ev.not_by_steps(need("wide", 4000, None))
    assert not ev.not_by_steps(need("wide", None, None))


def test_coverage_counts_resolved_phases_holding_their_reference_per_card_and_method(tmp_path):
    cov = _mod("ref_loops_coverage")

    def frame(rows):
        cols = ["method", "phase", "share_pct", "ref_j", "resolved", "inside", "error_pct",
                "half_width_pct"]  # fmt: skip
        return pd.DataFrame(rows, columns=cols)

    h100 = frame([
        ("regression", "a", 60.0, 1.0, True, False, 7.0, 3.0),
        ("regression", "b", 30.0, 1.0, True, True, -2.0, 4.0),
        ("regression", "c", 5.0, 1.0, True, True, 1.0, 9.0),  # below 10 %: not counted
        ("regression", "d", 20.0, None, True, True, 1.0, 9.0),  # no reference: not counted
        ("regression", "e", 15.0, 1.0, False, None, None, None),
        ("regression", "a+b", 90.0, 1.0, True, False, 8.0, 3.0),  # a joint row: apart
    ])  # fmt: skip
    h200 = frame([("regression", "a", 60.0, 1.0, True, True, 6.0, 8.0)])
    t = cov.coverage({"h100_x": h100, "h200": h200}, 10.0, 5.0)
    joint = t[t["row"] == "joint"].set_index("card")
    assert list(joint.index) == ["H100"] and joint.loc["H100", "ref_inside"] == 0
    t = t[t["row"] == "phase"].set_index("card")
    assert t.loc["H100", "phases"] == 3 and t.loc["H100", "resolved"] == 2
    assert t.loc["H100", "ref_inside"] == 1 and t.loc["H100", "inside_within_target"] == 1
    assert t.loc["H200", "ref_inside"] == 1 and t.loc["H200", "inside_within_target"] == 0
    (tmp_path / "h100_x").mkdir()
    assert cov.main([str(tmp_path / "h100_x"), "--out", str(tmp_path / "c.csv")]) == 2
    # --by-schedule: the loop's name says how its steps were scheduled
    assert [cov.schedule_of(n) for n in ("vit_accum", "vit_accum_excite", "user4_repeat")] == [
        "plain", "excite", "repeat"]  # fmt: skip
    both = pd.concat([h100.assign(loop="vit_accum"), h100.assign(loop="vit_accum_excite")])
    t = cov.coverage({"h100_x": both}, 10.0, 5.0, by_schedule=True)
    t = t[t["row"] == "phase"].set_index("schedule")
    assert list(t.index) == ["excite", "plain"] and (t["resolved"] == 2).all()


def test_repeat_split_names_each_steps_second_run_of_the_phase_apart():
    from jouleprof.attribution.repeat_check import relabel_replays

    spans = pd.DataFrame({
        "step": [0, 0, 0, 1, 1, 2, 2, 2],
        "phase": ["gemm", "copy", "copy", "gemm", "copy", "gemm", "copy", "copy"],
        "t0_s": range(8), "t1_s": range(1, 9),
    })  # fmt: skip
    out = relabel_replays(spans, ["copy"])  # what repeat_occurrence_split.py relabels with
    want = ["gemm", "copy", "copy#2", "gemm", "copy", "gemm", "copy", "copy#2"]
    assert list(out["phase"]) == want
    assert list(spans["phase"]).count("copy#2") == 0  # the input is left as it was


def test_closure_says_how_much_of_the_step_no_reference_prices_and_who_must_take_it():
    clo = _mod("ref_loops_closure")
    cols = ["loop", "method", "phase", "share_pct", "share_from", "ref_j", "estimate_j",
            "occ_per_step", "error_pct"]  # fmt: skip
    rows = pd.DataFrame([
        ("u", "regression", "gemm", 60.0, "reference", 6.0, 6.6, 1.0, 10.0),
        ("u", "regression", "copy", 30.0, "reference", 3.0, 3.1, 1.0, 3.3),
        ("u", "regression", "tiny", 4.0, "max(alone, added)", None, None, 1.0, None),
        ("u", "regression", "copy+tiny", 34.0, "reference", None, 3.3, 1.0, None),
    ], columns=cols)  # fmt: skip
    rec = {"plain_cycle_j": 10.0, "refs_over_plain_pct": 90.0, "without_reference": ["tiny"]}
    t = clo.closure_table({"h200": (rows, {"u regression": {"ref_closure": rec}})},
                          "regression", 10.0, 5.0)  # fmt: skip
    r = t.iloc[0]
    # 90 % priced + tiny's 4 % at most: 6 % left; gemm and copy may take 5 % of their 90 %
    assert (r.priced_pct, r.leftover_pct, r.big_share_pct) == (94.0, 6.0, 90.0)
    assert r.small_must_take_pct == 1.5 and r.small_must_be_off_pct == 38
    assert r.big_excess_pct == pytest.approx(7.0)  # (0.6 + 0.1) J of the 10 J step
    assert r.big_errors == "gemm +10.0; copy +3.3"
    # over 100 % with a phase bounded from above: nothing follows
    rec = dict(rec, refs_over_plain_pct=104.0)
    t = clo.closure_table({"h200": (rows, {"u regression": {"ref_closure": rec}})},
                          "regression", 10.0, 5.0)  # fmt: skip
    assert pd.isna(t.iloc[0].small_must_take_pct)
    assert clo.main(["/nonexistent/x", "--out", "/tmp/x.csv"]) == 2


def test_a_pairs_references_price_what_the_two_share():
    jr = _mod("joint_rows_check")
    cols = ["phase", "occ_per_step", "ref_j", "ref_alone_j", "ref_added_j", "ref_removed_j"]
    # A + B = 8 J alone; each saves 1 J more when left out (they share I = 1 J); the others:
    # spin priced by its reference, tiny (off pace) by its "step less it" one
    rows = pd.DataFrame([
        ("gemm", 1.0, 6.0, 6.0, 6.1, 7.0),
        ("copy", 1.0, 2.0, 2.0, 1.9, 3.0),
        ("spin", 1.0, 0.5, 0.5, 0.6, None),
        ("tiny", 2.0, None, 0.9, 0.3, 0.25),
        ("gemm+copy", 1.0, None, None, None, None),
    ], columns=cols)  # fmt: skip
    rec = {"plain_cycle_j": 10.0, "gap_at_idle_j": 0.0}
    r = jr.pair_references(rows, rec, ["gemm", "copy"])
    assert r["sum_refs_j"] == 8.0 and r["sum_removed_j"] == 10.0 and r["midpoint_j"] == 9.0
    assert r["closure_j"] == pytest.approx(10.0 - 0.5 - 2 * 0.25)  # the step less the others
    assert "tiny: step less it" in r["others_priced_by"]
    # without a "step less it" column (older runs): no bracket, the closure still
    r = jr.pair_references(rows.drop(columns="ref_removed_j"), rec, ["gemm", "copy"])
    assert r["sum_removed_j"] is None and r["midpoint_j"] is None
    assert r["closure_j"] == pytest.approx(10.0 - 0.5 - 2 * 0.9)  # tiny: max(alone, added)
    # a member the run does not have: nothing
    assert jr.pair_references(rows, rec, ["gemm", "nope"])["closure_j"] is None
    # a loop that repeats the copy 1.5 times a step: each repeat at the copy's reference, in
    # the closure and in both ends of the bracket (the repeats share nothing with the GEMM)
    rep = rows.assign(occ_per_step=[1.0, 1.5, 1.0, 2.0, 1.0])
    r = jr.pair_references(rep, rec, ["gemm", "copy"])
    assert r["repeats_j"] == 1.0 and r["closure_j"] == pytest.approx(9.0 + 1.0)
    assert (r["sum_refs_j"], r["sum_removed_j"], r["midpoint_j"]) == (9.0, 11.0, 10.0)
