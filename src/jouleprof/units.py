"""Unit conversions, done once at the sensor boundary. Everything inside jouleprof is SI."""

from __future__ import annotations

MJ_PER_J = 1000.0  # NVML's energy counter counts millijoules
MW_PER_W = 1000.0  # NVML's power readings are milliwatts
UJ_PER_J = 1_000_000.0  # RAPL's energy counters count microjoules
NS_PER_S = 1_000_000_000
BYTES_PER_MIB = 1024 * 1024
J_PER_KWH = 3_600_000.0


def mj_to_j(millijoules: float) -> float:
    return millijoules / MJ_PER_J


def mw_to_w(milliwatts: float) -> float:
    return milliwatts / MW_PER_W


def uj_to_j(microjoules: float) -> float:
    return microjoules / UJ_PER_J


def bytes_to_mib(n_bytes: float) -> float:
    return n_bytes / BYTES_PER_MIB


def j_to_kwh(joules: float) -> float:
    return joules / J_PER_KWH
