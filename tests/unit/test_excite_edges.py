"""Long idle gaps as excitation (`ExciteConfig.edges`, ref_loops' `<loop>_edges`) and the
H200-like simulated GPU they were tested on (benchmarks/edge_excite_sim.py): the preset's gaps,
the loops' names and references, the misfit reproducing the H200's unidentified buffer window,
and long gaps bringing a misfit-biased window choice back to the simulator's true one."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jouleprof.clock import ManualClock
from jouleprof.timeline.excite import EDGE_MAX_GAP_S, EDGE_MIN_GAP_S, GAP_PHASE, ExciteConfig
from jouleprof.timeline.recorder import PhaseRecorder

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _mod(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def test_the_edges_preset_is_long_sync_gaps_in_a_few_steps():
    cfg = ExciteConfig.edges()
    assert (cfg.min_gap_s, cfg.max_gap_s, cfg.gap) == (0.040, 0.150, "sync")
    assert (cfg.fraction, cfg.window_s) == (0.05, 30.0)
    assert EDGE_MIN_GAP_S < 0.060 < EDGE_MAX_GAP_S  # around the buffer's 60 ms window
    # Its own fraction and window, and any other field as an override, still validated.
    cfg = ExciteConfig.edges(window_s=45.0, fraction=0.1, boundary_prob=1.0, seed=3)
    assert (cfg.window_s, cfg.fraction, cfg.boundary_prob, cfg.seed) == (45.0, 0.1, 1.0, 3)
    assert ExciteConfig.edges(gap="spin").gap == "spin"
    with pytest.raises(ValueError, match="max_gap_s"):
        ExciteConfig.edges(max_gap_s=2.0)
    with pytest.raises(ValueError, match="fraction"):
        ExciteConfig.edges(fraction=0.0)


def test_the_recorder_puts_the_long_gaps_in_about_fraction_of_the_window_steps():
    clock = ManualClock()
    record = SimpleNamespace(extra={})
    cfg = ExciteConfig.edges(window_s=30.0, fraction=0.1, seed=2)
    rec = PhaseRecorder(clock, device="cpu", excite=cfg, record=record)
    for _ in range(800):
        with rec.step():
            for name in ("gemm", "copy", "spin"):
                with rec.phase(name):
                    clock.advance_s(0.017)
    rec.close()
    info = record.extra["excite"]
    gaps = [s for s in rec.sink.spans if s.phase == GAP_PHASE]
    assert info["n_gaps"] == len(gaps) > 0
    for g in gaps:
        assert EDGE_MIN_GAP_S - 1e-9 <= g.t1_s - g.t0_s <= EDGE_MAX_GAP_S + 1e-9
    # 10 % drawn, each with a gap at one of its two boundaries at least (3 in 4 of them).
    share = info["n_excited_steps"] / info["n_window_steps"]
    assert 0.04 < share < 0.12
    assert max(info["excited_steps"]) < info["n_window_steps"]
    assert info["gap_s_total"] == pytest.approx(sum(g.t1_s - g.t0_s for g in gaps))


def test_edges_loops_are_excited_loops_with_the_preset_and_their_base_loops_references(
    tmp_path,
):
    rl = _mod("ref_loops")
    ev = _mod("ref_loops_eval")
    assert rl.is_excited("user4_edges") and rl.base_of("user4_edges") == "user4"
    assert rl.is_excited("user4_excite") and rl.base_of("user4_excite") == "user4"
    assert not rl.is_excited("user4") and not rl.is_excited("nosuch_edges")
    edges = rl.loop_excitation("user4_edges", 60.0)
    assert edges == ExciteConfig.edges(window_s=45.0, fraction=rl.EDGES_FRACTION)
    assert rl.loop_excitation("user4_excite", 60.0).max_gap_s == 5e-3
    assert rl.loop_excitation("user4", 60.0) is None
    with pytest.raises(SystemExit):
        rl.main(["--out", str(tmp_path / "x"), "--smoke", "--loops", "nosuch_edges"])
    loops = tmp_path / "loops"
    (loops / "user4" / "ref").mkdir(parents=True)
    (loops / "user4_edges" / "fine").mkdir(parents=True)
    assert ev.reference_dir(loops, "user4_edges") == loops / "user4" / "ref"
    with pytest.raises(FileNotFoundError, match="base loop hf_bert"):
        ev.reference_dir(loops, "hf_bert_edges")


def test_an_edges_loop_in_smoke_mode_records_long_gaps(tmp_path):
    """user4_edges through ref_loops.run_loop (smoke, CPU, fine run only; every step drawn):
    the recorder's long gaps are in its spans."""
    pytest.importorskip("torch")
    import pandas as pd

    rl = _mod("ref_loops")
    assert rl.loop_excitation("user4_edges", 0.6, smoke=True).fraction == 1.0
    row = rl.run_loop("user4_edges", tmp_path, 0.6, 0.3, True, "cpu", references=False)
    spans = pd.read_csv(tmp_path / "fine" / "spans.csv")
    gaps = spans[spans["phase"] == GAP_PHASE]
    assert row["n_windows"] == 0 and len(gaps) > 0
    assert ((gaps["t1_s"] - gaps["t0_s"]) >= EDGE_MIN_GAP_S - 1e-3).all()


@pytest.fixture(scope="module")
def sim():
    return _mod("edge_excite_sim")


def test_the_h200_like_misfit_leaves_the_buffer_window_unidentified(sim, tmp_path):
    """As on the H200: residuals of tens of W, and neither neighbouring window length
    rejected (Δχ² < 9), where the flat simulated GPU rejects both by far."""
    ev = sim.run_one(tmp_path, "user4h", "plain", "h200", 0, 20.0, 60.0)
    assert min(ev["buffer_rms_w"].values()) > 15.0
    assert ev["delta_chi2"] and max(ev["delta_chi2"].values()) < 9.0
    assert not ev["identified"]
    flat = sim.run_one(tmp_path, "user4h", "plain", "flat", 0, 20.0, 60.0)
    assert flat["chosen_window_ms"] == pytest.approx(60.0)
    assert flat["identified"] and min(flat["delta_chi2"].values()) > 9.0


def test_long_gaps_bring_a_misfit_biased_window_back_to_the_true_one(sim, tmp_path):
    """Power that is not flat within phases (a throttling GEMM, a copy ramping up) pulls the
    choice to the shortest length, confidently, with the GEMM and the copy outside their
    intervals; 10 % of the steps with long gaps choose the true 60 ms, the truth inside."""
    plain = sim.run_one(tmp_path, "user4h", "plain", "shapes_only", 0, 20.0, 60.0)
    assert plain["chosen_window_ms"] < 50.0
    by = {r["phase"]: r for r in plain["phases"]}
    assert not by["gemm"]["inside"] and not by["copy"]["inside"]
    edges = sim.run_one(tmp_path, "user4h", "edges10", "shapes_only", 0, 20.0, 60.0)
    assert edges["chosen_window_ms"] == pytest.approx(60.0)
    by = {r["phase"]: r for r in edges["phases"]}
    for name in ("gemm", "copy"):
        assert by[name]["resolved"] and by[name]["inside"], by[name]
        assert abs(by[name]["error_pct"]) < 2.0
    assert edges["excite"]["n_excited"] > 0
    assert 5.0 < edges["excite"]["run_time_overhead_pct"] < 35.0


def test_repeating_a_phase_is_read_through_the_counter(sim, tmp_path, capsys):
    """Phase repetition (the copy through PhaseRecorder.replay, twice in 30 % of the steps) on
    the H200-like simulated GPU: run.json records it, the cost is the second runs' time, and
    the default regression leaves the power buffer's rows out by the repeat rule and resolves
    the copy far more narrowly than the plain loop's default fit, and than the same repeated
    run with the buffer's rows forced in (the buffer's unidentified window dilutes it)."""
    plain = sim.run_one(tmp_path, "user4h", "plain", "h200", 0, 30.0, 60.0)
    rep = sim.run_one(tmp_path, "user4h", "repeat_copy30", "h200", 0, 30.0, 60.0)
    forced = sim.run_one(
        tmp_path, "user4h", "repeat_copy30", "h200", 0, 30.0, 60.0, opts={"use_buffer": True}
    )
    rec = json.loads((tmp_path / "loops" / "user4h@repeat_copy30@h200@w60@30s@s0" / "fine"
                      / "run.json").read_text())  # fmt: skip
    assert rec["extra"]["repeat"]["phases"] == ["copy"]
    assert rec["extra"]["repeat"]["n_repeated_steps"] > 20
    assert 2.0 < rep["excite"]["run_time_overhead_pct"] < 10.0
    assert plain["chosen_window_ms"] is not None  # no repetition: the buffer rows stay
    assert rep["chosen_window_ms"] is None  # the rule left them out
    assert forced["chosen_window_ms"] is not None
    copy = {
        k: {r["phase"]: r for r in e["phases"]}["copy"]
        for k, e in (("plain", plain), ("rep", rep), ("forced", forced))
    }
    assert copy["rep"]["resolved"] and copy["rep"]["inside"], copy
    # Narrower than the plain loop's, though the replay check widens it: on this simulated
    # GPU the GEMM's falling power biases its neighbour's first runs, fitted alone (below).
    assert copy["rep"]["hw_pct"] < 0.85 * copy["plain"]["hw_pct"], copy
    assert abs(copy["rep"]["error_pct"]) < 0.5 * abs(copy["forced"]["error_pct"]), copy
    # The command line says why the buffer rows were left out.
    from jouleprof.cli.main import main

    fine = tmp_path / "loops" / "user4h@repeat_copy30@h200@w60@30s@s0" / "fine"
    with pytest.raises(SystemExit) as e:
        main(["attribute", str(fine), "--method", "regression"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    text = " ".join((out.out + out.err).split())
    assert "buffer rows: left out, because the run repeated copy in" in text
    # The replay check fits the copy's first runs apart from its replays and says so.
    from jouleprof.attribution import attribute

    check = attribute(fine, "regression").devices[0].diagnostics["replay_check"]["copy"]
    assert check["first_runs_w"] > 0 and check["replays_w"] > 0 and check["moved_j"] >= 0
    # and without the buffer's rows too: the check reads the repetition from run.json either way
    plain = attribute(fine, "regression", use_buffer=False).devices[0]
    assert "copy" in plain.diagnostics.get("replay_check", {})


def test_a_repeat_loop_runs_its_replayable_phase_twice_in_some_steps(tmp_path):
    """user4_repeat through ref_loops.run_loop (smoke, CPU, fine run only; every window step
    drawn): each drawn step holds two copy spans, the other phases one; a loop with nothing
    replayable is refused with the reason."""
    pytest.importorskip("torch")
    import pandas as pd

    rl = _mod("ref_loops")
    assert rl.is_excited("user4_repeat") and rl.base_of("user4_repeat") == "user4"
    assert rl.loop_excitation("user4_repeat", 60.0) is None
    rep = rl.loop_repeat("user4_repeat", 60.0)
    assert rep.fraction == rl.REPEAT_FRACTION and rep.window_s == 45
    assert rl.loop_repeat("user4", 60.0) is None
    with pytest.raises(ValueError, match="no replayable phase"):
        rl.loop_repeat("hf_bert_repeat", 60.0)
    row = rl.run_loop("user4_repeat", tmp_path, 0.6, 0.3, True, "cpu", references=False)
    spans = pd.read_csv(tmp_path / "fine" / "spans.csv")
    per_step = spans.groupby(["step", "phase"]).size().unstack(fill_value=0)
    twice = per_step[per_step["copy"] == 2]
    assert len(twice) > 0 and (per_step["copy"] <= 2).all()
    assert (per_step[["gemm", "spin", "tiny"]] == 1).all().all()
    assert row["n_windows"] == 0 and not (tmp_path / "ref").exists()
    rec = json.loads((tmp_path / "fine" / "run.json").read_text())
    assert rec["extra"]["repeat"]["phases"] == ["copy"]
    assert rec["extra"]["repeat"]["n_repeated_steps"] == len(twice)


def test_vit_accum_repeat_runs_its_data_and_forward_twice_in_some_steps(tmp_path):
    """vit_accum_repeat (smoke, CPU): in drawn steps the copy in and the forward run twice,
    each its own span; the backward and the every-4th-step optimizer run once; it trains."""
    pytest.importorskip("timm")
    import pandas as pd

    rl = _mod("ref_loops")
    rep = rl.loop_repeat("vit_accum_repeat", 60.0)
    assert rep.fraction == rl.REPEAT_FRACTION
    row = rl.run_loop("vit_accum_repeat", tmp_path, 0.8, 0.4, True, "cpu", references=False)
    assert row["n_steps"] > 0 and not (tmp_path / "ref").exists()
    spans = pd.read_csv(tmp_path / "fine" / "spans.csv")
    per_step = spans.groupby(["step", "phase"]).size().unstack(fill_value=0)
    twice = per_step[per_step["forward"] == 2]
    assert len(twice) > 0 and (per_step[["data", "forward"]] <= 2).all().all()
    assert (per_step["backward"] == 1).all() and (per_step["optimizer"] <= 1).all()
    rec = json.loads((tmp_path / "fine" / "run.json").read_text())
    assert rec["extra"]["repeat"]["phases"] == ["data", "forward"]


def test_a_repeats_marginal_energy_is_one_run_where_nothing_throttles(sim, tmp_path):
    """benchmarks/repeat_marginal.py on a simulated infer_h run whose loss repeats: on flat
    power, a step that repeats the loss holds one more loss run's energy, the others
    unchanged."""
    rm = _mod("repeat_marginal")
    sim.run_one(tmp_path, "infer_h", "repeat_loss30", "flat", 0, 20.0, 60.0)
    fine = tmp_path / "loops" / "infer_h@repeat_loss30@flat@w60@20s@s0" / "fine"
    m = rm.marginal(fine, "loss_fp32")
    assert m["n_repeated"] > 20 and m["n_once"] > 20
    assert abs(m["marginal_vs_run_pct"]) < 1.0, m
    assert all(abs(v) < 0.01 * m["per_run_j"] for v in m["neighbours_change_j"].values()), m
