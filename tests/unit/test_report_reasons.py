"""A study report says why a batch size has no figures in a few whole words, keeps the whole
error in failed_cells only, and leaves batch sizes without data out of the batch-size effect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from jouleprof.report import build_report
from jouleprof.report.study import (
    _status_reason,
    aggregate,
    batch_size_effects,
    left_out_batch_sizes,
    load_study,
    short_error,
)

# The error of the real H200 study's batch size 128 (runs.csv), and a failure on two lines.
OOM_ERROR = (
    "out of memory at batch size 8: CUDA out of memory. Tried to allocate 232.00 MiB. GPU 0 "
    "has a total capacity of 139.80 GiB of which 159.12 MiB is free. Including non-PyTorch "
    "memory, this process has 139.54 GiB memory in use. Of the allocated memory 133.70 GiB is "
    "allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch"
    "-cuda-alloc-conf)"
)
FAIL_FIRST = (
    "RuntimeError: CUDA error: an illegal memory access was encountered while running the "
    "attention kernel of block 12"
)
FAIL_ERROR = FAIL_FIRST + "\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
THROUGHPUT = {1: 2.0, 4: 6.0}
KWH = {1: 0.02, 4: 0.01}
MODES = ("baseline", "e2e")
TABLES = ("summary_by_cell_group", "spread", "overhead", "efficiency", "energy_agreement", "cells")


def make_study(root: Path) -> Path:
    """Batch sizes 1 and 4 complete, 2 failed in every cell (a gap in the middle), 8 out of
    memory in every cell; baseline and e2e, two repetitions."""
    root.mkdir(parents=True)
    (root / "study.json").write_text(
        json.dumps({"workload": "vjepa2", "batch_sizes": [1, 2, 4, 8], "modes": list(MODES)})
    )
    rows = []
    for bs in (1, 2, 4, 8):
        for mode in MODES:
            for rep in range(2):
                cid = f"bs{bs}-{mode}-r{rep}"
                row = {
                    "cell_id": cid,
                    "batch_size": bs,
                    "mode": mode,
                    "rep": rep,
                    "status": "complete",
                    "error": "",
                    "run_dir": f"cells/{cid}",
                }
                if bs == 2:
                    row.update(status="failed", error=FAIL_ERROR)
                elif bs == 8:
                    row.update(status="oom", error=OOM_ERROR)
                else:
                    d = 0.01 if rep == 0 else -0.01
                    row["throughput_samples_per_s"] = THROUGHPUT[bs] * (1 + d)
                    row["step_time_s"] = bs / THROUGHPUT[bs]
                    if mode == "e2e":
                        row["energy_per_1000_samples_kwh"] = KWH[bs] * (1 - d)
                        row["energy_per_sample_j"] = KWH[bs] * (1 - d) * 3600.0
                        row["segment_gpu_power_w"] = 300.0
                        row["mfu_pct"] = 10.0
                        row["floor_energy_per_sample_j"] = 0.5
                rows.append(row)
    pd.DataFrame(rows).to_csv(root / "runs.csv", index=False)
    return root


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    return make_study(tmp_path_factory.mktemp("reasons") / "study")


@pytest.fixture(scope="module")
def report(study_dir):
    return build_report(study_dir)


def md_rows(path: Path) -> list[list[str]]:
    """The cells of each row of a markdown table (escaped pipes kept inside their cell)."""
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def assert_whole_words(excerpt: str, full: str) -> None:
    """`excerpt` is `full`, or a start of it cut before a space and marked with …"""
    if excerpt == full:
        return
    assert excerpt.endswith("…"), excerpt
    head = excerpt[:-1]
    assert full.startswith(head), excerpt
    assert full[len(head)] in " ,;:.", f"cut mid-word: {excerpt!r}"


# -- reasons ---------------------------------------------------------------------------------


def test_short_error_keeps_the_first_line_and_whole_words():
    assert short_error("RuntimeError: boom") == "RuntimeError: boom"
    s = short_error(FAIL_ERROR)
    assert len(s) <= 81 and "\n" not in s and "TORCH_USE_CUDA_DSA" not in s
    assert_whole_words(s, FAIL_FIRST)
    s = short_error(OOM_ERROR, 40)
    assert len(s) <= 41
    assert_whole_words(s, OOM_ERROR)
    assert short_error("x" * 200, 50) == "x" * 50 + "…"  # one long word: cut it anyway


def test_status_reason_is_short_and_counts_cells():
    oom = pd.DataFrame({"status": ["oom"] * 3, "error": [OOM_ERROR] * 3})
    assert _status_reason(oom) == "out of memory in 3 of 3 cells"
    mixed = pd.DataFrame(
        {"status": ["oom", "failed", "failed"], "error": [OOM_ERROR, FAIL_ERROR, "other"]}
    )
    why = _status_reason(mixed)
    head, sep, err = why.partition("; failed in 2 of 3 cells: ")
    assert head == "out of memory in 1 of 3 cells" and sep
    assert_whole_words(err, FAIL_FIRST)


def test_aggregate_reasons_are_short(study_dir):
    agg = aggregate(load_study(study_dir))
    r8 = agg.loc[agg["batch_size"] == 8, "reason"]
    assert (r8 == "out of memory in 2 of 2 cells").all()
    r2 = agg.loc[agg["batch_size"] == 2, "reason"]
    prefix = "failed in 2 of 2 cells: "
    assert r2.str.startswith(prefix).all()
    for why in r2:
        assert_whole_words(why[len(prefix) :], FAIL_FIRST)


def test_tables_show_short_whole_reasons_once_per_row(study_dir, report):
    out = study_dir / "report"
    for name in TABLES:
        md = (out / f"{name}.md").read_text()
        assert "Tried to allocate" not in md and "TORCH_USE_CUDA_DSA" not in md, name
        rows = md_rows(out / f"{name}.md")
        assert all(len(r) == len(rows[0]) for r in rows), f"{name}.md: ragged table"
        for r in rows[2:]:
            for c in r:
                for why in re.findall(r"unavailable \((.*)\)", c):
                    if why.startswith(("failed in 2 of 2 cells: ", "failed: ")):
                        assert_whole_words(why.split(": ", 1)[1], FAIL_FIRST)
                    elif "memory" in why:
                        assert why in ("out of memory in 2 of 2 cells", "out of memory"), why
        csv = (out / f"{name}.csv").read_text()
        assert "Tried to allocate" not in csv, name
    summary = md_rows(out / "summary_by_cell_group.md")
    e2e8 = next(r for r in summary if r[:2] == ["e2e", "8"])
    assert e2e8[2] == "unavailable (out of memory in 2 of 2 cells)"
    assert e2e8[3:] == ["—"] * (len(e2e8) - 3)  # the same reason for every figure: said once
    assert len(e2e8) >= 7
    e2e1 = next(r for r in summary if r[:2] == ["e2e", "1"])
    assert "—" not in e2e1[2:]


def test_failed_cells_keep_the_whole_error(study_dir, report):
    failed = pd.read_csv(study_dir / "report" / "failed_cells.csv")
    assert len(failed) == 8
    assert (failed.loc[failed["batch_size"] == 8, "error"] == OOM_ERROR).all()
    assert (failed.loc[failed["batch_size"] == 2, "error"] == FAIL_ERROR).all()
    md = (study_dir / "report" / "failed_cells.md").read_text()
    assert md.count(OOM_ERROR) == 4 and md.count(FAIL_ERROR.replace("\n", " ")) == 4
    assert OOM_ERROR in report.html.read_text()


# -- batch-size effect -----------------------------------------------------------------------


def test_pairs_only_among_batch_sizes_with_data(study_dir):
    study = load_study(study_dir)
    agg = aggregate(study)
    eff = batch_size_effects(study, agg, "e2e")
    assert list(zip(eff["batch_size_a"], eff["batch_size_b"], strict=True)) == [(1, 4)]
    assert eff["consecutive"].tolist() == [True]  # 2 has no data, so 1 → 4 is consecutive
    assert eff["sentence"].iloc[0] == (
        "Batch size 1 → 4: throughput from 2 to 6 samples/s (+200.0%), "
        "GPU energy per 1,000 samples from 0.02 to 0.01 kWh (\u221250.0%)"
    )
    left = left_out_batch_sizes(study, agg, "e2e")
    assert left["batch_size"].tolist() == [2, 8]
    assert left["sentence"].iloc[1] == "Batch size 8 left out: out of memory in 2 of 2 cells"
    assert left["sentence"].iloc[0].startswith("Batch size 2 left out: failed in 2 of 2 cells: ")


def test_report_names_each_left_out_batch_size_once(study_dir, report):
    s = report.sentences
    assert s[0].startswith("Batch-size effect from e2e mode: means over its complete repetitions")
    assert "(n=2 at each batch size)" in s[0]
    assert s[1].startswith("Batch size 1 → 4: ")
    assert [x for x in s if "8" in x.split(":")[0]] == [
        "Batch size 8 left out: out of memory in 2 of 2 cells"
    ]
    assert sum(x.startswith("Batch size 2 ") for x in s) == 1 and len(s) == 4
    assert not any("→ 8" in x or "→ 2:" in x or "2 →" in x for x in s)
    for name in ("batch_size_effect", "batch_size_effect_all_pairs"):
        md = (study_dir / "report" / f"{name}.md").read_text()
        assert md.count("Batch size 8 left out: out of memory in 2 of 2 cells") == 1, name
        assert "→ 8" not in md and "Tried to allocate" not in md
        assert "from e2e mode: means over its complete repetitions" in md
        assert len(pd.read_csv(study_dir / "report" / f"{name}.csv")) == 1  # pairs only
    html = report.html.read_text()
    assert "Batch-size effect from e2e mode: means over its complete repetitions" in html
    assert "Batch size 8 left out: out of memory in 2 of 2 cells" in html
