"""Rules of benchmarks/gymnasium_env.py: any registered id runs with default feedback."""

from __future__ import annotations

import pytest

from evopolicy.benchmarks import load_benchmark
from evopolicy.kernel.errors import BenchmarkError
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.seeds import secret_from_seed
from tests.conftest import policy

# One generic program per action-space kind, driven by the context's description.
GENERIC = """
import numpy as np

class Policy:
    def __init__(self, context):
        self.space = context.action_space
        self.rng = np.random.default_rng(context.policy_seed)

    def act(self, observation):
        if self.space["kind"] == "discrete":
            return int(self.rng.integers(self.space["n"])) + self.space["start"]
        low, high = np.array(self.space["low"]), np.array(self.space["high"])
        return self.rng.uniform(low, high, size=self.space["shape"])

def make_policy(context):
    return Policy(context)
"""


@pytest.mark.parametrize(
    ("env_id", "observation_kind", "action_kind"),
    [
        ("CartPole-v1", "box", "discrete"),
        ("Pendulum-v1", "box", "box"),
        ("FrozenLake-v1", "discrete", "discrete"),
    ],
)
def test_registered_environments_run_with_default_feedback(
    evaluator, env_id, observation_kind, action_kind
):
    benchmark = load_benchmark(f"gymnasium:{env_id}", {"max_episode_steps": 50})
    spec = benchmark.spec
    assert spec.id == f"gymnasium:{env_id}"
    assert spec.observation_space["kind"] == observation_kind
    assert spec.action_space["kind"] == action_kind
    episodes = plan_episodes(benchmark, "train", secret=secret_from_seed(0), count=3)
    results = evaluator.evaluate(policy(GENERIC), benchmark, episodes)
    assert [r.outcome for r in results] == ["ok"] * 3
    for result in results:
        assert result.summary == {
            "return": result.episode_return,
            "steps": result.steps,
            "terminated": result.terminated,
            "truncated": result.truncated,
            "outcome": "ok",
        }
        assert 1 <= result.steps <= 50
        assert result.trace["head"]
    feedback = benchmark.feedback(results)
    assert feedback.score == pytest.approx(sum(r.episode_return for r in results) / 3)
    assert feedback.content["outcomes"] == {"ok": 3}


def test_discrete_observations_reach_the_policy_as_integers(evaluator):
    benchmark = load_benchmark("gymnasium:FrozenLake-v1", {"max_episode_steps": 5})
    program = policy(
        "class P:\n    def act(self, observation):\n"
        "        print(type(observation).__name__, observation)\n        return 0\n"
        "def make_policy(context):\n    return P()\n"
    )
    episodes = plan_episodes(benchmark, "train", secret=secret_from_seed(0), count=1)
    (result,) = evaluator.evaluate(program, benchmark, episodes)
    assert result.stdout.splitlines()[0] in ("int 0", "int64 0")


def test_an_unknown_environment_is_a_typed_error():
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark("gymnasium:NoSuchEnv-v0")
    assert caught.value.code == "unknown_benchmark"


def test_an_unknown_benchmark_id_is_a_typed_error():
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark("cartpool")
    assert caught.value.code == "unknown_benchmark"
    assert "cartpole" in str(caught.value)


def test_rejected_parameters_are_a_typed_error():
    with pytest.raises(BenchmarkError) as caught:
        load_benchmark("cartpole", {"gravity": 3})
    assert caught.value.code == "benchmark_invalid"


def test_plans_are_pure_functions_of_split_and_seed():
    benchmark = load_benchmark("cartpole")
    first = benchmark.plan("train", seed=5, count=4)
    assert first == benchmark.plan("train", seed=5, count=4)
    assert first != benchmark.plan("validation", seed=5, count=4)
    assert first != benchmark.plan("train", seed=6, count=4)
    assert benchmark.plan("train", seed=5, count=6)[:4] == first
