"""The run directory: run.json, samples.csv, spans.csv, phases.csv (docs/rundir.md).

Writers append rows as they arrive and flush often, so Ctrl-C, an OOM or a crash leaves a
readable directory; run.json is replaced atomically and says whether the run completed.

Readers are tolerant of what a crash leaves: they keep every complete row, drop a partial last
row (a write cut short) and rows that do not parse, and say so in `RunDir.notes`. run.json
names its writer (pid, a key of the host, the process's start), so a run whose writer is gone
while its status still says "running" is reported as crashed (`liveness.effective_status`).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from jouleprof.errors import RunDirError
from jouleprof.store.liveness import writer_info
from jouleprof.types import (
    PHASE_COLUMNS,
    SAMPLE_COLUMNS,
    SPAN_COLUMNS,
    RunRecord,
    Sample,
    Span,
)

log = logging.getLogger(__name__)

RUN_JSON = "run.json"
SAMPLES_CSV = "samples.csv"
SPANS_CSV = "spans.csv"
PHASES_CSV = "phases.csv"


def new_run_id(kind: str) -> str:
    """A readable, unique id: kind, local date-time, and 4 random hex digits."""
    return f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _cell(v: Any) -> str:
    if v is None:
        return ""  # an empty cell is "not read this time", never zero
    if isinstance(v, float):  # numpy floats too: repr(float(...)) is the shortest exact text
        return repr(float(v))
    if hasattr(v, "item"):  # other numpy scalars
        return str(v.item())
    return str(v)


class CsvAppender:
    """Appends rows to a CSV file with a fixed header, flushing on request."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self.columns = tuple(columns)
        new = not path.exists() or path.stat().st_size == 0
        if not new:
            with path.open(newline="") as f:
                header = next(csv.reader(f), [])
            if tuple(header[: len(self.columns)]) != self.columns:
                raise RunDirError(
                    f"{path} has columns {header}, expected {list(self.columns)}: "
                    "it was written by something else; choose another run directory"
                )
        self._f: IO[str] = path.open("a", newline="")
        self._w = csv.writer(self._f)
        if new:
            self._w.writerow(self.columns)
            self._f.flush()

    def write_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        self._w.writerows([_cell(v) for v in row] for row in rows)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            self._f.close()


class SampleWriter(CsvAppender):
    """A `SampleSink` that appends to samples.csv."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SAMPLE_COLUMNS)

    def write(self, samples: Sequence[Sample]) -> None:
        self.write_rows(s.row() for s in samples)


class SpanWriter(CsvAppender):
    """Appends phase spans to spans.csv."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, SPAN_COLUMNS)

    def write(self, spans: Sequence[Span]) -> None:
        self.write_rows(s.row() for s in spans)


def _check_dir_path(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise RunDirError(
            f"output path {path} is a file, not a directory: choose another output directory "
            "(--out; in Python, the run directory argument)"
        )


class RunDir:
    """One run's directory on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.notes: list[str] = []
        """What the tolerant readers dropped from a damaged file, one note each."""

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], record: RunRecord) -> RunDir:
        """Make a new run directory and write its first run.json (status running).

        Raises:
            RunDirError: the path is a file, already holds a run, or cannot be written.
        """
        p = Path(path)
        _check_dir_path(p)
        if (p / RUN_JSON).exists():
            raise RunDirError(
                f"{p} already holds a run ({RUN_JSON} exists): choose another output directory "
                "(--out; in Python, the run directory argument) or remove it"
            )
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create run directory {p}: {e.strerror or e}") from e
        rd = cls(p)
        record.extra.setdefault("writer", writer_info())
        rd.write_record(record)
        return rd

    def sample_writer(self) -> SampleWriter:
        return SampleWriter(self.path / SAMPLES_CSV)

    def span_writer(self) -> SpanWriter:
        return SpanWriter(self.path / SPANS_CSV)

    # -- run.json ------------------------------------------------------------------------------

    def write_record(self, record: RunRecord) -> None:
        """Replace run.json atomically (a reader never sees half a file)."""
        data = json.dumps(record.to_json(), indent=2, sort_keys=False, default=_json_default)
        fd, tmp = tempfile.mkstemp(prefix=".run.", suffix=".json", dir=self.path)
        try:
            # mkstemp makes the file 0600; run.json gets the mode every other file gets (0644
            # under the usual umask 022).
            os.fchmod(fd, 0o666 & ~_umask())
            with os.fdopen(fd, "w") as f:
                f.write(data + "\n")
            os.replace(tmp, self.path / RUN_JSON)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def read_record(self) -> RunRecord:
        p = self.path / RUN_JSON
        if not p.is_file():
            raise RunDirError(f"{self.path} is not a run directory: no {RUN_JSON} in it")
        try:
            return RunRecord.from_json(json.loads(p.read_text()))
        except (json.JSONDecodeError, KeyError, ValueError) as e:
            raise RunDirError(f"{p} is not a valid run record: {e}") from e

    # -- tables --------------------------------------------------------------------------------

    def read_samples(self):  # -> pandas.DataFrame
        """samples.csv as a DataFrame sorted by time (empty cells are NaN; see `_read_csv` for
        what a damaged file gives)."""
        df = self._read_csv(SAMPLES_CSV, SAMPLE_COLUMNS, key=("t_s", "device"))
        df["device"] = df["device"].astype(str)
        return df.sort_values("t_s", kind="stable").reset_index(drop=True)

    def read_spans(self):  # -> pandas.DataFrame
        """spans.csv as a DataFrame. A step one of whose rows was unreadable is left out
        whole (with a note): with a phase missing, its other phases would take its time."""
        dropped: list[list[str]] = []
        df = self._read_csv(SPANS_CSV, SPAN_COLUMNS[:4], key=SPAN_COLUMNS[:4], dropped=dropped)
        df["phase"] = df["phase"].astype(str)
        shown = {_step_of(r[0]) for r in dropped if r} - {None}
        bad = sorted(shown & set(df["step"]))
        if bad:
            df = df[~df["step"].isin(bad)].reset_index(drop=True)
            more = " …" if len(bad) > 5 else ""
            n = f"spans.csv: left out step(s) {bad[:5]}{more} whole: a row of each was unreadable"
            if n not in self.notes:
                self.notes.append(n)
        return df

    def read_phases(self, name: str = PHASES_CSV):  # -> pandas.DataFrame
        """phases.csv (or phases_<method>.csv) as a DataFrame."""
        return self._read_csv(name, PHASE_COLUMNS)

    def write_phases(self, df, name: str = PHASES_CSV) -> Path:
        """Write phases.csv (or another `name`, e.g. phases_regression.csv) atomically; `df`
        holds at least PHASE_COLUMNS."""
        missing = [c for c in PHASE_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"phases table lacks columns {missing}")
        cols = list(PHASE_COLUMNS) + [c for c in df.columns if c not in PHASE_COLUMNS]
        out = self.path / name
        tmp = out.with_suffix(".csv.tmp")
        df[cols].to_csv(tmp, index=False)
        os.replace(tmp, out)
        return out

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def _read_csv(
        self,
        name: str,
        required: Sequence[str],
        key: Sequence[str] = (),
        dropped: list[list[str]] | None = None,
    ):
        """A table of the run, tolerant of a crash (`read_csv_tolerant`); its notes are added
        to `self.notes`.

        Raises:
            RunDirError: the file is missing, empty, or lacks the required columns.
        """
        p = self.path / name
        if not p.is_file():
            raise RunDirError(f"{self.path} has no {name}")
        df, notes = read_csv_tolerant(p, required, key, dropped)
        for n in notes:
            if n not in self.notes:
                self.notes.append(n)
                log.info("%s", n)
        return df


STRING_COLUMNS = frozenset({"device", "phase", "method", "note", "source", "segment", "replay"})
"""Columns read as text; every other column of a run's CSV files is a number (or empty)."""


def read_csv_tolerant(
    path: Path,
    required: Sequence[str] = (),
    key: Sequence[str] = (),
    dropped: list[list[str]] | None = None,
):
    """Read one of a run's CSV files as a crash left it; returns (DataFrame, notes).

    Keeps every complete row. Drops, each with a note: a last line without its newline (a
    write cut short), rows with the wrong number of fields, and rows whose number columns hold
    text that is not a number, or whose `key` columns are empty (a row without its time or
    device says nothing). An empty cell elsewhere stays NaN ("not read this time").

    Raises:
        RunDirError: the file is empty (not even a header) or lacks a `required` column.
    """
    import numpy as np
    import pandas as pd

    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace").replace("\x00", "")
    notes: list[str] = []
    if not text.strip():
        raise RunDirError(f"{path} is empty (not even a header): the run wrote nothing")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the file ends with a newline: every line is whole
    elif len(lines) > 1:
        notes.append(
            f"{path.name}: dropped a partial last row (a write cut short by a crash): "
            f"{lines[-1][:60]!r}"
        )
        lines.pop()
    else:
        raise RunDirError(f"{path} holds only part of a header line: the run wrote nothing")
    header = next(csv.reader([lines[0]]))
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise RunDirError(
            f"{path} lacks the columns {missing} (its header: {header[:12]}): it is not a "
            "jouleprof table, or its first line was damaged"
        )
    fast = _read_fast(lines, header, key)
    if fast is not None:
        return fast, notes
    # Line by line: a damaged line's stray quote must not open a field that swallows the rest
    # of the file (seen: a spans row reading only `"` lost every row after it).
    rows = [next(csv.reader([ln]), []) for ln in lines[1:]]
    n = len(header)
    whole = [r for r in rows if len(r) == n]
    if dropped is not None:
        dropped.extend(r for r in rows if len(r) != n)
    if len(whole) < len(rows):
        notes.append(
            f"{path.name}: dropped {len(rows) - len(whole)} row(s) with the wrong number of fields"
        )
    df = pd.DataFrame(whole, columns=header) if whole else pd.DataFrame(columns=header)
    bad = np.zeros(len(df), dtype=bool)
    for col in header:
        if col in STRING_COLUMNS:
            v = df[col].astype(str)
            df[col] = v
            if col in key:
                bad |= (v.str.strip() == "").to_numpy()
            continue
        if col == "resolved":
            df[col] = df[col].map({"True": True, "False": False, "1": True, "0": False})
            continue
        txt = df[col].astype(str).str.strip()
        num = pd.to_numeric(txt.where(txt != "", None), errors="coerce")
        garbage = (txt != "") & num.isna() & (txt.str.lower() != "nan")
        bad |= garbage.to_numpy()
        if col in key:
            bad |= num.isna().to_numpy()
        df[col] = num
    if bad.any():
        notes.append(f"{path.name}: dropped {int(bad.sum())} row(s) that do not parse")
        if dropped is not None:
            dropped.extend(whole[i] for i in np.flatnonzero(bad))
        df = df[~bad].reset_index(drop=True)
    return df, notes


def _read_fast(lines: list[str], header: list[str], key: Sequence[str]):
    """pandas' own parser on whole lines, where it gives every number column as numbers, as
    many rows as lines and no empty key: an undamaged file, read at pandas' speed."""
    import pandas as pd

    if len(lines) <= 1:
        return None
    # Without quoted fields a line's commas count its fields: one with too few or too many
    # goes the careful way, which drops it (pandas would fill or misplace its cells).
    n_sep = len(header) - 1
    if not any('"' in ln for ln in lines) and any(ln.count(",") != n_sep for ln in lines):
        return None
    try:
        df = pd.read_csv(
            io.StringIO("\n".join(lines) + "\n"),
            dtype={c: str for c in header if c in STRING_COLUMNS},
        )
    except (pd.errors.ParserError, ValueError):
        return None
    if len(df) != len(lines) - 1 or list(df.columns) != header:
        return None
    for col in header:
        if col in STRING_COLUMNS:
            if col in key and df[col].isna().any():
                return None
            df[col] = df[col].astype(str)
        elif col == "resolved":
            if df[col].dtype != bool:
                return None
        elif not pd.api.types.is_numeric_dtype(df[col]) or (col in key and df[col].isna().any()):
            return None
    return df


CRASH_END_MARGIN_S = 0.3
"""After a crash, steps must end this long before the last sample (three ~100 ms refreshes)."""


def spans_covered(spans, samples, device: str | None = None):
    """The spans of the steps that lie inside the samples' time range; returns (spans, note).

    A sampler that died before the workload (a crash) leaves spans past its last sample, and
    steps its first sample missed; their energy cannot be attributed, the rest can. The note
    (None when nothing is cut) says how many steps were left out.
    """
    d = samples if device is None else samples[samples["device"] == device]
    if len(d) == 0 or len(spans) == 0:
        return spans, None
    s0, s1 = float(d["t_s"].min()), float(d["t_s"].max())
    per_step = spans.groupby("step").agg(t0=("t0_s", "min"), t1=("t1_s", "max"))
    keep = per_step.index[(per_step["t0"] >= s0) & (per_step["t1"] <= s1)]
    if len(keep) == len(per_step) or len(keep) == 0:
        # None covered is no crash but two clocks: attribution's own check says so.
        return spans, None
    # A crash: a value read at r belongs to the sensor's last refresh before r, so a step that
    # ends in the sampler's last refresh periods has no reading after it (seen: a step ending
    # 24 ms before the last sample, 63 ms after the last counter refresh). Keep a margin.
    keep = per_step.index[(per_step["t0"] >= s0) & (per_step["t1"] <= s1 - CRASH_END_MARGIN_S)]
    if len(keep) == 0:
        return spans, None
    cut = len(per_step) - len(keep)
    note = (
        f"{cut} of {len(per_step)} steps lie outside the samples' time range "
        f"[{s0:.3f}, {s1:.3f}] s (the sampler stopped before the workload, as a crash leaves "
        f"it): attributed the {len(keep)} steps both cover"
    )
    return spans[spans["step"].isin(keep)].reset_index(drop=True), note


# -- writing run.json --------------------------------------------------------------------------


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_json"):
        return o.to_json()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} to run.json")


def _step_of(cell: str) -> int | None:
    """The step number an unreadable spans.csv row still shows in its first cell (ASCII digits
    around any whitespace), else None. str.isdigit() alone is not enough: it takes "²" and "١",
    and str.strip() drops control characters such as "\x1f" that int() refuses."""
    m = re.fullmatch(r"\s*([0-9]+)\s*", cell)
    return int(m.group(1)) if m else None
