"""`run video` on a real GPU: a tiny model, bf16, measured windows, scores with intervals."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_tiny_video_run_measures_every_window_and_scores_it(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    from jouleprof.bench.video_run import VideoRunConfig, run_video
    from jouleprof.store.rundir import RunDir

    cfg = VideoRunConfig(
        model="videomae-b",
        method="lora",
        precision="bf16",
        tiny=True,
        epochs=1,
        synthetic_clips=(64, 16, 0),
        batch_size=4,
        num_workers=2,
        deploy_sustained_s=2.0,
        idle_s=0.3,
    )
    out = run_video(cfg, tmp_path / "run")
    rec = RunDir(out).read_record()
    assert rec.status.value == "complete", rec.notes
    v = rec.extra["video"]
    tr, val = v["epochs"][0]["train"], v["epochs"][0]["val"]
    for e in (tr["energy"], val["energy"], v["deployment"]["energy"]):
        assert e["source"] == "measured" and e["signal"] == "counter", e
        assert e["value"] > 0 and 0 <= e["lo"] <= e["value"] <= e["hi"]
    assert tr["peak_mem_allocated_bytes"] > 0 and v["deployment"]["peak_mem_allocated_bytes"] > 0
    assert rec.extra["phase_recorder"]["mode"] == "cuda-events"
    ns = v["scores"]["deploy"]
    if val["top1_pct"] > 0:  # a tiny model may score 0 on 16 clips: the score is then refused
        assert ns["ns_hash"]["lo"] <= ns["ns_hash"]["value"] <= ns["ns_hash"]["hi"]
        assert ns["ns_hash"]["source"] == "measured"
    assert v["adaptation"]["phases"]["available"], v["adaptation"]["phases"]
    assert rec.extra["gpu_sharing"][0]["checked"]
