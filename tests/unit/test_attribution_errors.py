"""Bad input to attribution: a clear message saying which, a non-zero exit, no made-up figure."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jouleprof.attribution import attribute, write_phases
from jouleprof.cli.main import main
from jouleprof.errors import AttributionError, RunDirError
from jouleprof.sensors.simulated_workload import PhaseSpec, SimulatedRun, simulate_training
from jouleprof.store.rundir import RunDir
from jouleprof.types import RunRecord, Span

PHASES = [
    PhaseSpec("data", 0.003, 150.0),
    PhaseSpec("forward", 0.120, 480.0),
    PhaseSpec("backward", 0.200, 600.0),
    PhaseSpec("optimizer", 0.035, 430.0),
    PhaseSpec("ema", 0.010, 495.0),
]


@functools.cache
def simulated(steps: int) -> SimulatedRun:
    return simulate_training(PHASES, steps, span_noise_s=50e-6, seed=0)


def write_run(path: Path, run: SimulatedRun, spans: list[Span] | None = None) -> Path:
    rd = RunDir.create(path, RunRecord(run_id=path.name, kind="simulated"))
    w = rd.sample_writer()
    w.write(run.samples)
    w.close()
    w = rd.span_writer()
    spans = run.spans if spans is None else spans
    w.write([Span(s.step, s.phase, float(s.t0_s), float(s.t1_s)) for s in spans])
    w.close()
    return path


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return write_run(tmp_path / "run", simulated(40))


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run `jouleprof ARGS` in process: (exit code, stderr)."""
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr().err


def test_no_spans_file(run_dir, capsys):
    (run_dir / "spans.csv").unlink()
    with pytest.raises(AttributionError, match="no phase spans"):
        attribute(run_dir, "regression")
    code, err = cli(capsys, "attribute", str(run_dir))
    assert code == 2 and "no phase spans" in err and "phase recorder" in err


@pytest.mark.parametrize("content", ["", "step,phase,t0_s,t1_s,host_t0_s,host_t1_s\n"])
def test_empty_spans_file(run_dir, content):
    (run_dir / "spans.csv").write_text(content)
    with pytest.raises(AttributionError, match="no phase spans"):
        attribute(run_dir, "proportional")


def test_spans_outside_the_samples_time_range(tmp_path, capsys):
    run = simulated(40)
    late = [Span(s.step, s.phase, s.t0_s + 1000.0, s.t1_s + 1000.0) for s in run.spans]
    d = write_run(tmp_path / "run", run, late)
    with pytest.raises(AttributionError, match="outside the time range"):
        attribute(d, "regression")
    code, err = cli(capsys, "attribute", str(d), "--method", "proportional")
    assert code == 2 and "share one clock" in err


def test_overlapping_steps(tmp_path, capsys):
    run = simulated(40)
    spans = list(run.spans)
    # Step 7's spans numbered as step 3: two "steps" now interleave in time.
    spans = [Span(3 if s.step == 7 else s.step, s.phase, s.t0_s, s.t1_s) for s in spans]
    d = write_run(tmp_path / "run", run, spans)
    with pytest.raises(AttributionError, match=r"steps .* overlap by"):
        attribute(d, "regression")
    code, err = cli(capsys, "attribute", str(d))
    assert code == 2 and "overlap" in err


def test_unknown_method_lists_the_valid_ones(run_dir, capsys):
    with pytest.raises(AttributionError, match="proportional, regression, isolation"):
        attribute(run_dir, "magic")
    code, err = cli(capsys, "attribute", str(run_dir), "--method", "magic")
    assert code == 2 and "proportional, regression, isolation" in err
    assert not (run_dir / "phases.csv").exists()


def test_a_phase_with_too_few_intervals_is_unresolved_not_zero(tmp_path, capsys):
    d = write_run(tmp_path / "run", simulated(12))  # 4.5 s: a 3 ms phase is barely seen
    res = attribute(d, "regression")
    data = res.device("gpu0").phase("data")
    assert not data.resolved
    assert data.energy_j is None and data.energy_lo_j is None and data.mean_power_w is None
    assert "sensor intervals overlap it" in data.note
    assert res.device("gpu0").phase("forward").resolved
    path = write_phases(d, res)
    table = pd.read_csv(path)
    row = table[table["phase"] == "data"].iloc[0]
    assert pd.isna(row["energy_j"]) and not row["resolved"] and row["note"]
    code, err = cli(capsys, "attribute", str(d))
    assert code is None or code == 0


def test_samples_without_any_energy_or_power(tmp_path, capsys):
    run = simulated(40)
    d = write_run(tmp_path / "run", run)
    s = pd.read_csv(d / "samples.csv")
    s[["energy_j", "power_w", "power_instant_w"]] = float("nan")
    s.to_csv(d / "samples.csv", index=False)
    for method in ("proportional", "regression"):
        with pytest.raises(AttributionError, match="no energy counter or power readings"):
            attribute(d, method)
    code, err = cli(capsys, "attribute", str(d))
    assert code == 2 and "no energy counter or power" in err


def test_isolation_needs_a_run_made_with_isolation(run_dir, capsys):
    with pytest.raises(AttributionError, match="isolation enabled"):
        attribute(run_dir, "isolation")
    code, err = cli(capsys, "attribute", str(run_dir), "--method", "isolation")
    assert code == 2 and "isolation enabled" in err


def test_more_warmup_steps_than_steps(run_dir):
    with pytest.raises(AttributionError, match="nothing is left to attribute"):
        attribute(run_dir, "proportional", warmup_steps=40)
    with pytest.raises(AttributionError, match="≥ 0"):
        attribute(run_dir, "proportional", warmup_steps=-1)


def test_unknown_device_and_unknown_option(run_dir):
    with pytest.raises(AttributionError, match=r"no device 'gpu7'.*gpu0"):
        attribute(run_dir, "regression", device="gpu7")
    with pytest.raises(AttributionError, match="unknown regression option"):
        attribute(run_dir, "regression", bootstrap=3)
    with pytest.raises(AttributionError, match="n_boot must be ≥ 200"):
        attribute(run_dir, "regression", n_boot=10)
    with pytest.raises(AttributionError, match="takes no option"):
        attribute(run_dir, "proportional", n_boot=300)


def test_unreadable_span_times(run_dir):
    # A damaged row (as a crash leaves) costs its step, with a note; the rest is attributed.
    spans = pd.read_csv(run_dir / "spans.csv")
    spans["t1_s"] = spans["t1_s"].astype(object)
    step = int(spans.loc[5, "step"])
    spans.loc[5, "t1_s"] = "soon"
    spans.to_csv(run_dir / "spans.csv", index=False)
    rd = RunDir(run_dir)
    assert step not in set(rd.read_spans()["step"])
    assert any("unreadable" in n for n in rd.notes)
    assert attribute(run_dir, "regression").devices[0].n_steps > 0
    # Reversed times are no crash's doing and stay an error.
    spans.loc[5, "t1_s"] = float(spans.loc[5, "t0_s"]) - 1.0
    spans.to_csv(run_dir / "spans.csv", index=False)
    with pytest.raises(AttributionError, match="unreadable or reversed"):
        attribute(run_dir, "regression")


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunDirError):
        attribute(tmp_path / "nowhere", "regression")


def test_a_counter_read_too_rarely_is_left_out_with_a_note(tmp_path):
    run = simulate_training(PHASES, 200, span_noise_s=50e-6, seed=1)
    d = write_run(tmp_path / "run", run)
    s = pd.read_csv(d / "samples.csv")
    reads = s.index[s["energy_j"].notna()]
    sparse = reads[1:-1][np.arange(len(reads) - 2) % 10 != 0]  # about one read a second
    s.loc[sparse, "energy_j"] = float("nan")
    s.to_csv(d / "samples.csv", index=False)
    res = attribute(d, "regression").device("gpu0")
    if "counter" in res.diagnostics["rows"]:
        pytest.skip("this core has one refresh grid for every signal")
    assert any("read too rarely" in n for n in res.notes)
    assert res.phase("forward").resolved


def test_buffer_rows_asked_for_on_a_run_without_a_buffer(run_dir, capsys):
    code, err = cli(capsys, "attribute", str(run_dir), "--buffer-rows")
    assert code not in (None, 0)
    assert "power_buffer.csv" in err and "--power-buffer" in err
