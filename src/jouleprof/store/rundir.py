"""The run directory (shared/DESIGN.md): run.json, samples.csv, spans.csv, phases.csv.

Writers append rows as they arrive and flush often, so Ctrl-C, an OOM or a crash leaves a
readable directory; run.json is replaced atomically and says whether the run completed.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from jouleprof.errors import RunDirError
from jouleprof.types import (
    PHASE_COLUMNS,
    SAMPLE_COLUMNS,
    SPAN_COLUMNS,
    RunRecord,
    Sample,
    Span,
)

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
        raise RunDirError(f"output path {path} is a file, not a directory: choose another --out")


class RunDir:
    """One run's directory on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

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
                f"{p} already holds a run ({RUN_JSON} exists): choose another --out or remove it"
            )
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunDirError(f"cannot create run directory {p}: {e.strerror or e}") from e
        rd = cls(p)
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
        """samples.csv as a DataFrame sorted by time (empty cells are NaN)."""
        df = self._read_csv(SAMPLES_CSV, SAMPLE_COLUMNS)
        df["device"] = df["device"].astype(str)
        return df.sort_values("t_s", kind="stable").reset_index(drop=True)

    def read_spans(self):  # -> pandas.DataFrame
        df = self._read_csv(SPANS_CSV, SPAN_COLUMNS[:4])
        df["phase"] = df["phase"].astype(str)
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

    def _read_csv(self, name: str, required: Sequence[str]):
        import pandas as pd

        p = self.path / name
        if not p.is_file():
            raise RunDirError(f"{self.path} has no {name}")
        try:
            df = pd.read_csv(p)
        except pd.errors.EmptyDataError as e:
            raise RunDirError(f"{p} is empty (not even a header): the run wrote nothing") from e
        except pd.errors.ParserError as e:
            raise RunDirError(f"{p} cannot be parsed as CSV: {e}") from e
        missing = [c for c in required if c not in df.columns]
        if missing:
            raise RunDirError(f"{p} lacks the columns {missing}")
        return df


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_json"):
        return o.to_json()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot write {type(o).__name__} to run.json")
