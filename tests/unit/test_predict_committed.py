"""`jouleprof predict evaluate` finds the committed measurements from any working directory
(an install from a clone is run from anywhere), and says what to do where there are none."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from jouleprof.cli.main import app
from jouleprof.predict.committed import committed_results

ROOT = Path(__file__).resolve().parents[2]


def test_found_above_the_package_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = committed_results("predict_dataset", "models_energy.csv")
    assert found == ROOT / "benchmarks" / "results" / "predict_dataset"
    assert committed_results("predict_dataset", "no_such_file.csv") is None


def test_the_working_directory_comes_first(tmp_path, monkeypatch):
    mine = tmp_path / "benchmarks" / "results" / "predict_dataset"
    mine.mkdir(parents=True)
    (mine / "models_energy.csv").write_text("x\n")
    monkeypatch.chdir(tmp_path)
    assert committed_results("predict_dataset", "models_energy.csv") == mine


def test_evaluate_without_any_dataset_says_how_to_give_one(monkeypatch):
    import jouleprof.predict.committed as committed

    monkeypatch.setattr(committed, "committed_results", lambda folder, marker: None)
    r = CliRunner().invoke(app, ["predict", "evaluate"])
    assert r.exit_code == 2
    assert "no committed dataset found" in r.output and "--data DIR" in r.output
