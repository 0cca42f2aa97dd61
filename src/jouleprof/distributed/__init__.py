"""Rank-aware measurement under torchrun: each rank measures its own GPU, and the ranks'
figures are reduced (energy summed over physical GPUs, time as the slowest rank)."""
