"""`jouleprof study energy-aware` end to end on the CPU (a simulated GPU for the energy path),
resumed, then `jouleprof analyze`; bad input refused with the choices."""

import json
import os
import subprocess
import sys

import pytest

from conftest import jouleprof_many

pytest.importorskip("torch")
pytest.importorskip("statsmodels")

TINY = [
    "--archs", "mlp,cnn", "--datasets", "synthetic", "--lambdas", "0,1e-2", "--seeds", "1",
    "--epochs", "1", "--width", "8", "--depth", "1", "--data-n", "80", "--data-side", "8",
    "--infer-passes", "1", "--idle-s", "0.1", "--device", "cpu", "--in-process",
]  # fmt: skip


def jp(*args, timeout=600):
    env = {**os.environ, "COLUMNS": "250"}  # rich wraps error panels at the terminal width
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


def test_tiny_study_runs_resumes_and_is_analyzed(tmp_path):
    out = tmp_path / "ea"
    r = jp("study", "energy-aware", *TINY, "--simulate-gpu-w", "120", "--out", str(out))
    assert r.returncode == 0, r.stderr
    cells = sorted(p.name for p in (out / "cells").iterdir())
    assert len(cells) == 4 and "cnn.synthetic.lam0.01.s0" in cells
    rec = json.loads((out / "cells" / "mlp.synthetic.lam0.s0" / "run.json").read_text())
    assert rec["status"] == "complete"
    s = rec["summary"]
    assert 0 <= s["accuracy"]["value"] <= 1 and s["internal_energy"]["value"] > 0
    e = s["train_gpu_energy_j"]
    assert e["source"] in ("simulated", "estimated") and "simulated" in e["reason"]
    assert e["lo"] <= e["value"] <= e["hi"]
    assert {"train", "eval", "infer"} <= set(rec["extra"]["spans_s"])
    index = (out / "runs.csv").read_text().splitlines()
    assert len(index) == 5 and "train_gpu_energy_j" in index[0]
    wall_rows = len((out / "cell_wall.csv").read_text().splitlines())

    # resume: a second run starts nothing that is done; a deleted cell is redone
    (out / "cells" / "cnn.synthetic.lam0.s0" / "run.json").unlink()
    r = jp("study", "energy-aware", *TINY, "--simulate-gpu-w", "120", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert len((out / "cell_wall.csv").read_text().splitlines()) == wall_rows + 1
    assert "done before" in r.stderr

    r = jp("analyze", str(out), "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n_complete"] == 4 and res["energy_source"] == "simulated"
    assert "simulated GPU" in res["verdict"]
    assert {"accuracy", "train_gpu_energy_j"} <= set(res["anovas"])
    assert (out / "analysis" / "report.md").is_file()
    # piped, the analysis prints its markdown whole: no table cut to 80 columns
    r = jp("analyze", str(out), "--no-plots")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (out / "analysis" / "report.md").read_text().strip()


BAD = [
    (["--archs", "mlp,resnet"], "unknown resnet; choose from mlp, mlp-large, cnn"),
    (["--datasets", "svhn"], "choose from digits, synthetic, shapes, mnist"),
    (["--lambdas", "0,-1e-3"], "λ must be finite and ≥ 0"),
    (["--kind", "l0"], "choose from l1, l2, nonzero-macs"),
    (["--datasets", "mnist", "--data-dir", "{data}"], "lacks train-images-idx3-ubyte"),
]


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory):
    """Every BAD command's result, all run in one process (jouleprof_many)."""
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "data").mkdir()  # a local dataset folder that lacks the dataset's files
    (tmp / "data" / "readme.md").write_text("x")
    commands = [
        ["study", "energy-aware", *[str(tmp / "data") if a == "{data}" else a for a in args],
         "--out", tmp / f"x{i}"]
        for i, (args, _) in enumerate(BAD)
    ]  # fmt: skip
    return tmp, jouleprof_many(commands, env={"COLUMNS": "250"})


@pytest.mark.parametrize(("i", "match"), [(i, m) for i, (_, m) in enumerate(BAD)],
                         ids=[" ".join(a) for a, _ in BAD])  # fmt: skip
def test_bad_input_is_refused_with_the_choices(bad_results, i, match):
    tmp, results = bad_results
    r = results[i]
    assert r.returncode == 2
    assert match in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp / f"x{i}").exists()
    if "{data}" in BAD[i][0]:
        assert "readme.md" in r.stderr  # what the folder holds instead
