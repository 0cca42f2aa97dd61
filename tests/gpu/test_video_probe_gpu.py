"""On a GPU: a probe cell of each full-size model family that failed or was missing on the H200
(BitFit bf16 on Swin3D and Hiera at 16×224) trains, with energy, time and peak memory."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bitfit_bf16_probe_cells_train_at_full_size(tmp_path):
    pytest.importorskip("hiera", reason="hiera-transformer is not installed")
    from jouleprof.bench.probe_cell import ProbeCell, run_cell

    opts = dict(num_classes=20, lr=1e-4, warmup_steps=2, timed_s=1.0)
    for model in ("swin3d-b", "hiera-b"):
        r = run_cell(ProbeCell(model, "bitfit", "bf16", False, 2), tmp_path / model, opts)
        assert r["status"] == "ok", r.get("error")
        assert r["s_per_step"] > 0 and r["peak_mem_mib"] > 0
        assert (
            r["j_per_step"] is not None
            and r["j_per_step_lo"] <= r["j_per_step"] <= r["j_per_step_hi"]
        )
