"""On a GPU, with bitsandbytes installed: the video studies' preloading cell server starts (its
preload, which imports peft and so bitsandbytes, leaves CUDA alone), and a cell forked from it
has the frameworks preloaded, imports bitsandbytes itself and computes on the GPU."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

CELL = textwrap.dedent(
    """
    import json, os, sys
    preloaded = sorted(m for m in ("torch", "peft", "transformers") if m in sys.modules)
    bnb_before = "bitsandbytes" in sys.modules
    import bitsandbytes, torch
    from peft.import_utils import is_bnb_available
    x = torch.randn(256, 256, device="cuda")
    print(json.dumps({"pid": os.getpid(), "preloaded": preloaded, "bnb_before": bnb_before,
                      "bnb_available": bool(is_bnb_available()),
                      "sum_finite": bool(torch.isfinite((x @ x).sum()).item())}))
    """
)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_video_preload_serves_a_cell_that_uses_bitsandbytes_on_the_gpu(tmp_path, monkeypatch):
    pytest.importorskip("peft")
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")
    from jouleprof.bench.cellserver import VIDEO_PRELOAD, CellServer
    from jouleprof.bench.executors import run_process

    (tmp_path / "bnbcell.py").write_text(CELL)
    monkeypatch.chdir(tmp_path)
    # Raises "cell server not ready" where a preloaded module initialized CUDA.
    server = CellServer(VIDEO_PRELOAD, tmp_path / "server.log")
    try:
        assert {"torch", "peft"} <= set(server.loaded), (server.loaded, server.failed)
        d = tmp_path / "cell"
        d.mkdir()
        code = run_process([sys.executable, "-m", "bnbcell"], d, 120, server=server)
        log = (d / "cell.log").read_text()
        assert code == 0, log
        got = json.loads(log.strip().splitlines()[-1])
    finally:
        server.close()
    assert got["preloaded"] == ["peft", "torch", "transformers"]
    assert got["bnb_before"] is False  # deferred: the cell imported it after the fork
    assert got["bnb_available"] is True and got["sum_finite"] is True
