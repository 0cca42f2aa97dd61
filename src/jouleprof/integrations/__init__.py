"""Automatic phases: PyTorch hooks, and callbacks for the Hugging Face Trainer and Lightning.

Each module imports its framework only when used, so importing jouleprof stays light.
"""
