"""NvmlSensor on a real NVIDIA GPU: devices, sane readings, a monotonic counter, read costs."""

from __future__ import annotations

import os
import statistics
import time

import pytest

from jouleprof.errors import SensorError
from jouleprof.sensors.base import Sensor
from jouleprof.sensors.nvml import NvmlSensor, gpu_processes

pytestmark = pytest.mark.gpu


def _nvml_ok() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    ok = pynvml.nvmlDeviceGetCount() > 0
    pynvml.nvmlShutdown()
    return ok


if not _nvml_ok():
    pytest.skip("pynvml cannot initialise (no NVIDIA driver or GPU)", allow_module_level=True)


@pytest.fixture(scope="module")
def sensor():
    s = NvmlSensor()
    yield s
    s.close()


def test_devices(sensor: NvmlSensor) -> None:
    assert isinstance(sensor, Sensor)
    assert sensor.devices and all(d.startswith("gpu") for d in sensor.devices)
    assert sensor.devices[0] == "gpu0"
    assert sensor.counter_read_is_slow is True
    infos = {(i.device, i.signal): i for i in sensor.signals()}
    assert infos[("gpu0", "energy_j")].available
    assert infos[("gpu0", "power_w")].available


def test_readings_are_sane(sensor: NvmlSensor) -> None:
    for device in sensor.devices:
        r = sensor.read(device, counter=True)
        assert 20 <= r.power_w <= 1500, r
        if r.power_instant_w is not None:
            assert 20 <= r.power_instant_w <= 1500, r
        assert r.mem_used_bytes > 0
        assert 0 <= r.util_pct <= 100
        assert 0 < r.sm_clock_mhz < 5000
        assert 0 < r.temp_c < 120
        assert r.energy_j > 0
        assert sensor.read(device, counter=False).energy_j is None


def test_counter_is_monotonic(sensor: NvmlSensor) -> None:
    values = []
    t_end = time.perf_counter() + 0.5
    while time.perf_counter() < t_end:
        values.append(sensor.read("gpu0", counter=True).energy_j)
        time.sleep(0.01)
    assert values == sorted(values)
    assert values[-1] > values[0]  # an idle GPU still draws tens of watts


def test_read_costs(sensor: NvmlSensor) -> None:
    def cost_s(counter: bool) -> float:
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            sensor.read("gpu0", counter=counter)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    cheap_s, with_counter_s = cost_s(False), cost_s(True)
    print(f"median read: cheap {cheap_s * 1e6:.0f} us, with counter {with_counter_s * 1e3:.2f} ms")
    assert cheap_s < 0.01


def test_bad_index_message() -> None:
    with pytest.raises(SensorError, match="GPU index 99 does not exist"):
        NvmlSensor([99])


def test_visible_devices_by_uuid() -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    with NvmlSensor([0], environ={"CUDA_VISIBLE_DEVICES": uuid[:12]}) as s:
        assert s.devices == ("gpu0",)
        assert s.read("gpu0", counter=False).power_w is not None
    with pytest.raises(SensorError) as err:
        NvmlSensor([1], environ={"CUDA_VISIBLE_DEVICES": uuid})
    assert uuid not in str(err.value)


def test_gpu_processes(sensor: NvmlSensor) -> None:
    procs = gpu_processes(sensor)
    assert all({"device", "pid", "used_memory_bytes", "own"} <= set(p) for p in procs)
    assert all(p["device"] == "gpu0" for p in gpu_processes([0]))
    assert all(p["own"] == (p["pid"] == os.getpid()) for p in procs)


def test_closed_sensor_raises() -> None:
    s = NvmlSensor([0])
    s.close()
    s.close()
    with pytest.raises(SensorError, match="closed"):
        s.read("gpu0", counter=False)


def test_the_preallocated_instant_reader_agrees_with_pynvmls_call(sensor):
    import pynvml

    from jouleprof.sensors.nvml import POWER_INSTANT_FIELD, decode_field_value, instant_field_reader

    h = sensor.handle(sensor.devices[0])
    read = instant_field_reader(pynvml, h)
    for _ in range(5):
        fast = read()
        slow = decode_field_value(pynvml.nvmlDeviceGetFieldValues(h, [POWER_INSTANT_FIELD])[0])
        assert fast is not None and slow is not None
        assert fast == pytest.approx(slow, rel=0.15)  # mW, read a few µs apart
        time.sleep(0.05)


def test_read_fast_gives_the_instant_power_between_slow_reads():
    # A sensor of its own: the slow fields' grid starts at its first read, so the next slot is
    # a whole period away. (On the module's sensor the grid keeps the phase of earlier tests,
    # and its next slot can fall within the few ms between the two reads below.)
    sensor = NvmlSensor()
    try:
        _check_read_fast(sensor)
    finally:
        sensor.close()


def _check_read_fast(sensor: NvmlSensor) -> None:
    dev = sensor.devices[0]
    full = sensor.read(dev, counter=False)  # reads the slow fields and starts their grid
    assert full.power_w is not None
    fast = sensor.read_fast(dev)
    assert fast is not None and fast[0] == "power_instant_w"
    assert fast[1] == pytest.approx(full.power_instant_w, rel=0.5)  # same GPU, µs apart
    time.sleep(sensor.slow_period_s + 0.01)
    assert sensor.read_fast(dev) is None  # the slow fields are due: read() must run
