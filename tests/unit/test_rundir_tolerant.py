"""Run directories as a crash leaves them: every reader keeps the complete rows and says what
it dropped; a run whose writer is gone reads as crashed; run.json has the other files' mode."""

from __future__ import annotations

import math
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jouleprof.errors import RunDirError
from jouleprof.store.liveness import effective_status, writer_info
from jouleprof.store.rundir import RunDir, read_csv_tolerant, spans_covered
from jouleprof.types import PHASE_COLUMNS, SAMPLE_COLUMNS, SPAN_COLUMNS, RunRecord, RunStatus

_num = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda v: repr(float(v)))
_opt = st.one_of(st.just(""), _num)


def _sample_row():
    return st.tuples(_num, st.sampled_from(["gpu0", "gpu1", "cpu"]), *[_opt] * 7)


def _span_row():
    return st.tuples(
        st.integers(0, 10_000).map(str),
        st.sampled_from(["data", "forward", "forward/target", "backward"]),
        _num,
        _num,
        _opt,
        _opt,
    )


def _phase_row():
    return st.tuples(
        st.sampled_from(["data", "forward", "backward+optimizer"]),
        _num,
        _opt,
        _opt,
        _opt,
        st.sampled_from(["regression", "proportional"]),
    )


TABLES = {
    # file, columns, row strategy, reader
    "samples": ("samples.csv", SAMPLE_COLUMNS, _sample_row, lambda rd: rd.read_samples()),
    "spans": ("spans.csv", SPAN_COLUMNS, _span_row, lambda rd: rd.read_spans()),
    "phases": ("phases.csv", PHASE_COLUMNS, _phase_row, lambda rd: rd.read_phases()),
}


def _text(columns, rows) -> str:
    return ",".join(columns) + "\n" + "".join(",".join(r) + "\n" for r in rows)


def _as_tuples(df, columns):
    """Rows of a DataFrame as the tuples of cells they were written from (NaN as "")."""
    out = []
    for rec in df[list(columns)].itertuples(index=False):
        cells = []
        for v in rec:
            if isinstance(v, float) and math.isnan(v):
                cells.append("")
            elif isinstance(v, str):
                cells.append(v)
            else:
                cells.append(float(v))
        out.append(tuple(cells))
    return out


def _norm(row):
    return tuple(c if not _isnum(c) else float(c) for c in row)


def _isnum(c: str) -> bool:
    try:
        float(c)
    except ValueError:
        return False
    return True


FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("table", sorted(TABLES))
@FUZZ
@given(data=st.data())
def test_a_truncated_table_keeps_every_complete_row(tmp_path, table, data):
    name, cols, rows_st, read = TABLES[table]
    rows = data.draw(st.lists(rows_st(), min_size=1, max_size=30))
    text = _text(cols, rows).encode()
    header_len = len(",".join(cols)) + 1
    cut = data.draw(st.integers(header_len, len(text)))
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    (d / name).write_bytes(text[:cut])
    rd = RunDir(d)
    df = read(rd)
    # the rows whose newline survived, each whole; nothing else
    kept = text[:cut].decode().split("\n")[1:-1]
    want = [_norm(r) for r in rows[: len(kept)]]
    got = _as_tuples(df, cols)
    if table == "samples":  # sorted by time
        want = sorted(want, key=lambda r: r[0])
        got = sorted(got, key=lambda r: r[0])
    assert got == want
    partial = cut < len(text) and not text[:cut].endswith(b"\n")
    assert any("partial last row" in n for n in rd.notes) == partial


@pytest.mark.parametrize("table", sorted(TABLES))
@FUZZ
@given(data=st.data())
def test_garbage_rows_are_dropped_and_the_rest_kept(tmp_path, table, data):
    name, cols, rows_st, read = TABLES[table]
    rows = data.draw(st.lists(rows_st(), min_size=1, max_size=20))
    lines = _text(cols, rows).split("\n")[:-1]
    n_bad = data.draw(st.integers(1, 3))
    bad_at = sorted(data.draw(st.lists(st.integers(1, len(lines) - 1), min_size=1, max_size=n_bad)))
    garbage = st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
        max_size=40,
    )
    damaged = list(lines)
    for i in bad_at:
        damaged[i] = data.draw(st.one_of(garbage, st.just(damaged[i][: len(damaged[i]) // 2])))
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    (d / name).write_text("\n".join(damaged) + "\n")
    rd = RunDir(d)
    df = read(rd)  # never raises on a damaged row
    got = _as_tuples(df, cols)
    untouched = [_norm(rows[i - 1]) for i in range(1, len(lines)) if i not in bad_at]
    # spans.csv leaves out a damaged row's whole step (its other phases would take its time)
    lost_steps = {
        float(m.group(1))
        for i in bad_at
        if table == "spans" and (m := re.fullmatch(r"\s*([0-9]+)\s*", damaged[i].split(",")[0]))
    }
    for r in untouched:  # every undamaged row is there
        if table == "spans" and r[0] in lost_steps:
            continue
        assert r in got
    assert len(got) <= len(lines) - 1


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_file_without_a_header_or_empty_says_so(tmp_path, table):
    name, cols, _, read = TABLES[table]
    (tmp_path / name).write_text("")
    with pytest.raises(RunDirError, match="empty"):
        read(RunDir(tmp_path))
    (tmp_path / name).write_text(",".join(cols)[:5])
    with pytest.raises(RunDirError):
        read(RunDir(tmp_path))
    (tmp_path / name).write_text("garbage,header\n1,2\n")
    with pytest.raises(RunDirError, match="lacks the columns"):
        read(RunDir(tmp_path))


def test_power_buffer_and_other_tables_read_tolerantly(tmp_path):
    p = tmp_path / "power_buffer.csv"
    p.write_text("t_s,device,power_w,timestamp_us\n0.1,gpu0,300.5,100\n0.12,gpu0,30")
    df, notes = read_csv_tolerant(p, ("t_s", "device", "power_w"), ("t_s", "device"))
    assert df["power_w"].tolist() == [300.5] and notes


def test_spans_past_the_last_sample_keep_the_covered_steps():
    import pandas as pd

    samples = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "device": ["gpu0"] * 4})
    spans = pd.DataFrame(
        {
            "step": [0, 0, 1, 1, 2],
            "phase": ["a", "b"] * 2 + ["a"],
            "t0_s": [0.1, 0.5, 1.0, 1.5, 1.9],
            "t1_s": [0.5, 0.9, 1.5, 1.9, 3.4],
        }
    )
    kept, note = spans_covered(spans, samples)
    assert sorted(kept["step"].unique()) == [0, 1]
    assert "1 of 3 steps" in note
    same, none = spans_covered(spans[spans["step"] < 2], samples)
    assert none is None and len(same) == 4
    # After a crash, a step ending in the sampler's last refreshes has no reading after it.
    late = spans.assign(t1_s=spans["t1_s"].where(spans["step"] != 1, 2.8))
    kept, note = spans_covered(late, samples)
    assert sorted(kept["step"].unique()) == [0] and "2 of 3 steps" in note


def _record(tmp_path, **extra):
    rec = RunRecord(run_id="r", kind="test", extra=dict(extra))
    return RunDir.create(tmp_path / "run", rec)


def test_run_json_has_the_mode_of_every_other_file(tmp_path):
    rd = _record(tmp_path)
    w = rd.sample_writer()
    w.close()
    mode_json = stat.S_IMODE(os.stat(rd.path / "run.json").st_mode)
    mode_csv = stat.S_IMODE(os.stat(rd.path / "samples.csv").st_mode)
    assert mode_json == mode_csv


def test_a_running_run_whose_writer_lives_is_running(tmp_path):
    rd = _record(tmp_path)
    assert rd.read_record().extra["writer"]["pid"] == os.getpid()
    assert effective_status(rd.path).status == "running"
    rec = rd.read_record()
    rec.status = RunStatus.COMPLETE
    rd.write_record(rec)
    assert effective_status(rd.path).status == "complete"


def test_a_killed_writer_makes_the_run_crashed(tmp_path):
    code = (
        "import sys, time\n"
        "from jouleprof.store.rundir import RunDir\n"
        "from jouleprof.types import RunRecord\n"
        "RunDir.create(sys.argv[1], RunRecord(run_id='k', kind='test'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    out = tmp_path / "killed"
    p = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    assert effective_status(out).status == "running"
    p.kill()
    p.wait()
    state = effective_status(out)
    assert state.status == "crashed" and state.recorded == "running"
    assert f"pid {p.pid}" in state.reason


def test_a_copied_run_nobody_has_written_for_long_is_crashed(tmp_path):
    info = {**writer_info(), "host_key": "another-machine"}
    rd = _record(tmp_path, writer=info)
    assert effective_status(rd.path).status == "running"  # recent: cannot tell
    old = time.time() - 2 * 3600
    for f in rd.path.iterdir():
        os.utime(f, (old, old))
    assert effective_status(rd.path).status == "crashed"


def test_a_damaged_span_row_with_a_control_character_after_its_step(tmp_path):
    # hypothesis found this one: "0\x1f" passes str.strip().isdigit() but not int()
    head = ",".join(SPAN_COLUMNS)
    rows = ["0,data,0.0,0.1,,", "0\x1f", "1,data,0.2,0.3,,", "², garbage"]
    (tmp_path / "spans.csv").write_text("\n".join([head, *rows]) + "\n")
    rd = RunDir(tmp_path)
    df = rd.read_spans()
    assert list(df["step"]) == [1]  # step 0 lost a row: left out whole; "²" names no step
    assert any("left out step(s) [0]" in n for n in rd.notes)


def test_a_damaged_row_holding_a_stray_quote_does_not_swallow_the_rows_after_it(tmp_path):
    # hypothesis found this one: a row reading only `"` opened a quoted field that ran to the
    # end of the file, and every row after it was lost
    head = ",".join(SPAN_COLUMNS)
    rows = ["0,data,0.0,0.1,,", '"', "1,data,0.2,0.3,,", "2,data,0.4,0.5,,"]
    (tmp_path / "spans.csv").write_text("\n".join([head, *rows]) + "\n")
    rd = RunDir(tmp_path)
    df = rd.read_spans()
    assert list(df["step"]) == [0, 1, 2]
    assert any("wrong number of fields" in n for n in rd.notes)
