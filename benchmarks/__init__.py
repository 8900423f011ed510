"""Benchmarks; run each as a module from the repository root: ``python -m benchmarks.stream_bench --quick``."""
