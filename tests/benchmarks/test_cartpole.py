"""Rules of benchmarks/cartpole.py: the baseline's score and feedback an agent can act on."""

from __future__ import annotations

import math

import pytest

from evopolicy.benchmarks import baseline_program, load_benchmark
from evopolicy.benchmarks.cartpole import CartPole
from evopolicy.kernel.authoring import parameters_digest
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.program import Program
from evopolicy.kernel.seeds import secret_from_seed
from tests.conftest import policy
from tests.kernel.test_episode import BALANCING


@pytest.fixture(scope="module")
def episodes():
    benchmark = CartPole()
    return benchmark, plan_episodes(benchmark, "train", secret=secret_from_seed(0), count=20)


def test_the_spec_describes_cartpole():
    spec = load_benchmark("cartpole").spec
    assert spec.id == "cartpole"
    assert spec.max_episode_steps == 500
    assert spec.score_direction == "maximize"
    assert spec.action_space == {"kind": "discrete", "n": 2, "start": 0}
    assert spec.observation_space["kind"] == "box"
    assert spec.observation_space["shape"] == [4]
    assert spec.parameters == {"max_episode_steps": 500}
    assert spec.parameters_digest == parameters_digest({"max_episode_steps": 500})
    assert "gymnasium" in spec.versions


def test_parameters_change_the_identity():
    assert (
        load_benchmark("cartpole", {"max_episode_steps": 200}).spec.parameters_digest
        != load_benchmark("cartpole").spec.parameters_digest
    )


def test_the_baseline_scores_like_an_angle_only_controller(evaluator, episodes):
    benchmark, planned = episodes
    results = evaluator.evaluate(
        Program.from_directory(baseline_program("cartpole")), benchmark, planned
    )
    feedback = benchmark.feedback(results)
    assert all(r.outcome == "ok" for r in results)
    assert 20 < feedback.score < 100
    assert feedback.score == pytest.approx(sum(r.episode_return for r in results) / 20)
    assert feedback.content["termination_causes"] == {"pole_angle": 20}
    assert feedback.content["time_limit_rate"] == 0.0


def test_a_balancing_controller_reaches_the_time_limit(evaluator, episodes):
    benchmark, planned = episodes
    results = evaluator.evaluate(policy(BALANCING), benchmark, planned[:4])
    assert [r.summary["termination_cause"] for r in results] == ["time_limit"] * 4
    assert benchmark.feedback(results).score == 500.0


def test_episode_feedback_names_the_cause_and_the_state_at_failure(evaluator, episodes):
    benchmark, planned = episodes
    program = Program.from_directory(baseline_program("cartpole"))
    (result,) = evaluator.evaluate(program, benchmark, planned[:1])
    summary = result.summary
    assert summary["termination_cause"] == "pole_angle"
    assert abs(summary["final_state"]["pole_angle_degrees"]) > 12
    assert summary["margins_at_end"]["pole_angle_degrees"] < 0
    assert summary["margins_at_end"]["cart_position_m"] > 0
    assert math.isclose(summary["return"], result.steps)
    trace = result.trace
    assert [step["t"] for step in trace["head"]] == list(range(10))
    assert trace["tail"][-1]["t"] == result.steps - 1
    assert trace["omitted"] == result.steps - len(trace["head"]) - len(trace["tail"])
    assert len(trace["final_observation"]) == 4
    assert trace["head"][0]["action"] in (0, 1)
    assert trace["head"][0]["reward"] == 1.0


def test_a_failing_policy_is_reported_as_a_policy_failure(evaluator, episodes):
    benchmark, planned = episodes
    program = policy("def make_policy(context):\n    raise RuntimeError('no')\n")
    (result,) = evaluator.evaluate(program, benchmark, planned[:1])
    assert result.summary["termination_cause"] == "policy_failure"
