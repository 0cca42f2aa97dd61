"""A fine-mode training cell on a real GPU: CUDA-event spans, measured energy, attribution."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("av")


def test_fine_cell_on_the_gpu_measures_and_attributes(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from jouleprof.bench.train import CellConfig, run_cell
    from jouleprof.store.rundir import RunDir

    out = tmp_path / "cell"
    cfg = CellConfig(
        preset="vit_base",
        batch_size=4,
        mode="fine",
        duration_s=8.0,
        overhead_pairs=2,
        overhead_block_steps=4,
        isolation_s=2.0,
        gpus=(0,),
        overrides={"num_workers": 4},
    )
    run_cell(cfg, out)
    rd = RunDir(out)
    rec = rd.read_record()
    assert rec.status.value == "complete"
    assert rec.extra["phase_recorder"]["mode"] == "cuda-events"
    s = rec.summary
    assert s["energy_per_sample_j"].value > 0 and s["energy_per_sample_j"].signal == "counter"
    assert 0 < s["mfu_pct"].value < 100
    assert s["energy_per_sample_j"].value > s["floor_energy_per_sample_j"].value
    att = rec.extra["attribution"]
    assert att["regression"]["ok"] and att["proportional"]["ok"], att
    phases = rd.read_phases()
    reg = phases[phases["method"] == "regression"]
    assert {"forward/target", "forward/context", "backward", "optimizer", "ema"} <= set(
        reg["phase"]
    )
    assert (reg.loc[reg["resolved"].astype(bool), "energy_j"] > 0).all()
