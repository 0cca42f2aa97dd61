"""What each NVML read costs the host, and what the driver's own power-sample buffer holds.

The sampler's CPU cost at 20 ms (issue: measurement core, target < 1 % of a core) is made of
thread wake-ups and NVML reads. This measures each part alone on the GPU's host:

- CPU (time.thread_time) and wall time per call of: the instant-power field through pynvml
  (which builds a ctypes array per call), the same field through the sampler's reader
  (`sensors.nvml.instant_field_reader`: one preallocated array and the function pointer),
  nvmlDeviceGetPowerUsage, the five slow fields, the energy counter;
- CPU per wake-up of a thread sleeping 20 ms;
- nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES): how many samples the driver buffers, how far
  apart, and whether they follow the instant field, under a 300 ms on / 300 ms off matmul load
  (if they do, a sampler could read that buffer a few times a second instead of waking 50).

    PYTHONPATH=src python3 benchmarks/nvml_read_cost.py --out DIR/nvml_read_cost.json

Needs an NVIDIA GPU; writes one JSON file and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path


def per_call(fn, n: int) -> dict:
    fn()
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(n):
        fn()
    return {
        "n": n,
        "cpu_ms_per_call": (time.thread_time() - c0) / n * 1e3,
        "wall_ms_per_call": (time.perf_counter() - w0) / n * 1e3,
    }


def wake_cost(interval_s: float, n: int) -> dict:
    out: dict = {}

    def body() -> None:
        c0 = time.thread_time()
        for _ in range(n):
            time.sleep(interval_s)
        out["cpu_ms_per_wake"] = (time.thread_time() - c0) / n * 1e3

    t = threading.Thread(target=body)
    t.start()
    t.join()
    out.update(interval_s=interval_s, n=n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--load-s", type=float, default=4.0)
    a = ap.parse_args()

    import pynvml as nv
    import torch

    from jouleprof.sensors.nvml import (
        POWER_INSTANT_FIELD,
        decode_field_value,
        instant_field_reader,
        union_value,
    )

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(a.gpu)
    res: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "costs": {}}

    direct = instant_field_reader(nv, h)  # what the sampler reads every poll

    def slow_set() -> None:
        nv.nvmlDeviceGetPowerUsage(h)
        nv.nvmlDeviceGetUtilizationRates(h)
        nv.nvmlDeviceGetMemoryInfo(h)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)

    costs = res["costs"]
    for name, fn, n in (
        ("instant_pynvml", lambda: nv.nvmlDeviceGetFieldValues(h, [POWER_INSTANT_FIELD]), 2000),
        ("instant_direct", direct, 2000),
        ("power_usage", lambda: nv.nvmlDeviceGetPowerUsage(h), 2000),
        ("slow_set", slow_set, 300),
        ("energy_counter", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), 30),
        ("samples_buffer", lambda: nv.nvmlDeviceGetSamples(h, nv.NVML_TOTAL_POWER_SAMPLES, 0), 50),
    ):
        try:
            costs[name] = per_call(fn, n)
        except nv.NVMLError as e:  # one unsupported call must not lose the others
            costs[name] = {"error": str(e)}
    res["instant_check_w"] = {
        "pynvml": decode_field_value(nv.nvmlDeviceGetFieldValues(h, [POWER_INSTANT_FIELD])[0]),
        "direct": direct(),
    }
    res["wake"] = [wake_cost(0.02, 150), wake_cost(0.005, 400), wake_cost(0.25, 12)]

    # The driver's power-sample buffer under a square-wave load, beside a 5 ms instant poll.
    x = torch.randn(8192, 8192, device=f"cuda:{a.gpu}", dtype=torch.bfloat16)
    polled: list[tuple[float, float]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            v = direct()
            polled.append((time.time(), None if v is None else v / 1e3))
            time.sleep(0.005)

    t0_us = int(time.time() * 1e6)
    th = threading.Thread(target=poll)
    th.start()
    edges: list[tuple[float, str]] = []
    t_end = time.perf_counter() + a.load_s
    while time.perf_counter() < t_end:
        edges.append((time.time(), "on"))
        t_on = time.perf_counter() + 0.3
        while time.perf_counter() < t_on:
            for _ in range(4):
                x @ x
            torch.cuda.synchronize()
        edges.append((time.time(), "off"))
        time.sleep(0.3)
    stop.set()
    th.join()
    try:
        vtype, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_TOTAL_POWER_SAMPLES, t0_us)
        buf = [(s.timeStamp / 1e6, union_value(s.sampleValue, vtype) / 1e3) for s in samples]
        gaps_ms = [1e3 * (b[0] - a_[0]) for a_, b in zip(buf, buf[1:], strict=False)]
        res["samples_buffer"] = {
            "value_type": vtype,
            "n": len(buf),
            "span_s": buf[-1][0] - buf[0][0] if buf else None,
            "gap_ms_median": statistics.median(gaps_ms) if gaps_ms else None,
            "gap_ms_min": min(gaps_ms) if gaps_ms else None,
            "gap_ms_max": max(gaps_ms) if gaps_ms else None,
            "first_t_minus_start_s": buf[0][0] - t0_us / 1e6 if buf else None,
            "samples": buf,
        }
    except nv.NVMLError as e:
        res["samples_buffer"] = {"error": str(e)}
    res["polled_instant"] = polled
    res["load_edges"] = edges
    nv.nvmlShutdown()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    for k, v in costs.items():
        if "error" in v:
            print(f"{k:16s} {v['error']}")
        else:
            print(f"{k:16s} cpu {v['cpu_ms_per_call']:.4f} ms  wall {v['wall_ms_per_call']:.4f} ms")
    for w in res["wake"]:
        print(f"wake every {w['interval_s'] * 1e3:.0f} ms: cpu {w['cpu_ms_per_wake']:.4f} ms")
    sb = {k: v for k, v in res["samples_buffer"].items() if k != "samples"}
    print("samples buffer:", sb)


if __name__ == "__main__":
    main()
