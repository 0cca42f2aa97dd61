"""`jouleprof report DIR` end to end, through a subprocess: a study, a run, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from conftest import jouleprof_many
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus

JP = [sys.executable, "-m", "jouleprof.cli.main"]
NO_GPU = "opening NVML failed: NVIDIA driver not loaded"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JP, *args], capture_output=True, text=True, timeout=600)


def write_study(root: Path) -> Path:
    """Two batch sizes × e2e × 2 reps with known means, plus a cell out of memory."""
    root.mkdir()
    (root / "study.json").write_text(
        json.dumps(
            {
                "workload": "vjepa2",
                "preset": "tiny",
                "batch_sizes": [1, 2, 4],
                "modes": ["e2e"],
                "reps": 2,
                "duration_s": 5,
            }
        )
    )
    rows = []
    values = {1: (10.0, 0.02), 2: (15.0, 0.015)}
    for bs in (1, 2, 4):
        for rep in range(2):
            cid = f"bs{bs}-e2e-r{rep}"
            row = {
                "cell_id": cid,
                "batch_size": bs,
                "mode": "e2e",
                "rep": rep,
                "status": "complete",
                "error": "",
                "run_dir": f"cells/{cid}",
            }
            if bs == 4:
                row.update(status="oom", error="out of memory at batch size 4")
            else:
                d = 0.05 if rep == 0 else -0.05
                thr, kwh = values[bs]
                row.update(
                    throughput_samples_per_s=thr * (1 + d),
                    energy_per_1000_samples_kwh=kwh * (1 + d),
                )
                RunDir.create(
                    root / "cells" / cid,
                    RunRecord(
                        run_id=cid,
                        kind="cell",
                        status=RunStatus.COMPLETE,
                        summary={
                            "throughput_samples_per_s": Figure.measured(
                                row["throughput_samples_per_s"], "samples/s", signal="timer"
                            )
                        },
                        notes=["warm-up excluded: at least 2 steps"],
                        extra={"mode": "e2e"},
                    ),
                )
            rows.append(row)
    pd.DataFrame(rows).to_csv(root / "runs.csv", index=False)
    return root


def test_study_report_json(tmp_path):
    d = write_study(tmp_path / "study")
    r = run("report", str(d), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "study" and Path(doc["html"]) == d / "report.html"
    assert (d / "report.html").is_file()
    assert doc["sentences"][0].startswith(
        "Batch-size effect from e2e mode: means over its complete repetitions (n=2"
    )
    assert doc["sentences"][1:] == [
        "Batch size 1 → 2: throughput from 10 to 15 samples/s (+50.0%), GPU energy per 1,000 "
        "samples from 0.02 to 0.015 kWh (\u221225.0%)",
        "Batch size 4 left out: out of memory in 2 of 2 cells",
    ]
    drawn = [f for f in doc["figures"] if f["path"]]
    assert any(f["name"] == "batch_size_effect" for f in drawn)
    for f in doc["figures"]:
        assert f["path"] or f["reason"], f  # every missing figure says why
    names = {t["name"] for t in doc["tables"]}
    assert {"batch_size_effect", "batch_size_effect_all_pairs", "failed_cells"} <= names


def test_run_report_and_rerun(tmp_path):
    rec = RunRecord(
        run_id="r1",
        kind="cell",
        status=RunStatus.COMPLETE,
        summary={"energy_per_sample_j": Figure.unavailable("J", NO_GPU)},
        notes=["warm-up excluded: at least 2 steps"],
        extra={"mode": "fine"},
    )
    rd = RunDir.create(tmp_path / "run", rec)
    for _ in range(2):  # regenerating replaces the report
        r = run("report", str(rd.path))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(rd.path / "report.html")
    text = (rd.path / "report.html").read_text()
    assert f"unavailable ({NO_GPU})" in text
    assert "unavailable" in r.stderr  # the timeline has no readings, and says so


def test_bad_directories_fail_clearly(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "f.txt").write_text("x")
    missing, plain, file = jouleprof_many(
        [["report", tmp_path / name] for name in ("missing", "plain", "f.txt")]
    )
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    assert plain.returncode != 0 and "neither a run directory" in plain.stderr
    assert file.returncode != 0 and "not a directory" in file.stderr


def test_video_study_report_answers_by_ns(tmp_path):
    """`jouleprof report` on a video study (the committed H200 compact study): the answer table
    is each model's best run by NS#, as `jouleprof summarize` picks it."""
    import shutil

    import pytest

    from jouleprof.report.video_summary import best_per_model, cell_rows

    src = Path(__file__).resolve().parents[2] / "benchmarks/results/video_study/h200_compact"
    if not src.is_dir():
        pytest.skip("the committed H200 video study is absent")
    study = tmp_path / "study"
    shutil.copytree(src, study)
    r = run("report", str(study), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s.split(":")[0] for s in doc["sentences"]] == ["swin3d-b", "videomae-b"]
    answer = pd.read_csv(study / "report" / "answer.csv")
    best = {b["model"]: b["best"] for b in best_per_model(cell_rows(study))}
    assert set(answer["model"]) == set(best)
    for row in answer.itertuples():
        assert row.ns_hash == pytest.approx(best[row.model]["ns_hash"])
        assert row.ranked_by == "NS#"
    assert (study / "report" / "ns_hash.png").is_file()
    assert (study / "report" / "peft_savings.csv").is_file()
