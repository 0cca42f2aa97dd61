"""Rank-aware measurement: the pure reduction, the rank context, and measure() under torchrun
(2 processes, gloo, simulated GPUs as each rank's sensor)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jouleprof.distributed.context import RankContext, current, rank_gpu
from jouleprof.distributed.identity import device_key
from jouleprof.distributed.reduce import reduce_reports


def _report(rank, wall, devices, status="complete"):
    return {"rank": rank, "host": "h", "status": status, "wall_time_s": wall, "devices": devices}


def _dev(key, energy, assigned=True, util=100.0, device="gpu0"):
    lo, hi = (None, None) if energy is None else (energy - 1, energy + 1)
    return {
        "device": device,
        "key": key,
        "energy_j": energy,
        "lo_j": lo,
        "hi_j": hi,
        "assigned": assigned,
        "util_max_pct": util,
        "signal": "counter",
    }


def test_reduction_sums_boards_once_and_takes_the_slowest_rank():
    reports = [
        _report(0, 10.0, [_dev("h/pci:a", 3000.0), _dev("h/pci:c", 900.0, assigned=False)]),
        _report(1, 12.0, [_dev("h/pci:b", 3600.0)]),
        _report(2, 11.0, [_dev("h/pci:b", 3300.0)]),  # shares board b with rank 1
    ]
    red = reduce_reports(reports, world_size=3)
    assert red["gpu_energy_j"] == pytest.approx(3000.0 + 3600.0)  # b once, from rank 1 (longer)
    assert red["wall_time_s"] == 12.0 and red["slowest_rank"] == 1
    assert red["shared_gpus"] == ["h/pci:b"]
    assert red["gpus_idle"] == ["h/pci:c"]
    assert red["idle_allocated_energy_j"] == pytest.approx(900.0)
    assert [r["rank"] for r in red["per_rank"]] == [0, 1, 2]
    assert red["per_rank"][0]["energy_j"] == pytest.approx(3000.0)  # its unassigned board apart
    assert red["missing_ranks"] == []


def test_reduction_says_what_is_missing_instead_of_zero():
    red = reduce_reports([_report(0, 5.0, [_dev("h/pci:a", None)])], world_size=2)
    assert red["missing_ranks"] == [1]
    assert red["gpu_energy_j"] is None and "h/pci:a" in red["gpu_energy_reason"]


def test_a_placed_rank_whose_board_never_worked_is_idle():
    red = reduce_reports([_report(0, 5.0, [_dev("h/pci:a", 450.0, util=0.0)])], world_size=1)
    assert red["gpus_idle"] == ["h/pci:a"] and "utilization" in red["gpus"][0]["idle_reason"]


def test_device_keys_follow_the_board_not_the_rank():
    a = device_key("h", "gpu0", {"pci_bus_id": "00000000:1B:00.0"}, rank=0)
    b = device_key("h", "gpu1", {"pci_bus_id": "00000000:1b:00.0"}, rank=1)
    assert a == b  # the same board seen under two visible indices
    assert device_key("h", "gpu0", {"error": "x"}, 0) != device_key("h", "gpu0", {"error": "x"}, 1)


def test_rank_context_from_the_environment():
    assert current({"WORLD_SIZE": "1", "RANK": "0"}) is None
    assert current({}) is None
    ctx = current(
        {
            "WORLD_SIZE": "4",
            "RANK": "3",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500",
        }
    )
    assert (ctx.rank, ctx.local_rank, ctx.world_size, ctx.job_id) == (3, 1, 4, "n1-29500")
    assert rank_gpu(ctx, 1, environ={}) == 0  # more ranks than boards: they share
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        RankContext(0, 2, 2, 2, "h", "j")


_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    from jouleprof.measurement import measure
    from jouleprof.distributed.comm import CommRecorder
    dist.init_process_group("gloo")
    # 1: three simulated boards visible, one per rank, the third allocated but idle
    os.environ.update(JOULEPROF_SIM_GPUS="3", JOULEPROF_SIM_BUSY_W="300")
    rec = CommRecorder()
    with measure(sys.argv[1], idle_s=0.0, rapl=False, interval_s=0.02) as m:
        with rec.patch():
            t = torch.ones(1000)
            for _ in range(5):
                dist.all_reduce(t)
                time.sleep(0.1)
            dist.all_gather_into_tensor(torch.empty(2000), torch.ones(1000))
        time.sleep(0.4 * dist.get_rank())  # rank 1 is slower
        rec.finish(m)
    dist.barrier()
    # 2: both ranks on one board
    os.environ.update(JOULEPROF_SIM_GPUS="1", JOULEPROF_SIM_SHARE_GPU="1")
    with measure(sys.argv[2], idle_s=0.0, rapl=False, interval_s=0.02) as m:
        time.sleep(0.5 + 0.3 * dist.get_rank())
    dist.barrier()
    # 3: jouleprof.profile, phases attributed on every rank
    import jouleprof
    os.environ.update(JOULEPROF_SIM_GPUS="2", JOULEPROF_SIM_SHARE_GPU="")
    lin = torch.nn.Linear(64, 64)
    with jouleprof.profile(sys.argv[3], report=False) as prof:
        for _ in range(12):
            with prof.step():
                with prof.phase("forward"):
                    loss = lin(torch.randn(32, 64)).square().mean()
                with prof.phase("backward"):
                    loss.backward()
                with prof.phase("comm"):
                    dist.all_reduce(lin.weight.grad)
                time.sleep(0.03)
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    script = tmp / "job.py"
    script.write_text(_SCRIPT)
    out1, out2, out3 = tmp / "job1", tmp / "job2", tmp / "job3"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(29400 + os.getpid() % 500),
        str(script),
        str(out1),
        str(out2),
        str(out3),
    ]
    e = {**os.environ, "JOULEPROF_RANK_WAIT_S": "60", "OMP_NUM_THREADS": "1"}
    e.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return out1, out2, out3


def test_measure_under_torchrun_reduces_ranks_and_reports_idle_gpus(torchrun_job):
    out = torchrun_job[0]
    rec = json.loads((out / "run.json").read_text())
    red = rec["extra"]["distributed"]
    assert rec["status"] == "complete" and red["ranks_reported"] == [0, 1]
    walls = [r["wall_time_s"] for r in red["per_rank"]]
    assert red["wall_time_s"] == max(walls) and red["slowest_rank"] == 1
    # two busy boards (one per rank) over each rank's own window, the third allocated but idle
    expected = 300.0 * sum(walls)
    assert rec["summary"]["gpu_energy_j"]["value"] == pytest.approx(expected, rel=0.05)
    assert red["gpus_used"] == 2 and len(red["gpus_idle"]) == 1
    assert red["gpus_idle"][0].endswith("/sim:2")
    assert red["idle_allocated_energy_j"] == pytest.approx(90.0 * walls[0], rel=0.08)
    for r in (0, 1):  # each rank's own full run directory, with its communication spans
        rank_dir = out / "ranks" / f"rank{r}"
        assert (rank_dir / "samples.csv").is_file()
        comm = json.loads((rank_dir / "run.json").read_text())["extra"]["comm"]["kinds"]
        assert comm["allreduce"]["calls"] == 5 and comm["allreduce"]["bytes"] == 5 * 4000
        assert comm["allgather"]["calls"] == 1 and comm["allreduce"]["time_s"] > 0
        assert (rank_dir / "comm_spans.csv").read_text().count("allreduce") == 5


def test_ranks_sharing_one_gpu_count_it_once(torchrun_job):
    rec = json.loads((torchrun_job[1] / "run.json").read_text())
    red = rec["extra"]["distributed"]
    assert red["gpus_used"] == 1 and len(red["shared_gpus"]) == 1
    longest = max(r["wall_time_s"] for r in red["per_rank"])
    assert rec["summary"]["gpu_energy_j"]["value"] == pytest.approx(300.0 * longest, rel=0.05)
    assert any("shared" in n for n in rec["notes"])


def test_profile_under_torchrun_attributes_each_rank(torchrun_job):
    out = torchrun_job[2]
    rec = json.loads((out / "run.json").read_text())
    assert rec["extra"]["distributed"]["ranks_reported"] == [0, 1]
    for r in (0, 1):
        phases = (out / "ranks" / f"rank{r}" / "phases.csv").read_text()
        assert "forward" in phases and "comm" in phases
