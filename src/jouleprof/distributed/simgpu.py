"""Simulated GPUs for a torchrun job on a machine without GPUs (tests, demos).

With JOULEPROF_SIM_GPUS=N, N simulated boards are "visible" to the job: each rank measures the
one it computes on (drawing JOULEPROF_SIM_BUSY_W, default 300 W, through the realistic sensor
model) and local rank 0 also measures those no rank was given (drawing idle power, 90 W), as a
GPU allocated to the job but idle would. JOULEPROF_SIM_SHARE_GPU=1 puts every rank on board 0.
"""

from __future__ import annotations

import os

IDLE_W = 90.0
WEEK_S = 7 * 24 * 3600.0


def simulated_board(index: int, busy: bool, clock, seed: int):
    from jouleprof.sensors.simulated import PowerSchedule, SimulatedGPU

    schedule = PowerSchedule(idle_w=IDLE_W)
    power = float(os.environ.get("JOULEPROF_SIM_BUSY_W", "300")) if busy else IDLE_W
    schedule.append(WEEK_S, power)
    return SimulatedGPU(schedule, clock, seed=seed, device=f"simgpu{index}")
