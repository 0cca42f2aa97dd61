"""The physical identity of a measured GPU, so that ranks sharing one board count it once.

An NVIDIA GPU is keyed by host and PCI bus id (NVML), never by rank or by the index a process
sees (CUDA_VISIBLE_DEVICES renumbers): two ranks on one board give the same key. A simulated
GPU is keyed by host and its simulated index.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence


def nvml_identities(
    visible_indices: Sequence[int], environ: Mapping[str, str] | None = None
) -> dict[int, dict[str, object]]:
    """User-visible index → {pci_bus_id, nvml_index, uuid} for these GPUs; an index NVML cannot
    resolve maps to {"error": why} (its figures are then kept per rank, unmerged)."""
    out: dict[int, dict[str, object]] = {}
    if not visible_indices:
        return out
    try:
        from jouleprof.sensors.nvml import import_pynvml
        from jouleprof.sensors.visible import resolve_gpus

        nv = import_pynvml()
        nv.nvmlInit()
    except Exception as e:
        return {i: {"error": f"{type(e).__name__}: {e}"} for i in visible_indices}
    try:
        for i in visible_indices:
            try:
                g = resolve_gpus(nv, [i], environ)[0]
                bus = nv.nvmlDeviceGetPciInfo(g.handle).busId
                uuid = nv.nvmlDeviceGetUUID(g.handle)
                out[i] = {
                    "pci_bus_id": bus.decode() if isinstance(bus, bytes) else str(bus),
                    "nvml_index": g.physical_index,
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                }
            except Exception as e:
                out[i] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    return out


def device_key(host: str, device: str, info: Mapping[str, object] | None, rank: int) -> str:
    """The key two ranks agree on when they measured one board.

    "gpuK" with NVML info → host/pci:<bus id>; "simK" → host/sim:K; anything unresolved is
    keyed by rank too (kept apart rather than merged by guess).
    """
    if info and info.get("pci_bus_id"):
        return f"{host}/pci:{str(info['pci_bus_id']).lower()}"
    if info and info.get("sim_index") is not None:
        return f"{host}/sim:{info['sim_index']}"
    m = re.fullmatch(r"sim(?:gpu)?(\d+)", device)
    if m:
        return f"{host}/sim:{m.group(1)}"
    return f"{host}/rank{rank}/{device}"
