"""RunConfig: everything fixed about a run before the agent starts."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evopolicy.kernel.limits import Limits

FinishBudgetPolicy = Literal["allow_early", "require_budget_exhaustion"]


class TimeoutsConfig(BaseModel):
    """Policy-time deadlines and caps of each episode (see `Limits`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_seconds: float = Field(default=20.0, gt=0)
    """Importing the program and make_policy(context)."""
    step_seconds: float = Field(default=2.0, gt=0)
    """One act(observation) call."""
    episode_seconds: float = Field(default=120.0, gt=0)
    """The policy's total time in one episode."""
    memory_bytes: int = Field(default=2 * 1024**3, gt=0)
    output_bytes: int = Field(default=8 * 1024**2, gt=0)

    def limits(self) -> Limits:
        return Limits(**self.model_dump())


class RunConfig(BaseModel):
    """A run's fixed configuration. Defaults follow the paper's Core16 protocol."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    benchmark: str = "cartpole"
    """A first-party id or gymnasium:<EnvId>."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Public benchmark parameters."""
    episode_budget: int = Field(default=128, ge=1)
    """Training episodes the agent may spend."""
    pool_size: int | None = Field(default=None, ge=1)
    """Size of the training pool (default: the budget)."""
    max_submissions: int | None = Field(default=None, ge=1)
    """Default: the budget."""
    max_episodes_per_submission: int | None = Field(default=None, ge=1)
    """Default: no cap beyond the pool."""
    finish_budget_policy: FinishBudgetPolicy = "allow_early"
    validation_episodes: int = Field(default=16, ge=0)
    """Hidden episodes per candidate; 0 turns validation off."""
    max_candidates: int = Field(default=4, ge=1)
    assessment_episodes: int = Field(default=32, ge=0)
    """Held-out episodes for the selected program; 0 turns assessment off."""
    seed: int | None = Field(default=None, ge=0)
    """Run seed; None draws a fresh random secret."""
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    workers: int | None = Field(default=None, ge=1)
    """Parallel episodes; default: the usable CPU count."""

    @model_validator(mode="after")
    def _fill_and_check(self) -> Self:
        pool = self.pool_size if self.pool_size is not None else self.episode_budget
        object.__setattr__(self, "pool_size", pool)
        if self.max_submissions is None:
            object.__setattr__(self, "max_submissions", self.episode_budget)
        per_submission = min(self.max_episodes_per_submission or pool, pool)
        if self.finish_budget_policy == "require_budget_exhaustion":
            reachable = per_submission * (self.max_submissions or 0)
            if reachable < self.episode_budget:
                raise ValueError(
                    f"require_budget_exhaustion can never be met: {self.max_submissions} "
                    f"submissions of at most {per_submission} episodes spend {reachable}, "
                    f"less than the budget of {self.episode_budget}"
                )
        return self

    @property
    def submission_cap(self) -> int:
        """Most episodes one submission may select."""
        pool = self.pool_size or self.episode_budget
        return min(self.max_episodes_per_submission or pool, pool)

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Load a TOML file whose top-level keys are RunConfig fields.

        Raises:
            pydantic.ValidationError: unknown keys, bad values, impossible combinations.
        """
        with open(path, "rb") as handle:
            return cls.model_validate(tomllib.load(handle))
