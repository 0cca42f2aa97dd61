"""Predict energy, time and memory before running: features from a FakeTensor trace, roofline
bounds from measured GPU ceilings, and predictors trained on measurements."""
