"""Timelines: phase spans from a running workload, and the energy of any window of time."""
