"""Energy-aware learning: an internal activation energy E and its penalty λ·E (`regularizer`)."""

from jouleprof.energy_aware.regularizer import KINDS, EnergyRegularizer, LambdaSchedule

__all__ = ["KINDS", "EnergyRegularizer", "LambdaSchedule"]
