"""On a GPU, through the CLI as a user runs it: `jouleprof infer` of a tiny video model measures
energy per clip and peak memory on CUDA, and `jouleprof profile bert` trains, measures and
attributes on CUDA with its workload facts recorded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _cli(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jouleprof.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_infer_of_a_tiny_video_model_measures_energy_and_memory_on_cuda(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "infer"
    r = _cli("infer", "--model", "videomae-b", "--tiny", "--precision", "bf16", "--warmup", "2",
             "--passes", "10", "--sustained-s", "3", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    inf = json.loads((out / "run.json").read_text())["extra"]["inference"]
    assert inf["latency_passes"] == 10 and inf["window_passes"] > 10
    assert inf["j_per_clip"] is not None and inf["j_per_clip"] > 0, inf.get("energy_note")
    assert inf["j_per_clip_lo"] <= inf["j_per_clip"] <= inf["j_per_clip_hi"]
    assert inf["peak_mem_mib"] is not None and inf["peak_mem_mib"] > 0


def test_profile_bert_trains_measures_and_attributes_on_cuda(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "bert"
    r = _cli("profile", "bert", "--preset", "tiny", "--steps", "40", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((out / "run.json").read_text())
    assert rec["status"] == "complete"
    facts = rec["extra"]["workload_facts"]
    assert facts["flops_per_sample"]["forward_backward_flops"] > 0
    assert rec["summary"]["gpu_energy_j"]["value"] > 0
    assert "SIMULATED" not in r.stdout + r.stderr  # measured on the GPU, not the simulated one
    phases = (out / "phases.csv").read_text()
    assert "forward" in phases and "backward" in phases
