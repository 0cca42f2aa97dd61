import json

import pandas as pd
import pytest

from jouleprof.errors import RunDirError
from jouleprof.store.rundir import RunDir
from jouleprof.types import Figure, RunRecord, RunStatus, Sample, Span


def _record():
    return RunRecord(run_id="r1", kind="test", config={"a": 1})


def test_round_trip(tmp_path):
    rd = RunDir.create(tmp_path / "run", _record())
    w = rd.sample_writer()
    w.write(
        [Sample(0.0, "gpu0", power_w=100.5, energy_j=1.25), Sample(0.02, "gpu0", util_pct=50.0)]
    )
    w.close()
    sw = rd.span_writer()
    sw.write([Span(0, "forward", 0.0, 0.01, 0.0, 0.001), Span(0, "forward/target", 0.0, 0.005)])
    sw.close()
    rec = rd.read_record()
    rec.summary["x"] = Figure.measured(3.5, "J", signal="counter", lo=3.0, hi=4.0)
    rec.summary["y"] = Figure.unavailable("J", "no driver")
    rec.status = RunStatus.COMPLETE
    rd.write_record(rec)

    again = RunDir(tmp_path / "run")
    r2 = again.read_record()
    assert r2.summary["x"] == rec.summary["x"]
    assert r2.summary["y"].value is None and r2.summary["y"].reason == "no driver"
    assert r2.status is RunStatus.COMPLETE and r2.config == {"a": 1}
    s = again.read_samples()
    assert s.loc[0, "power_w"] == 100.5 and s.loc[0, "energy_j"] == 1.25
    assert pd.isna(s.loc[1, "power_w"])  # empty cell: not read, never zero
    sp = again.read_spans()
    assert list(sp["phase"]) == ["forward", "forward/target"]
    assert pd.isna(sp.loc[1, "host_t0_s"])


def test_refuses_a_file_and_an_existing_run(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        RunDir.create(f, _record())
    RunDir.create(tmp_path / "r", _record())
    with pytest.raises(RunDirError, match="already holds a run"):
        RunDir.create(tmp_path / "r", _record())


def test_missing_and_bad_files_say_what_is_wrong(tmp_path):
    with pytest.raises(RunDirError, match="not a run directory"):
        RunDir(tmp_path).read_record()
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(RunDirError, match="not a valid run record"):
        RunDir(tmp_path).read_record()
    (tmp_path / "samples.csv").write_text("")
    with pytest.raises(RunDirError, match="empty"):
        RunDir(tmp_path).read_samples()
    (tmp_path / "spans.csv").write_text("step,phase\n0,forward\n")
    with pytest.raises(RunDirError, match="lacks the columns"):
        RunDir(tmp_path).read_spans()


def test_newer_schema_is_refused(tmp_path):
    rd = RunDir.create(tmp_path / "r", _record())
    d = json.loads((rd.path / "run.json").read_text())
    d["schema_version"] = 99
    (rd.path / "run.json").write_text(json.dumps(d))
    with pytest.raises(RunDirError, match="schema_version"):
        rd.read_record()


def test_a_crash_mid_write_leaves_readable_rows(tmp_path):
    rd = RunDir.create(tmp_path / "r", _record())
    w = rd.sample_writer()
    w.write([Sample(float(i) / 50, "gpu0", power_w=200.0) for i in range(100)])
    w.flush()  # no close(): the process "died" here
    assert len(rd.read_samples()) == 100
    assert rd.read_record().status is RunStatus.RUNNING


def test_figures_refuse_silent_zeros():
    with pytest.raises(ValueError, match="reason"):
        Figure(None, "J", Figure.unavailable("J", "x").source)
    with pytest.raises(ValueError, match="needs a value"):
        Figure(None, "J", Figure.measured(1.0, "J").source)
