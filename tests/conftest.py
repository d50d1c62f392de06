"""Shared fixtures: real runner processes, real Gymnasium environments."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evopolicy.benchmarks.cartpole import CartPole
from evopolicy.kernel.authoring import Episode
from evopolicy.kernel.evaluate import Evaluator
from evopolicy.kernel.limits import Limits
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.program import Program
from evopolicy.kernel.seeds import secret_from_seed

# Tight enough that misbehaving policies end fast, loose enough for a loaded CI machine.
TEST_LIMITS = Limits(
    start_seconds=5.0,
    step_seconds=1.0,
    episode_seconds=8.0,
    memory_bytes=768 * 1024**2,
    output_bytes=256 * 1024,
    capture_bytes=4 * 1024,
)


def policy(source: str, **extra: str) -> Program:
    """A program whose policy.py is `source` (plus helper files)."""
    return Program.from_files({"policy.py": source, **extra})


def cartpole_episodes(
    count: int, *, steps: int = 40, seed: int = 0
) -> tuple[CartPole, tuple[Episode, ...]]:
    benchmark = CartPole(max_episode_steps=steps)
    episodes = plan_episodes(benchmark, "train", secret=secret_from_seed(seed), count=count)
    return benchmark, episodes


@pytest.fixture(scope="session")
def evaluator() -> Iterator[Evaluator]:
    with Evaluator(workers=2, limits=TEST_LIMITS) as shared:
        yield shared
