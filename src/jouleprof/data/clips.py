"""Real clip sources: a folder searched recursively, or a CSV list of paths.

Pure Python (no torch, no PyAV) so a CLI can list and check a dataset cheaply.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jouleprof.errors import JouleprofError

VIDEO_EXTENSIONS: tuple[str, ...] = (".mp4", ".avi", ".mkv", ".webm")


class ClipSourceError(JouleprofError, ValueError):
    """A clip folder or list holds no usable clip, or names clips that do not exist."""


@dataclass(frozen=True)
class ClipEntry:
    """One clip of a source."""

    path: Path
    """Absolute path of the video file."""
    label: str | None = None
    """Its label where the source gives one (the CSV's 'label' column)."""


def clips_from_folder(
    folder: str | Path, extensions: Sequence[str] = VIDEO_EXTENSIONS
) -> list[ClipEntry]:
    """Every video under `folder` (recursively, extensions matched case-insensitively), sorted.

    Raises:
        ClipSourceError: the folder does not exist or holds no file with one of `extensions`.
    """
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise ClipSourceError(f"clip folder {root} does not exist or is not a folder")
    wanted = {e.lower() for e in extensions}
    paths = sorted(p for p in root.rglob("*") if p.suffix.lower() in wanted and p.is_file())
    if not paths:
        raise ClipSourceError(
            f"no video found under {root} (searched recursively for {', '.join(sorted(wanted))}); "
            "point at the folder that holds the clips, or list them in a CSV with a 'path' column"
        )
    return [ClipEntry(path=p) for p in paths]


def clips_from_csv(csv_path: str | Path) -> list[ClipEntry]:
    """The clips listed in a CSV with a 'path' column and an optional 'label' column.

    Relative paths are resolved against the CSV's folder, so a dataset and its list can move
    together.

    Raises:
        ClipSourceError: no 'path' column, no row, or listed files that do not exist.
    """
    csv_path = Path(csv_path).expanduser().resolve()
    try:
        with csv_path.open(newline="") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            if "path" not in columns:
                raise ClipSourceError(
                    f"clip list {csv_path} has no 'path' column (columns: {columns})"
                )
            rows = [r for r in reader if (r.get("path") or "").strip()]
    except OSError as e:
        raise ClipSourceError(f"cannot read clip list {csv_path}: {e}") from e
    if not rows:
        raise ClipSourceError(f"clip list {csv_path} lists no clip")
    entries = []
    for row in rows:
        path = Path(row["path"].strip()).expanduser()
        if not path.is_absolute():
            path = csv_path.parent / path
        label = (row.get("label") or "").strip() or None
        entries.append(ClipEntry(path=path.resolve(), label=label))
    missing = [str(e.path) for e in entries if not e.path.is_file()]
    if missing:
        raise ClipSourceError(
            f"clip list {csv_path} names {len(missing)} file(s) that do not exist, e.g. "
            f"{missing[:3]} (relative paths are resolved against the CSV's folder)"
        )
    return entries


def find_clips(source: str | Path) -> list[ClipEntry]:
    """Clips of a folder, or of a CSV list (a file ending in .csv).

    Raises:
        ClipSourceError: the source is neither, or holds no clip.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        return clips_from_folder(path)
    if path.suffix.lower() == ".csv":
        return clips_from_csv(path)
    raise ClipSourceError(
        f"clip source {path} is neither a folder nor a .csv list of clips"
        + ("" if path.exists() else " (it does not exist)")
    )
