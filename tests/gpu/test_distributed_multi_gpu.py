"""measure() and jouleprof.profile under torchrun on every GPU of the host (NCCL), checked
against each GPU's energy counter read directly (skips with fewer than 2 GPUs).

Each rank loads its GPU with matmuls (rank k for k+1 times as long, so the boards differ),
all-reduces, and reads its own board's NVML counter itself at the edges of the measured body.
The job's reduction must count every GPU once: its total is the sum of the per-board figures,
each of which agrees with the direct counter delta of its rank; each rank records the all-reduce
as communication; `jouleprof measure -- CMD` under torchrun counts every board once too; in
the profile every rank attributes its steps, the all-reduce a phase of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import cuda_device_count

pytestmark = pytest.mark.gpu

_SCRIPT = textwrap.dedent("""
    import json, os, sys, time, torch, torch.distributed as dist
    import pynvml
    import jouleprof
    from jouleprof.measurement import measure
    from jouleprof.distributed.comm import CommRecorder
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    pynvml.nvmlInit()
    # CUDA_DEVICE_ORDER=PCI_BUS_ID (set by the test): CUDA's index is NVML's, through any
    # CUDA_VISIBLE_DEVICES list of indices
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    h = pynvml.nvmlDeviceGetHandleByIndex(int(cvd.split(",")[local]) if cvd else local)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with measure(sys.argv[1], idle_s=0.0, rapl=False, interval_s=0.02) as m:
        torch.cuda.synchronize()
        e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic()
        end = time.monotonic() + 2.0 * (rank + 1)
        while time.monotonic() < end:
            for _ in range(20):
                b = a @ a
            torch.cuda.synchronize()
        t = torch.ones(1 << 24, device="cuda")
        comm = CommRecorder()
        with comm.patch():
            dist.all_reduce(t)
        torch.cuda.synchronize()
        comm.finish(m)
        time.sleep(0.3)  # the counter refreshes about every 100 ms: let it pass the work's end
        e1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.monotonic()
    with open(os.path.join(sys.argv[3], f"direct{rank}.json"), "w") as f:
        json.dump({"rank": rank, "direct_j": (e1 - e0) / 1e3, "s": t1 - t0}, f)
    dist.barrier()
    lin = torch.nn.Linear(4096, 4096, device="cuda")
    opt = torch.optim.SGD(lin.parameters(), lr=1e-3)
    x = torch.randn(4096, 4096, device="cuda")
    with jouleprof.profile(sys.argv[2], report=False) as prof:
        for _ in range(40):
            with prof.step():
                with prof.phase("forward"):
                    loss = lin(x).square().mean()
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("allreduce"):
                    for p in lin.parameters():
                        dist.all_reduce(p.grad)
                with prof.phase("optimizer"):
                    opt.step(); opt.zero_grad()
    dist.destroy_process_group()
""")


def _torchrun(n: int, port_offset: int, *args: str, timeout: float):
    """torchrun with `n` processes running `args`, NVLink multicast off (the lent multi-GPU
    hosts ask for it: a program using it can put a shared host's GPUs out of service) and CUDA
    indices in PCI order (the rank script reads NVML by CUDA's index)."""
    env = {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
        **os.environ,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    port = 29700 + (os.getpid() + port_offset) % 200
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-port", str(port), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.skipif(cuda_device_count() < 2, reason="needs 2 or more CUDA GPUs on this host")
def test_every_gpu_counted_once_and_each_matches_its_own_counter(tmp_path):
    n = cuda_device_count()
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    out1, out2, direct = tmp_path / "measure", tmp_path / "profile", tmp_path / "direct"
    direct.mkdir()
    r = _torchrun(n, 0, str(script), str(out1), str(out2), str(direct), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads((out1 / "run.json").read_text())
    red = rec["extra"]["distributed"]
    assert red["world_size"] == n and red["gpus_used"] == n and not red["shared_gpus"]
    assert not red["missing_ranks"]
    # every board once: the job's total is the sum of the boards, each read by its own rank
    boards = [g for g in red["gpus"] if g["assigned"]]
    assert len(boards) == n and sorted(b["measured_by"] for b in boards) == list(range(n))
    assert red["gpu_energy_j"] == pytest.approx(sum(b["energy_j"] for b in boards), rel=1e-9)
    # the slowest rank (the last, loaded longest) sets the job's time
    assert red["slowest_rank"] == n - 1
    for k in range(n):
        d = json.loads((direct / f"direct{k}.json").read_text())
        (b,) = [b for b in boards if b["measured_by"] == k]
        # jouleprof's work window holds the direct one by a few ms at each edge; a direct read
        # may be up to one 100 ms refresh stale at either end: 0.2 s at ≤ 800 W either way
        assert abs(b["energy_j"] - d["direct_j"]) <= 0.2 * 800.0, (k, b, d)
        rank_rec = json.loads((out1 / "ranks" / f"rank{k}" / "run.json").read_text())
        # the all-reduce recorded as communication, apart from the matmuls
        assert rank_rec["extra"]["comm"]["kinds"]["allreduce"]["calls"] >= 1
    # the boards differ: rank k ran (k + 1) × 2 s of matmuls
    direct_j = [json.loads((direct / f"direct{k}.json").read_text())["direct_j"] for k in range(n)]
    assert direct_j[-1] > 1.5 * direct_j[0]
    # The CLI form: every rank runs `jouleprof measure -- CMD`, one board each, counted once.
    out3 = tmp_path / "cli"
    load = (  # each rank's command computes on its own board, as torchrun's LOCAL_RANK says
        "import os, torch; torch.cuda.set_device(int(os.environ['LOCAL_RANK'])); "
        "a = torch.randn(4096, 4096, device='cuda'); [a @ a for _ in range(400)]; "
        "torch.cuda.synchronize()"
    )
    cli = ("-m", "jouleprof.cli.main", "measure", "--out", str(out3), "--", sys.executable, "-c")
    r = _torchrun(n, 100, *cli, load, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    red3 = json.loads((out3 / "run.json").read_text())["extra"]["distributed"]
    assert red3["gpus_used"] == n and not red3["shared_gpus"] and not red3["missing_ranks"]
    assert not red3["gpus_idle"]  # every board computed
    for k in range(n):  # each rank attributes its own board's steps, in its own directory
        phases = (out2 / "ranks" / f"rank{k}" / "phases.csv").read_text()
        assert "allreduce" in phases and "forward" in phases and "simulated" not in phases
