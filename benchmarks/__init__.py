"""Benchmarks: scripts run by hand (their docstrings say how); unit tests import a few."""
