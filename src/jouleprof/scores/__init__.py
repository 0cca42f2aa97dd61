"""Composite scores over measured figures."""
