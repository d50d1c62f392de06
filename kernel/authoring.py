"""The benchmark SPI: what a benchmark author implements, and the values it trades in.

A benchmark plans episodes from a seed, makes an environment for one, summarizes a
finished episode in the runner (where the environment lives), and turns a list of
episode results into public feedback.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import numpy as np
import orjson

from evopolicy.kernel.errors import BenchmarkError, OutcomeCode

Split: TypeAlias = Literal["train", "validation", "assessment"]
SPLITS: tuple[Split, ...] = ("train", "validation", "assessment")
Direction: TypeAlias = Literal["maximize", "minimize"]
Retention: TypeAlias = Literal["keep", "bulk"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def canonical_json(value: Any) -> bytes:
    """Sorted-key JSON bytes: the form digests are taken over."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def parameters_digest(parameters: Mapping[str, Any]) -> str:
    """SHA-256 over a domain tag and the canonical JSON of public parameters."""
    body = canonical_json(dict(parameters))
    return hashlib.sha256(b"evopolicy/parameters/v1\0" + body).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSpec:
    """Trusted, host-side description of one episode. Never shown to the policy."""

    seed: int
    """Environment reset seed."""
    options: Mapping[str, Any] = field(default_factory=_empty)
    """Reset options passed to `env.reset`."""
    scenario: Mapping[str, Any] = field(default_factory=_empty)
    """Benchmark-defined scenario (layout, difficulty, ...) read by `make_environment`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _frozen(self.options))
        object.__setattr__(self, "scenario", _frozen(self.scenario))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_episode_spec, (self.seed, dict(self.options), dict(self.scenario)))


def _episode_spec(seed: int, options: dict[str, Any], scenario: dict[str, Any]) -> EpisodeSpec:
    return EpisodeSpec(seed=seed, options=options, scenario=scenario)


@dataclass(frozen=True, slots=True, kw_only=True)
class Episode:
    """One episode to evaluate: public index, trusted spec, and the policy's seed."""

    index: int
    spec: EpisodeSpec
    policy_seed: int


@dataclass(frozen=True, slots=True)
class BenchmarkRef:
    """How to rebuild a benchmark in another process: entry point plus parameters."""

    entry_point: str
    """``"package.module:ClassName"``, called as ``ClassName(**parameters)``."""
    parameters: Mapping[str, Any] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", _frozen(self.parameters))

    def __reduce__(self) -> tuple[Any, ...]:
        return (BenchmarkRef, (self.entry_point, dict(self.parameters)))

    def __hash__(self) -> int:
        return hash((self.entry_point, canonical_json(dict(self.parameters))))

    def load(self) -> Benchmark:
        """Import the entry point and construct the benchmark.

        Raises:
            BenchmarkError: the entry point cannot be imported or rejects the parameters.
        """
        module_name, _, attribute = self.entry_point.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise BenchmarkError(
                "benchmark_invalid", f"cannot load benchmark {self.entry_point}: {error}"
            ) from None
        return factory(**self.parameters)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkSpec:
    """Public identity and description of a configured benchmark."""

    id: str
    description: str
    observation_space: Mapping[str, Any]
    action_space: Mapping[str, Any]
    parameters: Mapping[str, Any]
    parameters_digest: str
    max_episode_steps: int
    score_direction: Direction = "maximize"
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    """Public notes handed to the policy as `context.metadata`."""
    versions: Mapping[str, str] = field(default_factory=_empty)
    """Simulator and benchmark versions: results are comparable only within them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeEnd:
    """The environment's last word in an episode, for `Benchmark.summarize`."""

    observation: Any
    info: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeResult:
    """What happened in one episode. Public except the timings, which vary by machine."""

    index: int
    outcome: OutcomeCode
    episode_return: float
    steps: int
    terminated: bool
    truncated: bool
    failure: str | None = None
    """A sentence on why a non-ok episode ended."""
    traceback: str | None = None
    stdout: str = ""
    stderr: str = ""
    trace: Mapping[str, Any] = field(default_factory=_empty)
    """``{"head": [...], "tail": [...], "omitted": n, "final_observation": ...}``."""
    summary: Mapping[str, Any] = field(default_factory=_empty)
    """Benchmark-defined public content for this episode."""
    policy_seconds: float = field(default=0.0, compare=False)
    env_seconds: float = field(default=0.0, compare=False)
    worker_peak_rss_kib: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifact:
    """A file published with feedback."""

    name: str
    content_type: str
    data: bytes
    retention: Retention = "keep"


@dataclass(frozen=True, slots=True, kw_only=True)
class Feedback:
    """Public result of evaluating a program on some episodes."""

    score: float
    content: Mapping[str, Any] = field(default_factory=_empty)
    artifacts: tuple[Artifact, ...] = ()


@runtime_checkable
class Benchmark(Protocol):
    """A configured environment family. Implementations live in `evopolicy.benchmarks`."""

    @property
    def ref(self) -> BenchmarkRef:
        """How another process rebuilds this benchmark."""
        ...

    @property
    def spec(self) -> BenchmarkSpec: ...

    def plan(self, split: Split, *, seed: int, count: int) -> tuple[EpisodeSpec, ...]:
        """`count` episodes of `split`, a pure function of (split, seed, count)."""
        ...

    def make_environment(self, episode: EpisodeSpec) -> Any:
        """A fresh Gymnasium environment for the episode (reset by the caller)."""
        ...

    def summarize(self, env: Any, end: EpisodeEnd, result: EpisodeResult) -> Mapping[str, Any]:
        """Public per-episode content, computed where the environment lives."""
        ...

    def feedback(self, results: Sequence[EpisodeResult]) -> Feedback:
        """Score and public content for a list of episode results."""
        ...


def jsonable(value: Any, *, max_elements: int = 64) -> Any:
    """A JSON-able copy of an observation or action; big arrays become statistics."""
    if isinstance(value, np.ndarray):
        if value.size > max_elements:
            summary: dict[str, Any] = {"shape": list(value.shape), "dtype": str(value.dtype)}
            if value.size and value.dtype.kind in "biuf":
                summary |= {
                    "min": float(value.min()),
                    "max": float(value.max()),
                    "mean": float(value.mean()),
                }
            return summary
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): jsonable(v, max_elements=max_elements) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if len(value) > max_elements:
            return {"length": len(value), "head": [jsonable(v) for v in value[:8]]}
        return [jsonable(v, max_elements=max_elements) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return repr(value)[:200]
