"""Rules of kernel/evaluate.py: ordered, deterministic results; host faults are not outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from evopolicy.kernel.authoring import BenchmarkRef
from evopolicy.kernel.errors import HostFault
from evopolicy.kernel.evaluate import Evaluator, evaluate
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.seeds import secret_from_seed
from tests.conftest import TEST_LIMITS, cartpole_episodes, policy

REPOSITORY = Path(__file__).resolve().parents[2]

# Draws from the unseeded global generators and from its policy_seed; prints; fails on a
# few episodes. Everything it does must come out the same whatever the parallelism.
NOISY = """
import random
import numpy as np

class Policy:
    def __init__(self, context):
        self.rng = np.random.default_rng(context.policy_seed)
        self.fail_at = 3 if context.policy_seed % 3 == 0 else None
        self.t = 0

    def act(self, observation):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError("unlucky episode")
        print(self.t, random.random())
        return int(self.rng.integers(2)) if np.random.rand() < 0.5 else int(observation[2] > 0)

def make_policy(context):
    return Policy(context)
"""


def test_results_come_back_in_episode_order(evaluator):
    benchmark, episodes = cartpole_episodes(6, steps=20)
    results = evaluator.evaluate(policy(NOISY), benchmark, episodes)
    assert [r.index for r in results] == [e.index for e in episodes]


def test_results_are_identical_with_one_and_two_workers():
    benchmark, episodes = cartpole_episodes(8, steps=60, seed=3)
    program = policy(NOISY)
    with Evaluator(workers=1, limits=TEST_LIMITS) as one:
        serial = one.evaluate(program, benchmark, episodes)
    with Evaluator(workers=2, limits=TEST_LIMITS) as two:
        parallel = two.evaluate(program, benchmark, episodes)
        again = two.evaluate(program, benchmark, episodes)
    assert {r.outcome for r in serial} == {"ok", "exception"}
    assert serial == parallel == again  # timings are excluded from equality
    assert [r.stdout for r in serial] == [r.stdout for r in parallel]


def test_different_seeds_give_different_episodes(evaluator):
    program = policy(NOISY)
    benchmark, first = cartpole_episodes(4, steps=60, seed=1)
    _, second = cartpole_episodes(4, steps=60, seed=2)
    assert [e.spec.seed for e in first] != [e.spec.seed for e in second]
    assert evaluator.evaluate(program, benchmark, first) != evaluator.evaluate(
        program, benchmark, second
    )


def test_on_result_sees_every_episode_once(evaluator):
    benchmark, episodes = cartpole_episodes(5, steps=10)
    seen: list[int] = []
    evaluator.evaluate(policy(NOISY), benchmark, episodes, on_result=lambda r: seen.append(r.index))
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_an_empty_episode_list_evaluates_to_nothing(evaluator):
    benchmark, _ = cartpole_episodes(1)
    assert evaluator.evaluate(policy(NOISY), benchmark, []) == ()


def test_the_one_shot_function_matches_the_evaluator(evaluator):
    benchmark, episodes = cartpole_episodes(2, steps=15)
    program = policy(NOISY)
    assert evaluate(program, benchmark, episodes, workers=1, limits=TEST_LIMITS) == (
        evaluator.evaluate(program, benchmark, episodes)
    )


class _Broken:
    """A CartPole whose runner-side object is a broken benchmark from broken_benchmarks."""

    def __init__(self, entry: str) -> None:
        from evopolicy.benchmarks.cartpole import CartPole

        self._cartpole = CartPole(max_episode_steps=20)
        self.spec = self._cartpole.spec
        self.ref = BenchmarkRef(f"tests.kernel.broken_benchmarks:{entry}", {})

    def __getattr__(self, name: str):
        return getattr(self._cartpole, name)


@pytest.fixture
def broken_evaluator(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    with Evaluator(workers=2, limits=TEST_LIMITS) as evaluator:
        yield evaluator


def test_an_environment_failure_is_a_host_fault_not_an_outcome(broken_evaluator):
    benchmark = _Broken("StepFails")
    episodes = plan_episodes(benchmark, "train", secret=secret_from_seed(0), count=3)
    with pytest.raises(HostFault) as caught:
        broken_evaluator.evaluate(policy(NOISY), benchmark, episodes)
    assert caught.value.code == "host_fault"
    assert "the environment failed at step 3: RuntimeError: simulator diverged" in str(caught.value)


def test_a_dead_runner_is_a_host_fault_and_the_pool_recovers(broken_evaluator):
    dying = _Broken("RunnerDies")
    episodes = plan_episodes(dying, "train", secret=secret_from_seed(0), count=2)
    with pytest.raises(HostFault, match="runner process died"):
        broken_evaluator.evaluate(policy(NOISY), dying, episodes)
    benchmark, good = cartpole_episodes(4, steps=10)
    results = broken_evaluator.evaluate(policy(NOISY), benchmark, good)
    assert len(results) == 4


def test_a_closed_evaluator_refuses_work():
    evaluator = Evaluator(workers=1)
    evaluator.close()
    benchmark, episodes = cartpole_episodes(1)
    with pytest.raises(RuntimeError, match="closed"):
        evaluator.evaluate(policy(NOISY), benchmark, episodes)


def test_the_runner_ignores_modules_in_the_hosts_folder(tmp_path, monkeypatch):
    (tmp_path / "gymnasium.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.chdir(tmp_path)
    benchmark, episodes = cartpole_episodes(1, steps=5)
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        (result,) = evaluator.evaluate(policy(NOISY), benchmark, episodes)
    assert result.steps > 0
