"""Benchmarks and drills: real servers on loopback, driven by ``benchmarks.load``."""
