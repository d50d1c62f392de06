"""First-party benchmarks and the Gymnasium adapter."""

from evopolicy.benchmarks.registry import (
    BENCHMARKS,
    BenchmarkEntry,
    baseline_program,
    load_benchmark,
)

__all__ = ["BENCHMARKS", "BenchmarkEntry", "baseline_program", "load_benchmark"]
