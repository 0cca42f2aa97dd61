"""measure() and jouleprof.profile under torchrun on a real GPU, one rank (NCCL).

A world of one rank is a plain run (`distributed.context.current` is None there): the record is
the ordinary single-process one, measured from NVML, with no reduction and no ranks/ folder, and
the profile's phases are attributed from the measured samples (not the simulated GPU)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import cuda_device_count

pytestmark = pytest.mark.gpu

_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    import jouleprof
    from jouleprof.measurement import measure
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with measure(sys.argv[1], idle_s=0.0, rapl=False, interval_s=0.02) as m:
        for _ in range(300):
            b = a @ a
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
    dist.barrier()
    lin = torch.nn.Linear(4096, 4096, device="cuda")
    opt = torch.optim.SGD(lin.parameters(), lr=1e-3)
    x = torch.randn(4096, 4096, device="cuda")
    with jouleprof.profile(sys.argv[2], report=False) as prof:
        for _ in range(60):
            with prof.step():
                with prof.phase("forward"):
                    loss = lin(x).square().mean()
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("optimizer"):
                    opt.step(); opt.zero_grad()
    dist.destroy_process_group()
""")


@pytest.mark.skipif(cuda_device_count() < 1, reason="needs a CUDA GPU")
def test_one_rank_torchrun_measures_its_own_board(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    out1, out2 = tmp_path / "measure", tmp_path / "profile"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "1",
        "--master-port",
        str(29600 + os.getpid() % 300),
        str(script),
        str(out1),
        str(out2),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads((out1 / "run.json").read_text())
    assert "distributed" not in rec.get("extra", {}) and not (out1 / "ranks").exists()
    # one board's counter energy (gpu<N>.energy_j; gpu_energy_j is the boards' total)
    (energy,) = [v for k, v in rec["summary"].items() if re.fullmatch(r"gpu\d+\.energy_j", k)]
    assert energy["source"] == "measured" and energy["value"] > 0
    phases = (out2 / "phases.csv").read_text()
    assert "forward" in phases and "backward" in phases
    assert "simulated" not in phases  # measured on the board, not the simulated GPU
