"""The Gymnasium adapter: any registered environment id as the benchmark `gymnasium:<EnvId>`."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

import gymnasium

from evopolicy.benchmarks.registry import GYMNASIUM_PREFIX
from evopolicy.kernel.authoring import (
    BenchmarkRef,
    BenchmarkSpec,
    EpisodeEnd,
    EpisodeResult,
    EpisodeSpec,
    Feedback,
    Split,
    parameters_digest,
)
from evopolicy.kernel.errors import BenchmarkError
from evopolicy.kernel.seeds import plan_seeds
from evopolicy.kernel.spaces import describe_space

_DEFAULT_MAX_STEPS = 1_000


class GymnasiumBenchmark:
    """A registered Gymnasium environment with default feedback.

    Description:
        Episodes of ``gymnasium.make(env_id)``, each reset with its own hidden seed.
    Observation / Action:
        The environment's spaces, described in `spec`.
    Reward:
        The environment's reward; the score is the mean episode return (maximized).
    Episode end:
        The environment terminates or truncates, at most `max_episode_steps` steps.
    Parameters:
        env_id, max_episode_steps (default: the environment's own limit, else 1000),
        make_kwargs (keyword arguments for ``gymnasium.make``).
    Feedback:
        Per episode: return, steps, terminated/truncated, outcome and a trace of the first
        and last steps. Overall: score, return statistics and outcome counts.
    Version history:
        v1: first version.
    """

    benchmark_id: ClassVar[str | None] = None
    description: ClassVar[str] = "A Gymnasium environment."

    def __init__(
        self,
        env_id: str,
        *,
        max_episode_steps: int | None = None,
        make_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            env_spec = gymnasium.spec(env_id)
        except gymnasium.error.Error as error:
            raise BenchmarkError(
                "unknown_benchmark", f"Gymnasium has no environment {env_id!r}: {error}"
            ) from None
        steps = max_episode_steps or env_spec.max_episode_steps or _DEFAULT_MAX_STEPS
        if steps < 1:
            raise BenchmarkError("benchmark_invalid", "max_episode_steps must be at least 1")
        self.env_id = env_id
        self.max_episode_steps = int(steps)
        self.make_kwargs = dict(make_kwargs or {})

    @property
    def parameters(self) -> dict[str, Any]:
        """Public parameters; `__init__(**parameters)` rebuilds this benchmark."""
        parameters: dict[str, Any] = {
            "env_id": self.env_id,
            "max_episode_steps": self.max_episode_steps,
        }
        if self.make_kwargs:
            parameters["make_kwargs"] = self.make_kwargs
        return parameters

    @cached_property
    def ref(self) -> BenchmarkRef:
        cls = type(self)
        return BenchmarkRef(f"{cls.__module__}:{cls.__qualname__}", self.parameters)

    @cached_property
    def spec(self) -> BenchmarkSpec:
        env = self._make()
        try:
            observation_space = describe_space(env.observation_space)
            action_space = describe_space(env.action_space)
        finally:
            env.close()
        return BenchmarkSpec(
            id=self.benchmark_id or f"{GYMNASIUM_PREFIX}{self.env_id}",
            description=self.description,
            observation_space=observation_space,
            action_space=action_space,
            parameters=self.parameters,
            parameters_digest=parameters_digest(self.parameters),
            max_episode_steps=self.max_episode_steps,
            metadata=self.metadata(),
            versions={"gymnasium": gymnasium.__version__, "benchmark": "v1"},
        )

    def metadata(self) -> dict[str, Any]:
        """Public notes for the policy's context."""
        return {"env_id": self.env_id}

    def plan(self, split: Split, *, seed: int, count: int) -> tuple[EpisodeSpec, ...]:
        return tuple(EpisodeSpec(seed=s) for s in plan_seeds(seed, split, count))

    def make_environment(self, episode: EpisodeSpec) -> Any:
        return self._make()

    def _make(self) -> Any:
        return gymnasium.make(
            self.env_id, max_episode_steps=self.max_episode_steps, **self.make_kwargs
        )

    def summarize(self, env: Any, end: EpisodeEnd, result: EpisodeResult) -> dict[str, Any]:
        return {
            "return": result.episode_return,
            "steps": result.steps,
            "terminated": result.terminated,
            "truncated": result.truncated,
            "outcome": result.outcome,
        }

    def feedback(self, results: Sequence[EpisodeResult]) -> Feedback:
        returns = [r.episode_return for r in results]
        content: dict[str, Any] = {
            "episodes": len(results),
            "mean_return": statistics.fmean(returns) if returns else 0.0,
            "std_return": statistics.pstdev(returns) if returns else 0.0,
            "min_return": min(returns, default=0.0),
            "max_return": max(returns, default=0.0),
            "mean_steps": statistics.fmean(r.steps for r in results) if results else 0.0,
            "outcomes": dict(Counter(r.outcome for r in results)),
        }
        return Feedback(score=content["mean_return"], content=content)
