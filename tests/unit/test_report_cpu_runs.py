"""Reports of what a new user on a CPU-only machine gets: a video probe that measured no GPU
energy, `jouleprof summarize --print` on a narrow terminal, and a plain `jouleprof measure`
run that recorded no steps. Each message says what the directory holds, not something else."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from jouleprof.report import build_report
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus, Sample, Span

NO_GPU = (
    "opening NVML failed: NVIDIA driver not loaded: libnvidia-ml.so not found — install the "
    "NVIDIA driver or run on a machine with an NVIDIA GPU"
)


def _cell(model, method, j="", note=""):
    return {
        "model": model,
        "method": method,
        "precision": "fp32",
        "checkpointing": "off",
        "batch": "1",
        "status": "ok",
        "trainable_params": "100",
        "peak_mem_mib": "",
        "s_per_step": "0.2" if method == "full" else "0.1",
        "j_per_step": j,
        "j_per_step_lo": j and str(float(j) * 0.9),
        "j_per_step_hi": j and str(float(j) * 1.1),
        "error": "",
        "energy_note": note,
    }


def _probe_dir(root: Path, rows: list[dict[str, str]]) -> Path:
    root.mkdir()
    with (root / "probe.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root


def _cpu_probe(root: Path) -> Path:
    """What `jouleprof probe video` writes on a machine without a GPU: every cell trained,
    with its time, and no energy (the note says why)."""
    note = f"unavailable: {NO_GPU}; peak memory: no CUDA device"
    return _probe_dir(
        root,
        [_cell(m, meth, note=note) for m in ("hiera-b", "videomae-b") for meth in ("full", "lora")],
    )


def _ratio_plot(probe: Path):
    report = build_report(probe)
    return next(p for p in report.plots if p.name == "energy_ratio")


def test_a_probe_without_gpu_energy_says_no_energy_was_measured(tmp_path):
    plot = _ratio_plot(_cpu_probe(tmp_path / "probe"))
    assert plot.path is None
    assert "no method trained" not in plot.reason  # lora trained beside full
    assert "no GPU energy was measured" in plot.reason
    assert "NVIDIA driver not loaded" in plot.reason  # the cells' own reason, once
    assert plot.reason.count("NVIDIA driver not loaded") == 1


def test_a_probe_where_only_full_trained_still_says_so(tmp_path):
    rows = [_cell("m", "full", j="40"), {**_cell("m", "lora"), "status": "oom"}]
    plot = _ratio_plot(_probe_dir(tmp_path / "probe", rows))
    assert plot.path is None and "no method trained beside full fine-tuning" in plot.reason


def test_a_probe_with_energy_draws_the_ratio(tmp_path):
    rows = [_cell("m", "full", j="40"), _cell("m", "lora", j="30")]
    plot = _ratio_plot(_probe_dir(tmp_path / "probe", rows))
    assert plot.path is not None and plot.path.is_file()


def test_summarize_print_is_not_wrapped_by_a_narrow_terminal(tmp_path):
    """The printed markdown is the file's, line for line: a 40-column terminal (COLUMNS=40)
    once split the header row inside a cell ("J/step \\n[bounds]")."""
    probe = _cpu_probe(tmp_path / "probe")
    env = {**os.environ, "COLUMNS": "40", "TERM": "xterm"}
    r = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "summarize", str(probe), "--print"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    md = (probe / "probe_savings.md").read_text()
    assert r.stdout.strip("\n") == md.strip("\n")
    header = next(line for line in r.stdout.splitlines() if line.startswith("| model |"))
    assert header.endswith("| vs full [bounds] |")


# -- a run ---------------------------------------------------------------------------------


def _measure_run(path: Path, with_samples: bool) -> Path:
    """A plain `jouleprof measure -- CMD` run: samples.csv, no steps.csv, no spans.csv."""
    gpu = Figure.measured(120.0, "J", signal="counter") if with_samples else None
    rec = RunRecord(
        run_id=path.name,
        kind="measure",
        status=RunStatus.COMPLETE,
        summary={
            "wall_time_s": Figure.measured(2.0, "s", signal="timer"),
            "gpu_energy_j": gpu or Figure.unavailable("J", NO_GPU),
        },
    )
    rd = RunDir.create(path, rec)
    w = rd.sample_writer()
    if with_samples:
        w.write([Sample(0.1 * i, "gpu0", 60.0, energy_j=6.0 * i) for i in range(20)])
    w.close()
    return path


def _zoom(report):
    return next(p for p in report.plots if p.name == "timeline_zoom")


def test_a_run_without_steps_claims_no_steps_or_phases(tmp_path):
    for with_samples in (False, True):
        run = _measure_run(tmp_path / f"run{with_samples}", with_samples)
        report = build_report(run)
        zoom = _zoom(report)
        assert zoom.path is None
        assert "step" not in zoom.title and "phase" not in zoom.title, zoom.title
        assert "recorded no steps" in zoom.reason, zoom.reason
        timeline = next(p for p in report.plots if p.name == "timeline")
        assert (timeline.path is not None) == with_samples
        html = report.html.read_text()
        assert "a few steps of the measured segment" not in html
        assert "recorded no steps" in html


def test_the_zoom_title_counts_the_steps_it_shows(tmp_path):
    """A run of 3 steps shows 3 steps, not ZOOM_STEPS (6)."""
    path = tmp_path / "short"
    rd = RunDir.create(
        path,
        RunRecord(run_id="short", kind="measure", status=RunStatus.COMPLETE, summary={}),
    )
    w = rd.sample_writer()
    w.write([Sample(0.05 * i, "gpu0", 60.0, energy_j=3.0 * i) for i in range(20)])
    w.close()
    w = rd.span_writer()
    w.write([Span(s, p, s * 0.3 + i * 0.1, s * 0.3 + i * 0.1 + 0.1)
             for s in range(3) for i, p in enumerate(("data", "forward", "backward"))])  # fmt: skip
    w.close()
    zoom = _zoom(build_report(path))
    assert zoom.path is not None, zoom.reason
    assert zoom.title == "Telemetry over 3 steps, phases shaded"


def test_a_killed_run_is_reported_crashed_not_running(tmp_path):
    import json
    import subprocess
    import sys

    from jouleprof.report.compare import compare_runs
    from jouleprof.report.html import write_run_report
    from jouleprof.store.rundir import RunDir
    from jouleprof.types import RunRecord, RunStatus

    out = subprocess.run(  # the writer info of a process that has ended: a killed run's
        [sys.executable, "-c", "import json; from jouleprof.store.liveness import writer_info; "
         "print(json.dumps(writer_info()))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rec = RunRecord(run_id="k", kind="test", status=RunStatus.RUNNING,
                    extra={"writer": json.loads(out)})  # fmt: skip
    run = tmp_path / "killed"
    RunDir.create(run, rec)
    html = write_run_report(run).read_text()
    assert "status crashed" in html and "status running" not in html
    cmp = compare_runs([run, run])
    assert any("status crashed" in p for p in cmp.problems), cmp.problems


def test_compare_says_why_a_figure_is_missing_on_one_side():
    from jouleprof.report.compare import Value, diff

    assert diff(Value(1.0), Value(None, reason="unresolved")).note == "this: unresolved"
    first_missing = diff(Value(None, reason="not attributed"), Value(2.0))
    assert first_missing.note == "the first: not attributed"
    assert diff(Value(None), Value(None)).note == ""
