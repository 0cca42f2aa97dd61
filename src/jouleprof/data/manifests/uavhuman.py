"""UAV-Human (RGB): a flat folder of .avi files whose names encode subject and action.

Names look like ``P070S01G10B00H10UC102000LC092000A031R0_09131758.avi``: ``P`` the subject,
``A`` the action (0-based, 155 actions). The label is ``A031``, its label_id the action number.
Test subjects follow the Cross-Subject protocols (CSv1 or CSv2); every other subject of 0–118
trains. Validation is carved from train, seeded: stratified by action (``val_by="clip"``, the
default), or subject-disjoint (``val_by="subject"``, whole training subjects held out).
Files whose names do not follow the pattern are skipped and listed.
"""

from __future__ import annotations

import re
from pathlib import Path

from jouleprof.data.manifests.common import (
    Manifest,
    ManifestError,
    ManifestRow,
    Skipped,
    carve_validation,
    is_video,
    readability,
    relpath,
    scan_files,
)

NAME_PATTERN = re.compile(
    r"^P(?P<subject>\d{3})S(\d{2})G(\d{2})B(\d{2})H(\d{2})UC(\d{6})LC(\d{6})"
    r"A(?P<action>\d{3})R(\d)_(\d{8})$"
)
NAME_FORM = "P###S##G##B##H##UC######LC######A###R#_########"
NUM_SUBJECTS = 119
NUM_ACTIONS = 155
TEST_SUBJECTS: dict[str, frozenset[int]] = {
    "csv1": frozenset(
        (1, 3, 4, 9, 22, 23, 24, 31, 41, 54, 58, 60, 66, 72, 74, 75, 91, 92, 93, 94, 95, 96, 97)
        + (99, 101, 104, 107, 108, 109, 113)
    ),
    "csv2": frozenset(
        (1, 2, 7, 9, 13, 15, 17, 23, 25, 27, 28, 33, 34, 41, 42, 48, 50, 51, 53, 55, 58, 65, 68)
        + (76, 82, 85, 90, 98, 105, 116)
    ),
}
VAL_BY = ("clip", "subject")


def parse_name(stem: str) -> tuple[int, int] | None:
    """(subject, action) of a UAV-Human file stem, or None when it does not follow the pattern."""
    m = NAME_PATTERN.match(stem)
    return (int(m["subject"]), int(m["action"])) if m else None


def build(
    root: str | Path,
    *,
    protocol: str = "csv1",
    seed: int = 17,
    val_fraction: float = 0.1,
    val_by: str = "clip",
) -> Manifest:
    """The UAV-Human manifest of the tree at `root` under a cross-subject protocol."""
    protocol = protocol.lower()
    if protocol not in TEST_SUBJECTS:
        raise ManifestError(f"unknown protocol {protocol!r}: choose one of csv1, csv2")
    if val_by not in VAL_BY:
        raise ManifestError(f"unknown val_by {val_by!r}: choose one of {', '.join(VAL_BY)}")
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise ManifestError(f"UAV-Human root {root} is not a folder")
    test = TEST_SUBJECTS[protocol]
    rows: list[ManifestRow] = []
    skipped: list[Skipped] = []
    for path in scan_files(root):
        rel = relpath(path, root)
        if not is_video(path):
            skipped.append(Skipped(rel, f"not a video file ({path.suffix or 'no extension'})"))
            continue
        parsed = parse_name(path.stem)
        if parsed is None:
            skipped.append(Skipped(rel, f"name does not follow {NAME_FORM}"))
            continue
        subject, action = parsed
        if subject >= NUM_SUBJECTS or action >= NUM_ACTIONS:
            skipped.append(
                Skipped(rel, f"subject {subject} or action {action} outside 0–118 / 0–154")
            )
            continue
        why = readability(path)
        if why is not None:
            skipped.append(Skipped(rel, why))
            continue
        split = "test" if subject in test else "train"
        rows.append(ManifestRow(rel, f"A{action:03d}", action, split, group=f"P{subject:03d}"))
    if not rows:
        raise ManifestError(f"no UAV-Human clip found under {root}")
    rows = carve_validation(rows, val_fraction, seed, by="group" if val_by == "subject" else "clip")
    info = {
        "dataset": "uavhuman",
        "protocol": protocol,
        "test_subjects": sorted(test),
        "seed": seed,
        "val_fraction": val_fraction,
        "val_by": val_by,
        "split": f"cross-subject {protocol.upper()}; val carved from train (seeded, "
        + ("stratified by action)" if val_by == "clip" else "subject-disjoint)"),
    }
    return Manifest(rows, skipped, info)
