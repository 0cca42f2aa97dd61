"""Manifest builders on small fake trees of each dataset's layout, and the manifest checks."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from jouleprof.data.manifests import ManifestError, build_manifest, load_manifest, write_manifest
from jouleprof.data.manifests.uavhuman import TEST_SUBJECTS, parse_name


def touch(path: Path, content: bytes = b"\x00video") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# -- MOD20 ----------------------------------------------------------------------------------


def mod20_tree(root: Path, n_per_class: int = 10) -> None:
    for c in ("fall", "run", "swim"):
        for i in range(n_per_class):
            touch(root / "data" / "dataset" / c / f"src{i % 3}_{i:02d}_{'abcd'[i % 4]}_g.mp4")
    touch(root / "data" / "dataset" / "run" / "IMG 0042 (copy).mp4")  # irregular name, kept
    touch(root / "data" / "dataset" / "swim" / "notes.txt")  # not a video
    touch(root / "data" / "dataset" / "fall" / "broken_01_a_g.mp4", b"")  # empty


def test_mod20_split_is_stratified_seeded_and_keeps_irregular_names(tmp_path):
    mod20_tree(tmp_path)
    m = build_manifest("mod20", tmp_path, seed=17)
    by_split = Counter((r.label, r.split) for r in m.rows)
    for c in ("fall", "swim"):  # 10 clips: 15 % → 2 (round(1.5)) val and test each
        assert by_split[(c, "val")] == by_split[(c, "test")] == 2
        assert by_split[(c, "train")] == 6
    assert any("IMG 0042" in r.path for r in m.rows)
    assert m.info["irregular_names"] == ["data/dataset/run/IMG 0042 (copy).mp4"]
    reasons = {s.path: s.reason for s in m.skipped}
    assert "not a video" in reasons["data/dataset/swim/notes.txt"]
    assert "empty" in reasons["data/dataset/fall/broken_01_a_g.mp4"]
    assert {r.label: r.label_id for r in m.rows} == {"fall": 0, "run": 1, "swim": 2}
    again = build_manifest("mod20", tmp_path, seed=17)
    assert sorted((r.path, r.split) for r in again.rows) == sorted(
        (r.path, r.split) for r in m.rows
    )
    other = build_manifest("mod20", tmp_path, seed=18)
    assert sorted((r.path, r.split) for r in other.rows) != sorted(
        (r.path, r.split) for r in m.rows
    )


def test_mod20_accepts_the_dataset_folder_itself(tmp_path):
    mod20_tree(tmp_path)
    m = build_manifest("mod20", tmp_path / "data" / "dataset")
    assert all(r.path.split("/")[0] in ("fall", "run", "swim") for r in m.rows)


# -- ERA -----------------------------------------------------------------------------------


def era_tree(root: Path) -> None:
    for split, n in (("Train", 8), ("Test", 4)):
        for c in ("Concert", "NonEvent", "TrafficCollision"):
            for i in range(1, n + 1):
                touch(root / "ERA" / split / c / f"{c}_{i:03d}.mp4")


def test_era_keeps_official_split_and_keys_on_relative_paths(tmp_path):
    era_tree(tmp_path)
    m = build_manifest("era", tmp_path, seed=3, val_fraction=0.25)
    paths = [r.path for r in m.rows]
    assert len(paths) == len(set(paths)) == 36
    basenames = Counter(Path(p).name for p in paths)
    assert basenames["Concert_001.mp4"] == 2  # same basename in Train and Test, two rows
    for r in m.rows:
        if "/Test/" in f"/{r.path}":
            assert r.split == "test"
        else:
            assert r.split in ("train", "val")
    counts = Counter((r.label, r.split) for r in m.rows)
    assert all(counts[(c, "val")] == 2 for c in ("Concert", "NonEvent", "TrafficCollision"))
    out = write_manifest(m, tmp_path / "era.csv", tmp_path)
    assert list(read_csv(out)[0]) == ["path", "label", "label_id", "split"]
    loaded = load_manifest(out)
    assert loaded.root == tmp_path.resolve()
    assert loaded.classes == ("Concert", "NonEvent", "TrafficCollision")


def test_era_flat_split_folders_take_the_class_from_the_name(tmp_path):
    for split in ("train", "test"):
        for c in ("Fire", "Party"):
            for i in range(1, 4):
                touch(tmp_path / split / f"{c}_{i:03d}.mp4")
    touch(tmp_path / "train" / "weird.mp4")
    m = build_manifest("era", tmp_path, val_fraction=0.0)
    assert {r.label for r in m.rows} == {"Fire", "Party"}
    assert [s.path for s in m.skipped] == ["train/weird.mp4"]


def test_era_without_split_folders_says_what_it_needs(tmp_path):
    touch(tmp_path / "clips" / "Fire_001.mp4")
    with pytest.raises(ManifestError, match="train and test folders"):
        build_manifest("era", tmp_path)


# -- UAV-Human --------------------------------------------------------------------------------


def uav_name(subject: int, action: int, rep: int = 0) -> str:
    return f"P{subject:03d}S01G10B00H10UC102000LC092000A{action:03d}R{rep}_0913175{rep}.avi"


def uav_tree(root: Path) -> None:
    for subject in (0, 1, 2, 3, 5, 8, 9, 10, 11, 12):
        for action in (0, 31, 154):
            touch(root / uav_name(subject, action))
    touch(root / "P070S01_bad_name.avi")
    touch(root / uav_name(150, 3))  # subject outside 0–118


def test_uavhuman_cross_subject_protocols(tmp_path):
    uav_tree(tmp_path)
    assert parse_name(Path(uav_name(70, 31)).stem) == (70, 31)
    for protocol in ("csv1", "csv2"):
        m = build_manifest("uavhuman", tmp_path, protocol=protocol, val_fraction=0.2)
        test_subjects = TEST_SUBJECTS[protocol]
        for r in m.rows:
            subject = int(r.path[1:4])
            assert (r.split == "test") == (subject in test_subjects), (protocol, r)
            assert r.label == f"A{r.label_id:03d}"
        assert {r.label_id for r in m.rows} == {0, 31, 154}
        assert {s.path for s in m.skipped} == {"P070S01_bad_name.avi", uav_name(150, 3)}
    v1 = build_manifest("uavhuman", tmp_path, protocol="csv1")
    v2 = build_manifest("uavhuman", tmp_path, protocol="csv2")
    assert {r.path for r in v1.rows if r.split == "test"} != {
        r.path for r in v2.rows if r.split == "test"
    }


def test_uavhuman_subject_disjoint_validation(tmp_path):
    uav_tree(tmp_path)
    m = build_manifest("uavhuman", tmp_path, protocol="csv1", val_fraction=0.3, val_by="subject")
    val_subjects = {r.path[:4] for r in m.rows if r.split == "val"}
    train_subjects = {r.path[:4] for r in m.rows if r.split == "train"}
    assert val_subjects and not val_subjects & train_subjects


def test_unknown_protocol_is_refused(tmp_path):
    uav_tree(tmp_path)
    with pytest.raises(ManifestError, match="csv1, csv2"):
        build_manifest("uavhuman", tmp_path, protocol="csv3")


# -- loading and checking -----------------------------------------------------------------------


def write_rows(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("path", "label", "label_id", "split"))
        w.writerows(rows)
    return path


def test_bad_manifest_names_the_rows(tmp_path):
    for name in ("a.mp4", "b.mp4", "c.mp4"):
        touch(tmp_path / name)
    p = write_rows(
        tmp_path / "m.csv",
        [
            ("a.mp4", "cat", 0, "train"),
            ("gone.mp4", "cat", 0, "train"),
            ("b.mp4", "dog", 1, "val"),
            ("c.mp4", "cat", 2, "train"),
        ],
    )
    with pytest.raises(ManifestError) as e:
        load_manifest(p)
    text = str(e.value)
    assert "missing" in text and "row 2" in text
    assert "no train clip" in text and "row 3" in text
    assert "two label_ids" in text and "row 4" in text


def test_empty_split_is_named(tmp_path):
    touch(tmp_path / "a.mp4")
    p = write_rows(tmp_path / "m.csv", [("a.mp4", "cat", 0, "train")])
    with pytest.raises(ManifestError, match="split 'val' is empty"):
        load_manifest(p)
    assert len(load_manifest(p, required_splits=("train",)).rows) == 1


def test_cli_manifest_warns_about_skipped_files(tmp_path):
    mod20_tree(tmp_path / "mod20")
    out = tmp_path / "mod20.csv"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouleprof.cli.main",
            "data",
            "manifest",
            "mod20",
            str(tmp_path / "mod20"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "notes.txt" in r.stderr and "empty file" in r.stderr
    assert len(read_csv(out)) == 31
    skipped = read_csv(tmp_path / "mod20.skipped.csv")
    assert {s["path"] for s in skipped} == {
        "data/dataset/swim/notes.txt",
        "data/dataset/fall/broken_01_a_g.mp4",
    }
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouleprof.cli.main",
            "data",
            "manifest",
            "kinetics",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "mod20, era, uavhuman" in bad.stderr


def test_cli_manifest_warns_of_an_empty_split(tmp_path):
    mod20_tree(tmp_path / "mod20", n_per_class=1)  # one clip per class: no val, no test
    r = subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", "data", "manifest", "mod20",
         str(tmp_path / "mod20"), "--out", str(tmp_path / "m.csv")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    err = " ".join(r.stderr.split())
    assert "split(s) val, test hold no clip" in err and "need every split" in err
