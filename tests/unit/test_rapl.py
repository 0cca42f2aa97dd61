"""RaplSensor over fake powercap trees: zones, naming, wrap-around, unreadable counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jouleprof.errors import SensorError, SensorUnavailable
from jouleprof.sensors.base import Sensor
from jouleprof.sensors.rapl import RaplSensor, open_rapl, read_text

MAX_UJ = 262_143_328_850


def zone(root: Path, dirname: str, name: str, energy_uj: int, max_uj: int = MAX_UJ) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


@pytest.fixture
def two_sockets(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)  # the control-type directory: not a zone
    zone(root, "intel-rapl:0", "package-0", 1_000_000)
    zone(root, "intel-rapl:0:0", "core", 400_000)
    zone(root, "intel-rapl:0:1", "dram", 2_000_000)
    zone(root, "intel-rapl:1", "package-1", 5_000_000)
    zone(root, "intel-rapl:1:0", "dram", 7_000_000)
    zone(root, "intel-rapl-mmio:0", "package-0", 9)  # same counter via MMIO: skipped
    return root


def set_energy(root: Path, dirname: str, energy_uj: int) -> None:
    (root / dirname / "energy_uj").write_text(f"{energy_uj}\n")


def test_opens_package_and_dram_zones(two_sockets: Path) -> None:
    sensor = RaplSensor(two_sockets)
    assert isinstance(sensor, Sensor)
    assert sensor.kind == "rapl"
    assert sensor.devices == ("cpu-package-0", "cpu-dram-0", "cpu-package-1", "cpu-dram-1")
    assert sensor.counter_read_is_slow is False
    assert sensor.nominal_refresh_s == pytest.approx(0.001)
    assert sensor.read("cpu-package-0", counter=True).energy_j == pytest.approx(1.0)
    assert sensor.read("cpu-dram-1", counter=True).energy_j == pytest.approx(7.0)


def test_power_fields_are_none_never_zero(two_sockets: Path) -> None:
    sensor = RaplSensor(two_sockets)
    r = sensor.read("cpu-package-0", counter=True)
    assert r.power_w is None and r.power_instant_w is None and r.util_pct is None
    assert sensor.read("cpu-package-0", counter=False).energy_j is None
    infos = {(i.device, i.signal): i for i in sensor.signals()}
    assert infos[("cpu-package-0", "energy_j")].available
    assert not infos[("cpu-package-0", "power_w")].available
    assert infos[("cpu-package-0", "power_w")].reason


def test_optional_core_zone(two_sockets: Path) -> None:
    sensor = RaplSensor(two_sockets, include=("package", "core"))
    assert sensor.devices == ("cpu-package-0", "cpu-core-0", "cpu-package-1")


def test_unknown_domain_is_a_value_error(two_sockets: Path) -> None:
    with pytest.raises(ValueError, match="include"):
        RaplSensor(two_sockets, include=("gpu",))


def test_counter_accumulates_and_unwraps(tmp_path: Path) -> None:
    max_uj = 1_000_000
    zone(tmp_path, "intel-rapl:0", "package-0", 900_000, max_uj)
    sensor = RaplSensor(tmp_path, include=("package",))
    assert sensor.read("cpu-package-0", True).energy_j == pytest.approx(0.9)
    set_energy(tmp_path, "intel-rapl:0", 990_000)
    assert sensor.read("cpu-package-0", True).energy_j == pytest.approx(0.99)
    set_energy(tmp_path, "intel-rapl:0", 40_000)  # wrapped: +10_000 to the top, +40_000 after
    assert sensor.read("cpu-package-0", True).energy_j == pytest.approx(1.04)
    set_energy(tmp_path, "intel-rapl:0", 500_000)
    set_energy(tmp_path, "intel-rapl:0", 100_000)
    # Reads between wraps stay monotonic across a second wrap.
    seen = []
    for raw in (500_000, 999_000, 3_000, 3_000, 600_000):
        set_energy(tmp_path, "intel-rapl:0", raw)
        seen.append(sensor.read("cpu-package-0", True).energy_j)
    assert seen == sorted(seen)
    assert seen[-1] == pytest.approx(1.04 + 0.46 + 0.499 + 0.004 + 0.597)


def test_amd_names(tmp_path: Path) -> None:
    zone(tmp_path, "amd-rapl:0", "package-0", 10)
    zone(tmp_path, "amd-rapl:0:0", "core", 5)
    sensor, missing = open_rapl(tmp_path)
    assert sensor is not None and sensor.devices == ("cpu-package-0",)
    assert missing == []


def test_permission_denied_names_the_file_and_the_fix(two_sockets: Path) -> None:
    def reader(path: Path) -> str:
        if path.name == "energy_uj" and path.parent.name == "intel-rapl:0":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    sensor, missing = open_rapl(two_sockets, reader=reader)
    assert sensor is not None
    assert "cpu-package-0" not in sensor.devices
    assert "cpu-dram-0" in sensor.devices  # a sub-zone stays readable
    [info] = missing
    assert info.device == "cpu-package-0" and not info.available
    assert "permission denied reading" in info.reason
    assert str(two_sockets / "intel-rapl:0" / "energy_uj") in info.reason
    assert "chmod a+r" in info.reason and "root" in info.reason


def test_nothing_readable(two_sockets: Path) -> None:
    def reader(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    sensor, missing = open_rapl(two_sockets, reader=reader)
    assert sensor is None
    assert {m.device for m in missing} == {
        "cpu-package-0",
        "cpu-dram-0",
        "cpu-package-1",
        "cpu-dram-1",
    }
    with pytest.raises(SensorUnavailable, match="permission denied"):
        RaplSensor(two_sockets, reader=reader)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads mode-000 files")
def test_chmod_000_is_unavailable(two_sockets: Path) -> None:
    target = two_sockets / "intel-rapl:1" / "energy_uj"
    target.chmod(0)
    try:
        sensor, missing = open_rapl(two_sockets)
    finally:
        target.chmod(0o644)
    assert sensor is not None and "cpu-package-1" not in sensor.devices
    assert [m.device for m in missing] == ["cpu-package-1"]


def test_no_powercap_dir(tmp_path: Path) -> None:
    sensor, missing = open_rapl(tmp_path / "nope")
    assert sensor is None
    [info] = missing
    assert "no powercap directory" in info.reason and "nope" in info.reason


def test_empty_powercap_dir(tmp_path: Path) -> None:
    sensor, missing = open_rapl(tmp_path)
    assert sensor is None
    assert "no RAPL zones" in missing[0].reason


def test_read_errors(two_sockets: Path) -> None:
    sensor = RaplSensor(two_sockets)
    with pytest.raises(SensorError, match="unknown device"):
        sensor.read("gpu0", True)
    (two_sockets / "intel-rapl:0" / "energy_uj").unlink()
    with pytest.raises(SensorError, match="energy_uj"):
        sensor.read("cpu-package-0", True)
    sensor.close()
