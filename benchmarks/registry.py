"""Benchmark ids -> entry points. Listing ids imports no benchmark."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evopolicy.kernel.authoring import Benchmark, BenchmarkRef
from evopolicy.kernel.errors import BenchmarkError

GYMNASIUM_PREFIX = "gymnasium:"
_PROGRAMS = Path(__file__).parent / "programs"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkEntry:
    """A first-party benchmark: its id, where it lives, and its shipped programs."""

    id: str
    entry_point: str
    family: str
    summary: str

    @property
    def baseline(self) -> Path:
        """Folder of the baseline program shipped with the benchmark."""
        return _PROGRAMS / self.id / "baseline"


BENCHMARKS: Mapping[str, BenchmarkEntry] = {
    entry.id: entry
    for entry in (
        BenchmarkEntry(
            id="cartpole",
            entry_point="evopolicy.benchmarks.cartpole:CartPole",
            family="classic_control",
            summary="Balance a pole on a cart (CartPole-v1, 500 steps).",
        ),
    )
}


def load_benchmark(benchmark_id: str, parameters: Mapping[str, Any] | None = None) -> Benchmark:
    """Construct a benchmark by id: a first-party id or ``gymnasium:<EnvId>``.

    Raises:
        BenchmarkError: the id is unknown or the parameters are rejected.
    """
    parameters = dict(parameters or {})
    if benchmark_id.startswith(GYMNASIUM_PREFIX):
        ref = BenchmarkRef(
            "evopolicy.benchmarks.gymnasium_env:GymnasiumBenchmark",
            {"env_id": benchmark_id.removeprefix(GYMNASIUM_PREFIX)} | parameters,
        )
    elif benchmark_id in BENCHMARKS:
        ref = BenchmarkRef(BENCHMARKS[benchmark_id].entry_point, parameters)
    else:
        known = ", ".join(sorted(BENCHMARKS))
        raise BenchmarkError(
            "unknown_benchmark",
            f"unknown benchmark {benchmark_id!r}; known: {known}, or gymnasium:<EnvId>",
        )
    try:
        return ref.load()
    except TypeError as error:
        raise BenchmarkError(
            "benchmark_invalid", f"benchmark {benchmark_id!r} rejects its parameters: {error}"
        ) from None


def baseline_program(benchmark_id: str) -> Path:
    """The baseline program folder of a first-party benchmark.

    Raises:
        BenchmarkError: the benchmark ships no baseline (e.g. a plain gymnasium: id).
    """
    entry = BENCHMARKS.get(benchmark_id)
    if entry is None or not entry.baseline.is_dir():
        raise BenchmarkError(
            "unknown_benchmark", f"benchmark {benchmark_id!r} ships no baseline program"
        )
    return entry.baseline
