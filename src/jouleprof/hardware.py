"""What a run ran on: hardware, software environment and git revision, for run.json.

Read-only queries only (nothing is set). Nothing that identifies a machine or a person is recorded:
no serial numbers, UUIDs, hostnames, usernames, MAC or IP addresses; CUDA_VISIBLE_DEVICES is
recorded with its UUIDs replaced. A part that cannot be read is recorded as
{"value": None, "reason": "..."}, never guessed.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import platform
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jouleprof.cores import usable_cores
from jouleprof.errors import SensorError
from jouleprof.sensors.nvml import (
    import_pynvml,
    map_nvml_error,
    redact_visible_devices,
    resolve_gpus,
)
from jouleprof.units import MW_PER_W

log = logging.getLogger(__name__)

PACKAGES: tuple[str, ...] = (
    "numpy",
    "pandas",
    "scipy",
    "nvidia-ml-py",
    "torch",
    "torchvision",
    "transformers",
    "peft",
    "timm",
    "av",
    "bitsandbytes",
)
"""Distributions whose versions environment_record notes (those not installed say so)."""


def missing(reason: str) -> dict[str, Any]:
    """How a part that could not be read is recorded."""
    return {"value": None, "reason": reason}


def _scrub(text: str) -> str:
    """Drop the home directory and host name from text that came from outside (stderr, errors)."""
    home = str(Path.home())
    if len(home) > 1:
        text = text.replace(home, "~")
    host = socket.gethostname()
    return text.replace(host, "<host>") if host else text


def _ask(fn: Callable[[], Any], what: str) -> Any:
    """fn(), or missing(reason) when the query raises."""
    try:
        return fn()
    except Exception as err:  # each part is best effort; the reason is recorded
        log.debug("%s unavailable: %s", what, err)
        return missing(_scrub(f"{what}: {err}"))


NO_GPU_MEASURED = "no GPU measured in this run (none was asked for)"
"""The reason `gpus` holds when a run described no GPU on purpose (an empty index list)."""


def _gpu_part(gpu_indices: Sequence[int] | None, environ: Mapping[str, str] | None) -> dict:
    # An empty list is a choice, not a failure: say so whatever NVML would have said.
    none_asked = gpu_indices is not None and len(gpu_indices) == 0
    try:
        nv = import_pynvml()
    except SensorError as err:
        gpus_missing = missing(NO_GPU_MEASURED if none_asked else str(err))
        return {"gpus": gpus_missing, "driver_version": missing(str(err))}
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        reason = str(map_nvml_error(err, "opening NVML"))
        gpus_missing = missing(NO_GPU_MEASURED if none_asked else reason)
        return {"gpus": gpus_missing, "driver_version": missing(reason)}
    try:
        try:
            gpus = [] if none_asked else resolve_gpus(nv, gpu_indices, environ)
        except SensorError as err:
            gpus, gpus_reason = [], str(err)
        else:
            gpus_reason = None
            if not gpus:
                gpus_reason = NO_GPU_MEASURED if none_asked else "no GPU visible"
        records = []
        for g in gpus:
            h = g.handle
            record = {
                "device": g.name,
                "name": _ask(lambda h=h: _text(nv.nvmlDeviceGetName(h)), "GPU name"),
                "memory_total_bytes": _ask(
                    lambda h=h: int(nv.nvmlDeviceGetMemoryInfo(h).total), "memory"
                ),
                "power_limit_w": _ask(
                    lambda h=h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / MW_PER_W, "power limit"
                ),
                "default_power_limit_w": _ask(
                    lambda h=h: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / MW_PER_W,
                    "default power limit",
                ),
                "compute_capability": _ask(
                    lambda h=h: ".".join(map(str, nv.nvmlDeviceGetCudaComputeCapability(h))),
                    "compute capability",
                ),
            }
            if g.note:
                record["note"] = g.note
            records.append(record)

        def cuda() -> str:
            v = nv.nvmlSystemGetCudaDriverVersion()
            return f"{v // 1000}.{v % 1000 // 10}"

        return {
            "gpus": records if gpus_reason is None else missing(gpus_reason),
            "driver_version": _ask(lambda: _text(nv.nvmlSystemGetDriverVersion()), "driver"),
            "cuda_driver_version": _ask(cuda, "CUDA driver version"),
        }
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as err:
            log.warning("nvmlShutdown failed: %s", err)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cpu_model() -> Any:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or missing("no CPU model in /proc/cpuinfo or platform")


def _physical_cores() -> Any:
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
        if n:
            return n
    except ImportError:
        pass
    cores = set()
    for topo in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            cores.add(((topo / "physical_package_id").read_text(), (topo / "core_id").read_text()))
        except OSError:
            continue
    return len(cores) or missing("neither psutil nor /sys/devices/system/cpu topology says")


def _ram_bytes() -> Any:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return missing("os.sysconf cannot say and psutil is not installed")


def _cgroup_memory_limit() -> Any:
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return missing("no cgroup v2 memory.max")
    return missing("no cgroup memory limit (memory.max is max)") if text == "max" else int(text)


def hardware_record(
    gpu_indices: Sequence[int] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """GPUs (model, memory, power limit), driver, CPU, RAM and OS of this machine.

    Args:
        gpu_indices: user-visible GPU indices to describe; None for every visible GPU; empty for
            none (`gpus` then records NO_GPU_MEASURED as its reason).
        environ: where CUDA_VISIBLE_DEVICES is read from (default: os.environ).
    """
    usable = usable_cores() or missing("os.sched_getaffinity is not available on this OS")
    try:
        distribution = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        distribution = missing("no /etc/os-release")
    return {
        **_gpu_part(gpu_indices, environ),
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": os.cpu_count() or missing("os.cpu_count() cannot say"),
            "physical_cores": _physical_cores(),
            "usable_cores": usable,
        },
        "ram_bytes": _ram_bytes(),
        "cgroup_memory_limit_bytes": _cgroup_memory_limit(),
        "os": {
            "system": platform.system(),
            "kernel": platform.release(),
            "distribution": distribution,
            "machine": platform.machine(),
        },
    }


def _version(dist: str) -> Any:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return missing("not installed")


def environment_record(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Python, jouleprof, torch (and its CUDA), key package versions and CUDA_VISIBLE_DEVICES."""
    from jouleprof import __version__

    env = os.environ if environ is None else environ
    try:
        import torch

        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        torch_record: Any = {
            "version": torch.__version__,
            "cuda": torch.version.cuda or missing("this torch is built without CUDA"),
            "cudnn": cudnn or missing("cuDNN not available to this torch"),
        }
    except Exception as err:  # ImportError, or a broken install raising OSError
        torch_record = missing(_scrub(f"torch cannot be imported: {err}"))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "jouleprof": __version__,
        "torch": torch_record,
        "packages": {name: _version(name) for name in PACKAGES},
        "cuda_visible_devices": (
            redact_visible_devices(visible) if visible is not None else missing("unset: all GPUs")
        ),
        "cuda_device_order": env.get("CUDA_DEVICE_ORDER") or missing("unset (FASTEST_FIRST)"),
    }


GIT_STAT = ("-c", "core.checkStat=minimal", "-c", "core.trustctime=false")
"""How `git status` tells a file unchanged: by size and modification time only. A checkout
copied with its times (cp -a, rsync -a, a container image) has new inodes and change times, so
by default git re-reads every tracked file, and, without taking the index lock
(GIT_OPTIONAL_LOCKS=0), does it again at every run: 0.4 s a run on this repository's copy (2-core
machine), ~0.01 s with these settings."""


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not take index.lock from under a concurrent commit.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    return subprocess.run(
        ["git", *GIT_STAT, "-C", str(path), *args],
        capture_output=True,
        text=True,
        timeout=10,
        env=env,
    )


def git_record(path: str | Path = ".") -> dict[str, Any]:
    """The git revision, branch and dirty flag of the checkout at `path`, or why there is none.

    Remote URLs are not recorded (they may hold a username or a token).
    """
    path = Path(path)
    try:
        head = _git(path, "rev-parse", "--verify", "-q", "HEAD")
        if head.returncode != 0:
            inside = _git(path, "rev-parse", "--is-inside-work-tree")
            if inside.returncode != 0:
                first = (inside.stderr.strip().splitlines() or ["not a git repository"])[0]
                if "dubious ownership" in first:
                    first += " — `git config --global --add safe.directory <path>`"
                return {"revision": None, "reason": _scrub(first)}
            return {"revision": None, "reason": "the repository has no commits yet"}
        status = _git(path, "status", "--porcelain", "--untracked-files=no")
        branch = _git(path, "symbolic-ref", "--short", "-q", "HEAD")
    except FileNotFoundError:
        return {"revision": None, "reason": "git is not installed (not on PATH)"}
    except subprocess.TimeoutExpired:
        return {"revision": None, "reason": "git did not answer within 10 s"}
    return {
        "revision": head.stdout.strip(),
        "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None,
        "branch": branch.stdout.strip() if branch.returncode == 0 else None,
        "detached": branch.returncode != 0,
    }


GIT_RECORD_ENV = "JOULEPROF_GIT_RECORD"
"""A launcher (a study's executor, the probe) hands its git record to the processes it starts
in the same checkout through this variable, so that each cell records the code it was launched
from without asking git again (three git processes forked from a cell that may hold a model)."""


def git_record_env(path: str | Path = ".") -> dict[str, str]:
    """The environment entry that hands the git record of the checkout at `path` to processes
    started there (`inherited_git_record` reads it)."""
    rec = git_record(path)
    rec["source"] = "recorded by the launching process at " + time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {GIT_RECORD_ENV: json.dumps({"path": str(Path(path).resolve()), "record": rec})}


def inherited_git_record(
    path: str | Path = ".", environ: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The git record a launcher handed down for the checkout at `path`, or None (none handed
    down, unreadable, or for another checkout)."""
    text = (os.environ if environ is None else environ).get(GIT_RECORD_ENV)
    if not text:
        return None
    try:
        d = json.loads(text)
        if d["path"] != str(Path(path).resolve()):
            return None
        return dict(d["record"])
    except (ValueError, KeyError, TypeError):
        return None
