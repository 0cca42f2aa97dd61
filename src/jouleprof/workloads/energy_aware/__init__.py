"""The energy-aware study's workloads: an MLP, a CNN and small ViTs (`models`), package-shipped,
generated and local image datasets (`datasets`), the choices cells and workloads share
(`choices`), one measured cell (`cell`), the study matrix (`study`) and the sparse-kernel probe
(`sparse_probe`). The regularizer itself is the library module `jouleprof.energy_aware`."""
