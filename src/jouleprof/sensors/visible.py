"""Which NVIDIA GPUs the user sees: CUDA_VISIBLE_DEVICES, parsed, redacted and mapped to NVML.

Devices are named "gpu{i}" with i the index the user sees under CUDA_VISIBLE_DEVICES, which may
hold integers, GPU UUIDs (or unique prefixes of them) and MIG UUIDs; each is mapped to the physical
NVML handle. UUIDs are compared in memory only, never stored, logged or put in a message.

pynvml is never imported here: `resolve_gpus` takes the module the caller opened NVML with.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jouleprof.errors import SensorError

log = logging.getLogger(__name__)


def parse_visible_devices(value: str | None) -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES, or None when it is unset (every GPU visible).

    Like CUDA, parsing stops at the first invalid entry (a negative number, an unknown word).
    """
    if value is None:
        return None
    tokens: list[str] = []
    for raw in value.split(","):
        token = raw.strip()
        if token.isdigit():
            tokens.append(str(int(token)))
        elif token.startswith(("GPU-", "MIG-")):
            tokens.append(token)
        else:
            break
    return tokens


def redact_visible_devices(value: str | None) -> str | None:
    """CUDA_VISIBLE_DEVICES with every UUID replaced by a placeholder, safe to record or print."""
    if value is None:
        return None
    out = []
    for raw in value.split(","):
        token = raw.strip()
        if token.isdigit() or not token:
            out.append(token)
        else:
            out.append(f"{token[:3]}-<uuid>" if token.startswith(("GPU-", "MIG-")) else "<other>")
    return ",".join(out)


@dataclass
class VisibleGpu:
    """A GPU as the user sees it, tied to its physical NVML device."""

    name: str
    """"gpu{i}", i the user-visible index."""
    handle: Any
    """The NVML handle of the physical GPU."""
    physical_index: int
    """NVML's index of the physical GPU."""
    note: str | None = None
    """What a reading of it means when it is not the whole story (a MIG instance)."""


def _uuid(nv: Any, handle: Any) -> str:
    u = nv.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


def _match_uuid(nv: Any, token: str, handles: list[Any]) -> tuple[int, str | None] | None:
    """Physical index (and a note) of the GPU a UUID entry names, or None if none matches."""
    if token.startswith("MIG-GPU-"):  # legacy form MIG-GPU-<uuid>/<gi>/<ci>
        token = token[4:].split("/")[0]
    if token.startswith("GPU-"):
        hits = [i for i, h in enumerate(handles) if _uuid(nv, h).startswith(token)]
        return (hits[0], None) if len(hits) == 1 else None
    for i, h in enumerate(handles):  # a MIG instance: measure its physical GPU
        try:
            n_mig = nv.nvmlDeviceGetMaxMigDeviceCount(h)
        except nv.NVMLError:
            continue
        for m in range(n_mig):
            try:
                if _uuid(nv, nv.nvmlDeviceGetMigDeviceHandleByIndex(h, m)).startswith(token):
                    return i, "a MIG instance: power, energy and utilisation are of the whole GPU"
            except nv.NVMLError:
                continue
    return None


def resolve_gpus(
    nv: Any, gpus: Sequence[int] | None, environ: Mapping[str, str] | None = None
) -> list[VisibleGpu]:
    """Map user-visible GPU indices (all visible ones when None) to NVML handles.

    Args:
        nv: the pynvml module, with NVML initialised.
        gpus: user-visible GPU indices; None for every visible GPU.
        environ: where CUDA_VISIBLE_DEVICES is read from (default: os.environ).

    Raises:
        SensorError: an index that does not exist, named with the indices that do, or an NVML
            failure while listing the GPUs.
    """
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    tokens = parse_visible_devices(raw)
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        visible: list[tuple[int, str | None]] = []
        if tokens is None:
            tokens = [str(i) for i in range(len(handles))]
        for pos, token in enumerate(tokens):
            hit = (int(token), None) if token.isdigit() else _match_uuid(nv, token, handles)
            if hit is None or hit[0] >= len(handles):
                log.warning(
                    "CUDA_VISIBLE_DEVICES entry %d names no GPU on this machine; like CUDA, "
                    "it and the entries after it are ignored",
                    pos,
                )
                break
            visible.append(hit)
    except nv.NVMLError as err:
        # NVML errors are mapped in the sensor module, which imports this one: import it late.
        from jouleprof.sensors.nvml import map_nvml_error

        raise map_nvml_error(err, "listing NVIDIA GPUs") from err
    n = len(visible)
    wanted = list(range(n)) if gpus is None else list(gpus)
    for i in wanted:
        if not 0 <= i < n:
            have = f"{n} GPU(s) visible (indices 0..{n - 1})" if n else "no GPU visible"
            if raw is not None:
                have += f" under CUDA_VISIBLE_DEVICES={redact_visible_devices(raw)!r}"
            fix = "pass an index in that range" if n else "unset it or name an existing GPU"
            raise SensorError(
                f"GPU index {i} does not exist: this machine has {have} — {fix}, or change "
                "CUDA_VISIBLE_DEVICES"
            )
    if len(set(wanted)) != len(wanted):
        raise SensorError(f"GPU indices {wanted} name a GPU twice — list each GPU once")
    return [
        VisibleGpu(f"gpu{i}", handles[visible[i][0]], visible[i][0], visible[i][1]) for i in wanted
    ]
