"""Benchmarks that run workloads on real hardware: modes, overhead, isolation references, sweeps."""
