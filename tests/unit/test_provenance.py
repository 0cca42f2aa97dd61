"""benchmarks' meta.json: what a call records, and a resumed output keeping its calls."""

from __future__ import annotations

import json

from jouleprof.bench.provenance import benchmark_meta, commit, write_meta


def test_meta_records_the_call_and_says_what_it_could_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("JP_COMMIT", "abc123")
    assert commit(tmp_path) == "abc123"
    m = benchmark_meta(["python", "x.py", "--out", "o"], ("numpy", "no-such-package-xyz"))
    assert m["command"] == "python x.py --out o" and m["git_commit"] == "abc123"
    assert m["numpy"][0].isdigit() and m["no-such-package-xyz"] == "not installed"
    assert "torch" in m and "gpu" in m
    # without a GPU driver the driver is "unavailable: ..." and the limit None, never missing
    assert m["driver"] and ("power_limit_w" in m)
    monkeypatch.delenv("JP_COMMIT")
    assert commit(tmp_path) == "unknown"  # not a git checkout


def test_a_resumed_output_keeps_the_dates_of_its_calls(tmp_path):
    write_meta(tmp_path, {"date_utc": "2026-01-01T00:00:00+00:00"}, keep_calls=True)
    write_meta(tmp_path, {"date_utc": "2026-01-02T00:00:00+00:00"}, keep_calls=True)
    doc = json.loads((tmp_path / "meta.json").read_text())
    assert doc["calls"] == ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"]
    write_meta(tmp_path, {"date_utc": "x"})
    assert "calls" not in json.loads((tmp_path / "meta.json").read_text())
