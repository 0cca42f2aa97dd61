"""CPU package and DRAM energy from Linux powercap: Intel RAPL, and AMD through the same interface.

Each zone directory (`intel-rapl:N` for a package, `intel-rapl:N:M` for its sub-zones; `amd-rapl`
on some AMD kernels) holds `name`, `energy_uj` and `max_energy_range_uj`. Devices are named
"cpu-package-0", "cpu-dram-0", ... after the zone's domain and socket. Sub-zones "core" and
"uncore" are inside "package" (do not add them to it); "dram" is not; "psys" covers the platform.

RAPL offers only a cumulative energy counter, so every power field is None. The counter wraps at
`max_energy_range_uj` (minutes to hours); each zone keeps an unwrapped running total, so energy_j
is monotonic as long as the zone is read at least once per wrap period. The counters update about
every millisecond (Intel SDM: ~976 µs), hence `nominal_refresh_s = 0.001`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jouleprof.errors import SensorError, SensorUnavailable
from jouleprof.sensors.base import SIGNALS, SignalInfo
from jouleprof.types import Reading
from jouleprof.units import UJ_PER_J

log = logging.getLogger(__name__)

DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")
NOMINAL_REFRESH_S = 0.001
DOMAINS: tuple[str, ...] = ("package", "dram", "core", "uncore", "psys")
DEFAULT_DOMAINS: tuple[str, ...] = ("package", "dram")
# intel-rapl-mmio zones repeat the package counter through another interface: not matched.
_ZONE_RE = re.compile(r"^(?:intel-rapl|amd-rapl):(\d+)(?::(\d+))?$")
_NOT_ENERGY = "RAPL offers only an energy counter; power comes from its differences"

Reader = Callable[[Path], str]
"""Reads a sysfs file's text; tests inject one that raises PermissionError."""


def read_text(path: Path) -> str:
    return path.read_text()


@dataclass
class _Zone:
    device: str
    energy_path: Path
    max_range_uj: int
    last_raw_uj: int
    total_uj: int
    """The unwrapped counter: the first raw value plus every difference since."""


def _domain_and_socket(name: str, zone_index: int, parent_socket: int | None) -> tuple[str, int]:
    m = re.fullmatch(r"package-(\d+)", name)
    if m:
        return "package", int(m.group(1))
    if parent_socket is not None:  # sub-zones belong to their package's socket
        return name, parent_socket
    return name, zone_index


def scan_zones(
    root: Path | str = DEFAULT_POWERCAP_ROOT,
    include: Sequence[str] = DEFAULT_DOMAINS,
    reader: Reader = read_text,
) -> tuple[list[_Zone], list[SignalInfo]]:
    """The readable RAPL zones under `root`, and a SignalInfo for each one that is not (and why)."""
    bad = [d for d in include if d not in DOMAINS]
    if bad:
        raise ValueError(f"include: unknown RAPL domain(s) {bad}; allowed: {list(DOMAINS)}")
    root = Path(root)
    if not root.is_dir():
        reason = (
            f"no powercap directory at {root}: this system exposes no RAPL energy counters "
            "(not Linux, a VM or container without it, or the intel_rapl_msr module not "
            "loaded — try `sudo modprobe intel_rapl_msr`)"
        )
        return [], [SignalInfo("cpu", "energy_j", False, reason)]
    dirs = sorted(
        (tuple(int(g) for g in m.groups() if g is not None), p)
        for p in root.iterdir()
        if (m := _ZONE_RE.match(p.name))
    )
    if not dirs:
        reason = f"no RAPL zones (intel-rapl:N) under {root}: this CPU or kernel offers none"
        return [], [SignalInfo("cpu", "energy_j", False, reason)]
    zones: list[_Zone] = []
    missing: list[SignalInfo] = []
    sockets: dict[int, int] = {}  # package zone index -> socket
    for key, path in dirs:
        try:
            name = reader(path / "name").strip()
        except OSError as err:
            log.info("skipping RAPL zone %s: cannot read its name (%s)", path, err)
            continue
        if len(key) == 2 and key[0] not in sockets:
            log.info("skipping RAPL sub-zone %s: its package zone has no readable name", path)
            continue
        domain, socket = _domain_and_socket(name, key[0], sockets.get(key[0]))
        if len(key) == 1:
            sockets[key[0]] = socket
        device = f"cpu-{domain}-{socket}"
        energy_path = path / "energy_uj"
        try:
            raw = int(reader(energy_path))
            max_range = int(reader(path / "max_energy_range_uj"))
        except PermissionError:
            reason = (
                f"permission denied reading {energy_path} — run as root or "
                f"`sudo chmod a+r {energy_path}` (kernels since late 2020 make it root-only, "
                "CVE-2020-8694)"
            )
        except (OSError, ValueError) as err:
            reason = f"could not read {energy_path} or max_energy_range_uj: {err}"
        else:
            if domain in include and all(z.device != device for z in zones):
                zones.append(_Zone(device, energy_path, max_range, raw, raw))
            continue
        if domain in include:
            missing.append(SignalInfo(device, "energy_j", False, reason))
    return zones, missing


class RaplSensor:
    """CPU energy counters from Linux powercap (root `/sys/class/powercap` by default).

    Args:
        root: the powercap directory.
        include: which domains to measure, of "package", "dram", "core", "uncore", "psys".
        reader: reads a sysfs file's text (a parameter so that tests can inject failures).

    Raises:
        SensorUnavailable: no zone could be read; the message says why for each.
    """

    kind = "rapl"
    counter_read_is_slow = False
    nominal_refresh_s = NOMINAL_REFRESH_S

    def __init__(
        self,
        root: Path | str = DEFAULT_POWERCAP_ROOT,
        include: Sequence[str] = DEFAULT_DOMAINS,
        reader: Reader = read_text,
    ) -> None:
        zones, missing = scan_zones(root, include, reader)
        if not zones:
            reasons = "; ".join(f"{m.device}: {m.reason}" for m in missing) or "no zone found"
            raise SensorUnavailable(f"no RAPL energy counter can be read: {reasons}")
        self._zones = {z.device: z for z in zones}
        self._devices = tuple(self._zones)
        self._missing = missing
        self._reader = reader
        self._lock = threading.Lock()

    @property
    def devices(self) -> tuple[str, ...]:
        return self._devices

    def signals(self) -> list[SignalInfo]:
        """Every signal of every readable zone, then the zones that could not be read."""
        infos = []
        for device in self._devices:
            for signal in SIGNALS:
                if signal == "energy_j":
                    note = "RAPL counter, unwrapped at max_energy_range_uj"
                    infos.append(SignalInfo(device, signal, True, note))
                else:
                    infos.append(SignalInfo(device, signal, False, _NOT_ENERGY))
        return infos + list(self._missing)

    def read(self, device: str, counter: bool) -> Reading:
        """The zone's unwrapped energy in J when `counter` is True; RAPL has no cheap fields."""
        zone = self._zones.get(device)
        if zone is None:
            raise SensorError(f"unknown device {device!r}: this sensor has {self._devices}")
        if not counter:
            return Reading()
        # Read and unwrap under one lock: two threads applying their raw values out of order
        # would look like a wrap-around.
        with self._lock:
            try:
                raw = int(self._reader(zone.energy_path))
            except PermissionError as err:
                raise SensorUnavailable(
                    f"permission denied reading {zone.energy_path} — run as root or "
                    f"`sudo chmod a+r {zone.energy_path}`"
                ) from err
            except (OSError, ValueError) as err:
                raise SensorError(f"reading {zone.energy_path} failed: {err}") from err
            delta = raw - zone.last_raw_uj
            if delta < 0:  # the counter wrapped (once, if read at least once per wrap)
                delta += zone.max_range_uj
            zone.total_uj += delta
            zone.last_raw_uj = raw
            return Reading(energy_j=zone.total_uj / UJ_PER_J)

    def close(self) -> None:
        """Nothing to release: each read opens and closes its file."""


def open_rapl(
    root: Path | str = DEFAULT_POWERCAP_ROOT,
    include: Sequence[str] = DEFAULT_DOMAINS,
    reader: Reader = read_text,
) -> tuple[RaplSensor | None, list[SignalInfo]]:
    """Open the RAPL zones that can be read.

    Returns:
        The sensor (None when no zone can be read) and a SignalInfo per unreadable zone, or one
        for device "cpu" when there is no powercap directory or no zone at all.
    """
    zones, missing = scan_zones(root, include, reader)
    if not zones:
        return None, missing
    sensor = RaplSensor(root, include, reader)
    return sensor, [s for s in sensor.signals() if not s.available and s.signal == "energy_j"]
