"""Reading a manifest back and checking it before any training starts.

Every problem is reported with the CSV's row numbers (1 = the first data row; the header is
row 0), so a user can find and fix the lines: missing files, unknown splits, labels whose id
changes between rows, val/test labels never seen in train, and empty splits.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from jouleprof.data.manifests.common import (
    COLUMNS,
    SPLITS,
    ManifestError,
    ManifestRow,
    sidecar_path,
)

MAX_LISTED = 10


def _rows_text(rows: list[int]) -> str:
    shown = ", ".join(str(r) for r in rows[:MAX_LISTED])
    more = f" and {len(rows) - MAX_LISTED} more" if len(rows) > MAX_LISTED else ""
    return f"row{'s' if len(rows) > 1 else ''} {shown}{more}"


@dataclass(frozen=True)
class LoadedManifest:
    """A checked manifest: its rows, the root its paths are relative to, the class list."""

    csv_path: Path
    root: Path
    rows: tuple[ManifestRow, ...]
    classes: tuple[str, ...]
    """Class names ordered by label_id."""
    label_ids: tuple[int, ...]
    """The label_id of each class in `classes` (UAV-Human's ids are action numbers, not 0..n-1)."""

    def split(self, name: str) -> list[ManifestRow]:
        return [r for r in self.rows if r.split == name]

    def abspath(self, row: ManifestRow) -> Path:
        return self.root / row.path

    @property
    def num_classes(self) -> int:
        """Outputs a classifier needs: one more than the largest label_id."""
        return max(self.label_ids) + 1


def resolve_root(csv_path: Path, root: str | os.PathLike[str] | None) -> Path:
    """The root given, else the one the sidecar names, else the CSV's own folder."""
    if root is not None:
        return Path(root).expanduser().resolve()
    side = sidecar_path(csv_path)
    if side.is_file():
        try:
            return Path(json.loads(side.read_text())["root"])
        except (ValueError, KeyError, OSError):
            pass
    return csv_path.parent.resolve()


def load_manifest(
    csv_path: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    check_files: bool = True,
    required_splits: tuple[str, ...] = ("train", "val"),
) -> LoadedManifest:
    """Reads and checks a manifest.

    Args:
        csv_path: The manifest CSV.
        root: Folder its paths are relative to; default: the sidecar's root, else the CSV's folder.
        check_files: Check every listed file exists.
        required_splits: Splits that must hold at least one row.

    Raises:
        ManifestError: the file is unreadable or a check fails; the message names the rows.
    """
    csv_path = Path(csv_path).expanduser().resolve()
    try:
        with csv_path.open(newline="") as f:
            reader = csv.DictReader(f)
            columns = tuple(reader.fieldnames or ())
            raw = list(reader)
    except OSError as e:
        raise ManifestError(f"cannot read manifest {csv_path}: {e.strerror or e}") from e
    missing_cols = [c for c in COLUMNS if c not in columns]
    if missing_cols:
        raise ManifestError(
            f"manifest {csv_path} lacks column(s) {missing_cols} (has {list(columns)}); "
            f"a manifest has the columns {','.join(COLUMNS)}"
        )
    base = resolve_root(csv_path, root)
    rows: list[ManifestRow] = []
    lines: list[int] = []  # each row's number in the CSV (1 = first data row)
    bad_split, bad_id, empty = [], [], []
    for i, r in enumerate(raw, start=1):
        path, label = (r["path"] or "").strip(), (r["label"] or "").strip()
        split = (r["split"] or "").strip()
        if not path or not label:
            empty.append(i)
            continue
        if split not in SPLITS:
            bad_split.append(i)
            continue
        try:
            label_id = int((r["label_id"] or "").strip())
            if label_id < 0:
                raise ValueError
        except ValueError:
            bad_id.append(i)
            continue
        rows.append(ManifestRow(path, label, label_id, split))
        lines.append(i)
    problems = []
    if empty:
        problems.append(f"empty path or label at {_rows_text(empty)}")
    if bad_split:
        problems.append(f"split not one of {', '.join(SPLITS)} at {_rows_text(bad_split)}")
    if bad_id:
        problems.append(f"label_id not an integer ≥ 0 at {_rows_text(bad_id)}")
    line_of = {id(r): i for r, i in zip(rows, lines, strict=True)}
    # A label must keep one id, and an id one label.
    first_id: dict[str, int] = {}
    first_label: dict[int, str] = {}
    clash = []
    for r in rows:
        if first_id.setdefault(r.label, r.label_id) != r.label_id or (
            first_label.setdefault(r.label_id, r.label) != r.label
        ):
            clash.append(line_of[id(r)])
    if clash:
        problems.append(
            f"a label with two label_ids (or an id with two labels) at {_rows_text(clash)}"
        )
    train_labels = {r.label for r in rows if r.split == "train"}
    if train_labels:
        unknown = [
            line_of[id(r)] for r in rows if r.split != "train" and r.label not in train_labels
        ]
        if unknown:
            problems.append(
                f"val/test label(s) with no train clip (the model cannot learn them) at "
                f"{_rows_text(unknown)}"
            )
    seen: dict[str, int] = {}
    dup = [n for r, n in zip(rows, lines, strict=True) if seen.setdefault(r.path, n) != n]
    if dup:
        problems.append(f"a path listed twice at {_rows_text(dup)}")
    if check_files:
        absent = [line_of[id(r)] for r in rows if not (base / r.path).is_file()]
        if absent:
            example = next(r.path for r in rows if line_of[id(r)] == absent[0])
            problems.append(
                f"{len(absent)} file(s) missing under root {base} at {_rows_text(absent)} "
                f"(e.g. {example}); pass --root if the dataset moved"
            )
    for s in required_splits:
        if not any(r.split == s for r in rows):
            problems.append(f"split {s!r} is empty (no row has split={s})")
    if problems:
        raise ManifestError(f"manifest {csv_path}: " + "; ".join(problems))
    pairs = sorted({(r.label_id, r.label) for r in rows})
    return LoadedManifest(
        csv_path=csv_path,
        root=base,
        rows=tuple(rows),
        classes=tuple(lab for _, lab in pairs),
        label_ids=tuple(i for i, _ in pairs),
    )
