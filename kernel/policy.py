"""The policy ABI that agents write against. Standard library only: it loads in the worker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

POLICY_ABI_VERSION = "policy/v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyContext:
    """What `make_policy(context)` receives. Never seeds of the environment, paths or scores.

    Attributes:
        observation_space: JSON-able description (kind, shape, dtype, low/high, n, ...).
        action_space: JSON-able description of legal actions.
        metadata: the benchmark's public notes.
        parameters: the benchmark's public parameters.
        policy_seed: uint64 for the policy's own randomness, fixed per episode.
        max_episode_steps: the most steps `act` will be called in this episode.
    """

    observation_space: Mapping[str, Any]
    action_space: Mapping[str, Any]
    metadata: Mapping[str, Any]
    parameters: Mapping[str, Any]
    policy_seed: int
    max_episode_steps: int


@runtime_checkable
class Policy(Protocol):
    """The object `make_policy` returns."""

    def act(self, observation: Any) -> Any: ...
