"""The workload registry: one protocol every trainable workload implements, looked up by name.

`profile`, `study`, the cell runner and the probe know no model by name: they call
`get(name)` and drive what comes back through the `Workload` / `Session` protocols below. A new
workload is one module (a class with the `Workload` methods) and one line in `_BUILTIN`, as a
lazy "module:attribute" string so that `jouleprof --help` imports no torch.

    from jouleprof.workloads import registry
    registry.register("mine", "my_package.workload:MyWorkload")   # or a callable
    wl = registry.get("mine")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from jouleprof.timeline.markers import PhaseMarker


class Session(Protocol):
    """One workload trained by a cell. Optional attributes the cell reads where present:

    - `data_wait_s`: host seconds spent getting batches so far (the cell reports the measured
      segment's share as data_wait_pct);
    - `setup_timing_s`: where the session's set-up went (run.json extra.setup_timing_s);
    - `warmup_on_real_batches`: True where the warm-up must not replay one batch (a compiled
      model must meet several shapes);
    - `compiled_graphs()`: graphs torch.compile has compiled so far, or None (run.json
      extra.compiled_graphs counts those of the warm-up and of the measured segment).
    """

    samples_per_step: int
    device: Any

    def step(self, sync: bool, fixed: bool = False) -> float:
        """Train one step; host seconds it took (device-synchronized when `sync`).

        `fixed`: train on the session's first batch again instead of the next one (identical
        work every step: warm-up timing, overhead blocks, attribution benchmarks). The data
        phase then only copies that batch to the device.
        """
        ...

    def sync(self) -> None: ...

    def replays(self) -> dict[str, Callable[[], Any]]:
        """Each phase alone, for the isolation method."""
        ...

    def facts(self) -> dict[str, Any]:
        """Parameter counts, FLOPs per sample and other facts of the model."""
        ...

    def peak_memory_bytes(self) -> int | None: ...

    def close(self) -> None:
        """Stop background work (data-loader workers): the cell's own analysis comes next, and
        busy workers slowed it to a crawl (imports in finish_cell took 20–60 s beside them)."""
        ...


class Workload(Protocol):
    """A trainable workload: a config from (preset, batch size, overrides), then sessions."""

    name: str

    def config(
        self, preset: str, batch_size: int | None, num_workers: int | None, overrides: dict
    ) -> Any:
        """The workload's frozen config; ValueError naming the bad field and its choices."""
        ...

    def describe(self, config: Any) -> dict[str, Any]:
        """The config as JSON-able data for run.json."""
        ...

    def device(self) -> Any: ...

    def gpus(self) -> tuple[int, ...] | None:
        """User-visible indices of the GPUs the workload trains on; None: cannot say."""
        ...

    def session(self, config: Any, marker: PhaseMarker, data: str) -> Session: ...

    def is_oom(self, exc: BaseException) -> bool: ...


Factory = Callable[[], Workload]

# Built-in workloads, as "module:attribute" (imported on first use). One line per workload.
_BUILTIN: dict[str, str] = {
    "vjepa2": "jouleprof.workloads.vjepa2.workload:VJepa2Workload",
    "video": "jouleprof.workloads.video.workload:VideoWorkload",
    "bert": "jouleprof.workloads.bert:BertWorkload",
    "ea-mlp": "jouleprof.workloads.energy_aware.workload:MlpWorkload",
    "ea-cnn": "jouleprof.workloads.energy_aware.workload:CnnWorkload",
    "ea-vit": "jouleprof.workloads.energy_aware.workload:VitWorkload",
}

_REGISTRY: dict[str, Factory | str] = dict(_BUILTIN)


def register(name: str, factory: Factory | str) -> None:
    """Add (or replace) a workload: a zero-argument callable, or a lazy "module:attr" string."""
    if not name or not isinstance(name, str):
        raise ValueError(f"workload name must be a non-empty string, got {name!r}")
    if isinstance(factory, str) and ":" not in factory:
        raise ValueError(f"lazy factory must look like 'package.module:attr', got {factory!r}")
    _REGISTRY[name] = factory


def names() -> list[str]:
    """Registered workload names, sorted."""
    return sorted(_REGISTRY)


def resolve(factory: Factory | str) -> Factory:
    """The callable behind a registration (imports a lazy "module:attr" string)."""
    if not isinstance(factory, str):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def get(name: str) -> Workload:
    """A fresh instance of the workload registered as `name`.

    Raises:
        ValueError: unknown name (the message lists the registered ones).
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}: choose one of {', '.join(names())}") from None
    return resolve(factory)()
