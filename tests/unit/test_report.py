"""Reports of a run and of a study, built from synthetic directories with known numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from jouleprof.errors import RunDirError
from jouleprof.report import build_report, detect, write_run_report, write_study_report
from jouleprof.report.study import (
    aggregate,
    batch_size_effects,
    left_out_batch_sizes,
    load_study,
)
from jouleprof.report.tables import exclusive_phase_times, quantity, sig, signed_pct
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus

WARMUP_NOTE = (
    "warm-up excluded: at least 2 steps, then until 3 consecutive step times agree within 5% "
    "of their median and of the 3 before them (at most 50 steps)"
)
NO_GPU = "opening NVML failed: NVIDIA driver not loaded"
SENSORS_OFF = "jouleprof's sensors are off in baseline mode"
OOM_ERROR = "out of memory at batch size 8: CUDA out of memory. Tried to allocate 2.00 GiB"
# Means over the two repetitions of each (mode, batch size): the seed study's numbers at 1 → 2.
THROUGHPUT = {1: 1.922, 2: 2.737, 4: 3.61}
KWH_PER_1000 = {1: 0.0256, 2: 0.0187, 4: 0.0152}
BATCH_SIZES = (1, 2, 4, 8)  # 8 runs out of memory
MODES = ("baseline", "e2e", "fine")


def phases(bs: int) -> list[PhaseSpec]:
    return [
        PhaseSpec("data", 0.004, 150.0),
        PhaseSpec("forward", 0.030 * bs, 480.0),
        PhaseSpec("backward", 0.050 * bs, 600.0),
        PhaseSpec("optimizer", 0.035, 430.0),
        PhaseSpec("ema", 0.010, 495.0),
    ]


def cell_record(cell_id: str, bs: int, mode: str, values: dict[str, float | None]) -> RunRecord:
    units = {
        "throughput_samples_per_s": "samples/s",
        "energy_per_1000_samples_kwh": "kWh",
        "energy_per_sample_j": "J",
        "fine_overhead_pct": "%",
    }
    summary = {}
    for k, unit in units.items():
        v = values.get(k)
        if v is not None:
            sigl = "timer" if k.startswith("throughput") else "counter"
            summary[k] = Figure.measured(v, unit, signal=sigl)
        elif k != "fine_overhead_pct":
            summary[k] = Figure.unavailable(unit, SENSORS_OFF if mode == "baseline" else NO_GPU)
    return RunRecord(
        run_id=cell_id,
        kind="cell",
        status=RunStatus.COMPLETE,
        summary=summary,
        notes=[WARMUP_NOTE],
        config={"cell": {"workload": "vjepa2", "preset": "tiny", "mode": mode, "batch_size": bs}},
        extra={"mode": mode, "warmup_steps": 3 + bs % 3, "warmup_settled": True},
    )


def write_sim_cell(path: Path, bs: int, steps: int = 30) -> None:
    """A fine cell with simulated telemetry and phases, summarized and attributed as a real one."""
    from jouleprof.bench.cellsummary import finish_cell

    sim = simulate_training(phases(bs), steps, seed=bs)
    t0, t1 = sim.spans[0].t0_s, sim.spans[-1].t1_s
    rec = cell_record(path.name, bs, "fine", {})
    rec.extra["measured_segment"] = {"t0_s": t0, "t1_s": t1, "steps": steps, "samples": steps * bs}
    rec.hardware = {"gpus": [{"name": "NVIDIA H200"}]}
    rd = RunDir.create(path, rec)
    for writer, rows in ((rd.sample_writer(), sim.samples), (rd.span_writer(), sim.spans)):
        writer.write(rows)
        writer.close()
    finish_cell(path)


def make_study(root: Path, reps: int = 2, sim_cells: bool = True) -> Path:
    """A study directory: runs.csv with known numbers, a run.json per cell, fine cells with
    simulated telemetry (rep 0), and batch size 8 out of memory in every cell."""
    root.mkdir(parents=True)
    (root / "study.json").write_text(
        json.dumps(
            {
                "workload": "vjepa2",
                "preset": "tiny",
                "batch_sizes": [*BATCH_SIZES, 16],
                "modes": list(MODES),
                "reps": reps,
                "duration_s": 5,
                "created": "2026-01-01T00:00:00",
            }
        )
    )
    rows = []
    for bs in BATCH_SIZES:
        for mode in MODES:
            for rep in range(reps):
                cid = f"bs{bs}-{mode}-r{rep}"
                cdir = root / "cells" / cid
                row = {
                    "cell_id": cid,
                    "batch_size": bs,
                    "mode": mode,
                    "rep": rep,
                    "status": "complete",
                    "error": "",
                    "run_dir": f"cells/{cid}",
                }
                if bs == 8:
                    row.update(status="oom", error=OOM_ERROR)
                    rows.append(row)
                    continue
                d = 0.01 * (1 if rep % 2 == 0 else -1) if reps > 1 else 0.0  # mean stays exact
                vals: dict[str, float | None] = {
                    "throughput_samples_per_s": THROUGHPUT[bs]
                    * (1 + d)
                    * (1.02 if mode == "baseline" else 1),
                    "step_time_s": bs / THROUGHPUT[bs],
                }
                if mode != "baseline":
                    vals["energy_per_1000_samples_kwh"] = KWH_PER_1000[bs] * (1 - d)
                    vals["energy_per_sample_j"] = KWH_PER_1000[bs] * (1 - d) * 3600.0
                    vals["segment_gpu_power_w"] = 400.0 + bs
                    vals["floor_energy_per_sample_j"] = 0.5
                    vals["mfu_pct"] = 10.0 * bs
                if mode == "fine":
                    vals["fine_overhead_pct"] = 0.3 + d
                    vals["recorder_host_pct"] = 0.25
                if mode == "fine" and rep == 0 and sim_cells:
                    write_sim_cell(cdir, bs)
                else:
                    RunDir.create(cdir, cell_record(cid, bs, mode, vals))
                row.update(vals)
                rows.append(row)
    pd.DataFrame(rows).to_csv(root / "runs.csv", index=False)
    return root


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    return make_study(tmp_path_factory.mktemp("s") / "study")


@pytest.fixture(scope="module")
def study_report(study_dir):
    return build_report(study_dir)


# -- formatting ------------------------------------------------------------------------------


def test_formatting_keeps_significance_and_true_minus():
    assert sig(1.922) == "1.922" and sig(0.0256) == "0.0256" and sig(2.7371) == "2.737"
    assert signed_pct(42.4) == "+42.4%" and signed_pct(-26.8) == "\u221226.8%"
    assert quantity(3 * 2**30, "B") == "3 GiB"


def test_exclusive_times_subtract_children_and_count_untracked():
    spans = pd.DataFrame(
        {
            "step": [0, 0, 0, 0],
            "phase": ["data", "forward", "forward/target", "backward"],
            "t0_s": [0.0, 0.1, 0.1, 0.5],
            "t1_s": [0.1, 0.4, 0.3, 0.9],
        }
    )
    ex = exclusive_phase_times(spans).set_index("phase")["time_s"]
    assert ex["forward"] == pytest.approx(0.1) and ex["forward/target"] == pytest.approx(0.2)
    assert ex["untracked"] == pytest.approx(0.1)  # 0.4 … 0.5 is covered by no phase
    assert ex.sum() == pytest.approx(0.9)


# -- study -----------------------------------------------------------------------------------


def test_batch_size_sentences_from_the_data(study_dir):
    study = load_study(study_dir)
    agg = aggregate(study)
    eff = batch_size_effects(study, agg, "e2e").set_index(["batch_size_a", "batch_size_b"])
    assert len(eff) == 3  # every pair of 1, 2, 4 (8 ran out of memory: left out)
    thr = 100 * (THROUGHPUT[2] - THROUGHPUT[1]) / THROUGHPUT[1]
    kwh = 100 * (KWH_PER_1000[2] - KWH_PER_1000[1]) / KWH_PER_1000[1]
    assert eff.loc[(1, 2), "throughput_change_pct"] == pytest.approx(thr)
    assert eff.loc[(1, 2), "energy_kwh_change_pct"] == pytest.approx(kwh)
    assert eff.loc[(1, 2), "sentence"] == (
        "Batch size 1 → 2: throughput from 1.922 to 2.737 samples/s (+42.4%), GPU energy per "
        "1,000 samples from 0.0256 to 0.0187 kWh (\u221227.0%)"
    )
    assert eff.loc[(1, 4), "energy_kwh_change_pct"] == pytest.approx(
        100 * (KWH_PER_1000[4] / KWH_PER_1000[1] - 1)
    )
    assert not any(8 in pair for pair in eff.index)
    left = left_out_batch_sizes(study, agg, "e2e")
    assert left["sentence"].tolist() == ["Batch size 8 left out: out of memory in 2 of 2 cells"]


def test_study_report_files(study_dir, study_report):
    r = study_report
    assert r.kind == "study" and r.html == study_dir / "report.html" and r.html.is_file()
    drawn = {p.name for p in r.plots if p.path is not None}
    assert {
        "batch_size_effect",
        "phase_time_by_batch",
        "phase_energy_by_batch",
        "timelines_by_batch",
        "overhead",
        "energy_agreement",
        "efficiency",
    } <= drawn
    for p in r.plots:
        assert p.path is None or p.path.stat().st_size > 1000, p.name
    out = study_dir / "report"
    for name in (
        "batch_size_effect",
        "batch_size_effect_all_pairs",
        "overhead",
        "spread",
        "energy_agreement",
        "failed_cells",
        "efficiency",
        "phase_energy_by_batch",
    ):
        assert (out / f"{name}.csv").is_file() and (out / f"{name}.md").is_file(), name
    assert len(pd.read_csv(out / "batch_size_effect.csv")) == 2  # consecutive pairs
    assert len(pd.read_csv(out / "batch_size_effect_all_pairs.csv")) == 3
    html = r.html.read_text()
    assert "Batch size 1 → 2: throughput from 1.922 to 2.737 samples/s (+42.4%)" in html
    assert "data:image/png;base64," in html
    assert "warm-up excluded: at least 2 steps" in html.lower()


def test_unavailable_values_say_why_and_are_never_zero(study_dir, study_report):
    md = (study_dir / "report" / "summary_by_cell_group.md").read_text()
    base = [line for line in md.splitlines() if line.startswith("| baseline | 1 |")][0]
    assert f"unavailable ({SENSORS_OFF})" in base.replace("&#39;", "'")
    assert "0 kWh" not in base
    data = pd.read_csv(study_dir / "report" / "summary_by_cell_group.csv")
    sel = data[(data["mode"] == "baseline") & (data["metric"] == "energy_per_1000_samples_kwh")]
    assert sel["mean"].isna().all()
    assert (sel.loc[sel["batch_size"] < 8, "reason"] == SENSORS_OFF).all()
    assert (sel.loc[sel["batch_size"] == 8, "reason"] == "out of memory in 2 of 2 cells").all()


def test_failed_cells_are_listed_with_their_error(study_dir, study_report):
    failed = pd.read_csv(study_dir / "report" / "failed_cells.csv")
    assert set(failed["batch_size"]) == {8} and (failed["status"] == "oom").all()
    assert (failed["error"] == OOM_ERROR).all() and len(failed) == 6
    assert OOM_ERROR in study_report.html.read_text()
    assert any("16" in n for n in study_report.notes)  # planned in study.json, never run


def test_spread_and_overhead_numbers(study_dir, study_report):
    spread = pd.read_csv(study_dir / "report" / "spread.csv")
    row = spread[
        (spread["mode"] == "e2e")
        & (spread["batch_size"] == 1)
        & (spread["metric"] == "throughput_samples_per_s")
    ].iloc[0]
    assert row["cv_pct"] == pytest.approx(100 * 0.01 * math.sqrt(2), rel=1e-6)
    ov = pd.read_csv(study_dir / "report" / "overhead.csv")
    e2e = ov[(ov["mode"] == "e2e") & (ov["batch_size"] == 2)].iloc[0]
    assert e2e["ratio"] == pytest.approx(1 / 1.02)
    fine = ov[(ov["mode"] == "fine") & ov["comparison"].str.contains("interleaved")]
    assert fine["overhead_pct"].dropna().tolist() == pytest.approx([0.3, 0.3, 0.3])
    assert (fine.loc[fine["batch_size"] == 8, "reason"] == "out of memory in 2 of 2 cells").all()
    host = ov[ov["comparison"].str.contains("host time")]
    assert host["overhead_pct"].tolist() == pytest.approx([0.25] * 3)  # batch 1, 2, 4: fine ran


def test_study_with_only_failed_cells_still_reports(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    pd.DataFrame(
        [
            {
                "cell_id": "bs64-fine-r0",
                "batch_size": 64,
                "mode": "fine",
                "rep": 0,
                "status": "failed",
                "error": "RuntimeError: boom",
                "run_dir": "cells/x",
            }
        ]
    ).to_csv(root / "runs.csv", index=False)
    html = write_study_report(root)
    text = html.read_text()
    assert "RuntimeError: boom" in text and "unavailable" in text


# -- run -------------------------------------------------------------------------------------


def test_run_report_with_energy(study_dir):
    cell = study_dir / "cells" / "bs2-fine-r0"
    html = write_run_report(cell)
    assert html == cell / "report.html"
    for name in ("timeline", "timeline_zoom", "phase_energy", "phase_time"):
        assert (cell / "report" / f"{name}.png").is_file(), name
    ph = pd.read_csv(cell / "report" / "phase_energy.csv")
    assert set(ph["method"]) == {"proportional", "regression"}
    assert (ph["energy_per_step_j"].notna() == ph["resolved"]).all()
    unresolved = ph[~ph["resolved"]]
    md = (cell / "report" / "phase_energy.md").read_text()
    for phase in unresolved["phase"]:  # a phase the data cannot pin down is said so, not 0
        assert f"| regression | {phase} |" in md and "unavailable (unresolved:" in md
    cmp = pd.read_csv(cell / "report" / "phase_methods.csv").set_index("phase")
    assert cmp["proportional_vs_regression_pct"].notna().any()
    text = html.read_text()
    assert "Energy per phase" in text and "Attribution methods compared" in text


def test_run_report_without_gpu_says_why(tmp_path):
    rec = RunRecord(
        run_id="nogpu",
        kind="cell",
        status=RunStatus.INCOMPLETE,
        summary={
            "throughput_samples_per_s": Figure.measured(38.2, "samples/s", signal="timer"),
            "energy_per_sample_j": Figure.unavailable("J", NO_GPU),
        },
        notes=[WARMUP_NOTE, "interrupted (Ctrl-C): figures cover the run up to then"],
        extra={"mode": "fine", "attribution": {"regression": {"ok": False, "reason": "no GPU"}}},
    )
    rd = RunDir.create(tmp_path / "run", rec)
    rd.sample_writer().close()  # header only: no reading
    w = rd.span_writer()
    from jouleprof.types import Span

    w.write(
        [
            Span(s, p, s + i * 0.1, s + i * 0.1 + 0.1)
            for s in range(3)
            for i, p in enumerate(("data", "forward", "backward"))
        ]
    )
    w.close()
    report = build_report(rd.path)
    assert report.kind == "run"
    text = report.html.read_text()
    assert f"unavailable ({NO_GPU})" in text and "interrupted (Ctrl-C)" in text
    timeline = next(p for p in report.plots if p.name == "timeline")
    assert timeline.path is None and "no sensor readings" in timeline.reason
    summary = pd.read_csv(rd.path / "report" / "summary.csv").set_index("figure")
    assert math.isnan(summary.loc["energy_per_sample_j", "value"])
    assert (rd.path / "report" / "phase_time.png").is_file()


def test_detect_rejects_what_is_not_a_run_or_study(tmp_path):
    with pytest.raises(RunDirError, match="does not exist"):
        detect(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match="neither a run directory"):
        detect(tmp_path / "empty")


def test_agreement_with_crosscheck_modes(tmp_path):
    root = tmp_path / "cc"
    root.mkdir()
    rows = []
    per_sample = {
        "e2e": ("energy_per_sample_j", 10.0),
        "fine": ("energy_per_sample_j", 10.4),
        "codecarbon": ("crosscheck_energy_per_sample_j", 9.5),
        "zeus": ("crosscheck_energy_per_sample_j", None),
    }
    for mode, (col, v) in per_sample.items():
        cid = f"bs2-{mode}-r0"
        rows.append(
            {
                "cell_id": cid,
                "batch_size": 2,
                "mode": mode,
                "rep": 0,
                "status": "complete",
                "error": "",
                "run_dir": f"cells/{cid}",
                "throughput_samples_per_s": 5.0,
                col: v,
            }
        )
        rec = cell_record(cid, 2, mode, {"throughput_samples_per_s": 5.0})
        if mode == "zeus":
            rec.extra["crosscheck"] = {
                "tool": "zeus",
                "gpu_energy_j": None,
                "reason": "zeus measured no GPU",
            }
        RunDir.create(root / "cells" / cid, rec)
    pd.DataFrame(rows).to_csv(root / "runs.csv", index=False)
    build_report(root)
    agr = pd.read_csv(root / "report" / "energy_agreement.csv").set_index("mode")
    assert agr.loc["fine", "vs_e2e_pct"] == pytest.approx(4.0)
    assert agr.loc["codecarbon", "figure"] == "crosscheck_energy_per_sample_j"
    assert agr.loc["codecarbon", "vs_e2e_pct"] == pytest.approx(-5.0)
    assert agr.loc["codecarbon", "vs_fine_pct"] == pytest.approx(100 * (9.5 / 10.4 - 1))
    assert math.isnan(agr.loc["zeus", "mean_j"]) and agr.loc["zeus", "reason"] == (
        "zeus measured no GPU"
    )
    md = (root / "report" / "energy_agreement.md").read_text()
    assert "unavailable (zeus measured no GPU)" in md


def test_run_report_with_isolation_reference(study_dir, tmp_path):
    import shutil

    cell = tmp_path / "cell"
    shutil.copytree(study_dir / "cells" / "bs4-fine-r0", cell)
    reg = pd.read_csv(cell / "phases_regression.csv")
    iso = reg.assign(
        method="isolation",
        energy_j=reg["time_s"] * 500.0,
        resolved=True,
        energy_lo_j=reg["time_s"] * 490.0,
        energy_hi_j=reg["time_s"] * 510.0,
    )
    iso.to_csv(cell / "phases_isolation.csv", index=False)
    (cell / "isolation_windows.csv").write_text(
        "replay,n_calls,t0_s,t1_s,time_per_call_s\nforward,50,30.0,35.0,0.1\n"
    )
    report = build_report(cell)
    cmp = pd.read_csv(cell / "report" / "phase_methods.csv").set_index("phase")
    assert "proportional_vs_isolation_pct" in cmp and "regression_vs_isolation_pct" in cmp
    e_reg = reg.set_index("phase")["energy_j"]
    t = reg.set_index("phase")["time_s"]
    expect = 100 * (e_reg["backward"] - 500.0 * t["backward"]) / (500.0 * t["backward"])
    assert cmp.loc["backward", "regression_vs_isolation_pct"] == pytest.approx(expect)
    assert next(p for p in report.plots if p.name == "timeline").path is not None


def test_phase_energy_legend_names_every_method_even_when_its_first_phase_is_unresolved(
    tmp_path, monkeypatch
):
    from jouleprof.report import figures

    rows = []
    for method in ("proportional", "regression"):
        for phase, resolved in (("data", method == "proportional"), ("forward", True)):
            rows.append(
                dict(
                    method=method,
                    phase=phase,
                    resolved=resolved,
                    energy_per_step_j=1.0 if resolved else float("nan"),
                    energy_per_step_lo_j=0.9,
                    energy_per_step_hi_j=1.1,
                    mean_power_w=500.0,
                )
            )
    seen = {}

    def keep(fig, out_dir, name):
        seen["fig"] = fig
        return out_dir / f"{name}.png"

    monkeypatch.setattr(figures, "save", keep)
    figures.phase_energy_plot(pd.DataFrame(rows), tmp_path)
    legend = seen["fig"].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["proportional", "regression"]


def test_run_notes_say_which_regression_model_was_chosen():
    from jouleprof.report.tables import run_notes
    from jouleprof.types import RunRecord, RunStatus

    rec = RunRecord(run_id="r", kind="cell", status=RunStatus.COMPLETE)
    choice = {"chosen": "stall", "residual_rms_w": {"plain": 53.7, "stall": 42.6}}
    bins = {"chosen": True, "residual_rms_w": {"whole": 42.9, "binned": 30.2}, "bin_s": 0.0125}
    rec.extra["attribution"] = {
        "regression": {"ok": True, "model": {"gpu0": choice}, "bins": {"gpu0": bins}}
    }
    notes = run_notes(rec)
    assert any("gpu0: phase energy by regression with the stall model" in n for n in notes)
    assert any("53.7 W with one power per phase, 42.6 W" in n for n in notes)
    assert any("gpu0: long phases cut into ~12.5 ms bins" in n and "30.2 W" in n for n in notes)


def test_a_broken_study_json_is_named_by_both_study_readers(tmp_path):
    from jouleprof.report import matrix_study
    from jouleprof.report.study import load_study

    (tmp_path / "study.json").write_text("{not json")
    for read in (matrix_study.load, load_study):
        with pytest.raises(RunDirError, match="study.json is not valid JSON"):
            read(tmp_path)
    (tmp_path / "study.json").unlink()  # no study.json: the runs.csv is what is missing
    with pytest.raises(RunDirError, match="no runs.csv"):
        matrix_study.load(tmp_path)


def test_a_cells_attribution_records_which_model_each_device_came_from(tmp_path):
    # finish_cell keeps, beside each method's status, the regression's model and bins choices
    # per device, whether or not the run excited its steps (none here: no cost line either)
    write_sim_cell(tmp_path / "cell", 4, steps=60)
    st = json.loads((tmp_path / "cell" / "run.json").read_text())["extra"]["attribution"]
    reg = st["regression"]
    assert reg["ok"] and set(reg["model"]) == {"gpu0"} and set(reg["bins"]) == {"gpu0"}
    assert "costs" not in reg and "model" not in st["proportional"]
