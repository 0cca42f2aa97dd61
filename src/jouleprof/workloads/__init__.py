"""Training and inference workloads that mark their phases through a `PhaseMarker`."""
