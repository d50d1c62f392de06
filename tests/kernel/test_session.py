"""Rules of kernel/session.py: admission, budget, refunds, finish. Rejections change nothing."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from evopolicy.benchmarks import load_benchmark
from evopolicy.kernel.config import RunConfig
from evopolicy.kernel.errors import ERROR_CODES
from evopolicy.kernel.program import Program
from evopolicy.kernel.run import create_run
from evopolicy.kernel.session import Rejection, Session, Submission, parse_selector
from tests.conftest import policy
from tests.kernel.test_episode import BALANCING

GOOD = policy(BALANCING)


def make_session(
    tmp_path: Path, evaluator: Any, benchmark: Any = None, **overrides: Any
) -> Session:
    settings = {
        "episode_budget": 8,
        "validation_episodes": 2,
        "assessment_episodes": 2,
        "seed": 7,
        "parameters": {"max_episode_steps": 20},
    }
    config = RunConfig(**(settings | overrides))
    return create_run(
        config,
        benchmark or load_benchmark("cartpole", config.parameters),
        record_dir=tmp_path / "runs" / "run-1",
        workspace=tmp_path / "workspace",
        evaluator=evaluator,
    )


def state(session: Session) -> tuple[Any, ...]:
    index = session.publisher.workspace / "feedback" / "index.json"
    return (
        session.budget(),
        [s.index_entry() for s in session.submissions.values()],
        [e.kind for e in session.record.events()],
        index.read_bytes() if index.exists() else None,
        session.candidates,
    )


def submit_and_run(session: Session, selector: Any, program: Program = GOOD) -> Submission:
    submission = session.submit(selector, lambda: program)
    assert isinstance(submission, Submission), submission
    return session.run(submission.id)


def rejected(session: Session, call: Any) -> Rejection:
    before = state(session)
    outcome = call()
    assert isinstance(outcome, Rejection), outcome
    assert state(session) == before
    assert outcome.code in ERROR_CODES
    return outcome


# -- selectors -------------------------------------------------------------------------------

VALID = [
    ("3", (3,)),
    ("0:4", (0, 1, 2, 3)),
    ("0:2,4:8", (0, 1, 4, 5, 6, 7)),
    (" 0:2 , 5 ", (0, 1, 5)),
    ([1, 2, 5], (1, 2, 5)),
    ((7,), (7,)),
]
INVALID = ["", "a", "3:1", "2:2", "1,1", "2,1", "0:", ":3", "-1", "1.5", [2, 1], [True], [1, 1], []]


@pytest.mark.parametrize(("selector", "expected"), VALID)
def test_valid_selectors_parse(selector, expected):
    assert parse_selector(selector, 8) == expected


@pytest.mark.parametrize("selector", INVALID)
def test_malformed_selectors_are_invalid(selector):
    rejection = parse_selector(selector, 8)
    assert isinstance(rejection, Rejection) and rejection.code == "invalid_selector"


@pytest.mark.parametrize("selector", ["0:9", "8", [7, 8], "0:10000000000000"])
def test_selectors_beyond_the_pool_are_out_of_range(selector):
    rejection = parse_selector(selector, 8)
    assert isinstance(rejection, Rejection) and rejection.code == "index_out_of_range"


def test_rendered_selectors_parse_back():
    rng = random.Random(0)
    for _ in range(500):
        chosen = sorted(rng.sample(range(64), rng.randint(1, 20)))
        runs: list[str] = []
        start = previous = chosen[0]
        for index in [*chosen[1:], None]:
            if index is not None and index == previous + 1:
                previous = index
                continue
            runs.append(str(start) if previous == start else f"{start}:{previous + 1}")
            if index is not None:
                start = previous = index
        assert parse_selector(",".join(runs), 64) == tuple(chosen)
        assert parse_selector(chosen, 64) == tuple(chosen)


# -- admission -------------------------------------------------------------------------------


def test_a_submission_is_charged_and_published(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)
    submission = submit_and_run(session, "0:3")
    assert submission.id == "submission-000001"
    assert submission.status == "published"
    assert submission.score == 20.0
    budget = session.budget()
    assert (budget.episodes_used, budget.episodes_remaining) == (3, 5)
    assert (budget.submissions_used, budget.submissions_remaining) == (1, 7)
    kinds = [e.kind for e in session.record.events()]
    assert kinds == ["run_created", "submission_started", "submission_published"]


def test_reusing_episodes_is_a_matched_comparison_that_costs_again(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)
    baseline = policy("def make_policy(c):\n    return P()\nclass P:\n    def act(self, o):\n"
                      "        return int(o[2] > 0)\n")  # fmt: skip
    first = submit_and_run(session, "1:3", baseline)
    second = submit_and_run(session, "1:3", GOOD)
    third = submit_and_run(session, [1, 2], baseline)
    assert session.budget().episodes_used == 6
    workspace = tmp_path / "workspace" / "feedback"
    summaries = [
        orjson.loads((workspace / s.id / "feedback.json").read_bytes())["episode_summaries"]
        for s in (first, second, third)
    ]
    assert summaries[0] == summaries[2]  # the same pool episodes, the same program
    assert summaries[0] != summaries[1]


def test_the_run_finished_rejects_submissions(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)
    done = submit_and_run(session, "0")
    assert session.finish([done.id]) == (done.id,)
    assert rejected(session, lambda: session.submit("1", lambda: GOOD)).code == "run_finished"


def test_the_submission_limit_is_enforced(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, max_submissions=1)
    submit_and_run(session, "0")
    assert rejected(session, lambda: session.submit("1", lambda: GOOD)).code == "submission_limit"


def test_the_per_submission_cap_is_enforced(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, max_episodes_per_submission=2)
    rejection = rejected(session, lambda: session.submit("0:3", lambda: GOOD))
    assert rejection.code == "over_submission_cap"


def test_over_budget_selection_is_rejected_uncharged(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, episode_budget=4, pool_size=8)
    submit_and_run(session, "0:3")
    rejection = rejected(session, lambda: session.submit("3:5", lambda: GOOD))
    assert rejection.code == "budget_exhausted"
    assert "1 remain" in rejection.message


def test_strict_allocation_rejects_a_submit_that_makes_exhaustion_impossible(tmp_path, evaluator):
    session = make_session(
        tmp_path,
        evaluator,
        finish_budget_policy="require_budget_exhaustion",
        max_submissions=2,
        max_episodes_per_submission=4,
    )
    rejection = rejected(session, lambda: session.submit("0:2", lambda: GOOD))
    assert rejection.code == "exhaustion_unreachable"
    assert isinstance(session.submit("0:4", lambda: GOOD), Submission)


def test_an_invalid_program_is_rejected_uncharged(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)

    def missing_policy() -> Program:
        return Program.from_files({"helper.py": "x = 1"})

    rejection = rejected(session, lambda: session.submit("0:2", missing_policy))
    assert rejection.code == "program_invalid"
    assert "policy.py" in rejection.message


def test_rejections_never_change_state_over_random_sequences(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, episode_budget=6, pool_size=6, max_submissions=4)
    rng = random.Random(1)
    for _ in range(40):
        selector = rng.choice(["0", "0:3", "2:9", "5,4", "x", [1, 2], [], "0:6", "3:5"])
        before = state(session)
        outcome = session.submit(selector, lambda: GOOD)
        if isinstance(outcome, Rejection):
            assert state(session) == before
        else:
            session.run(outcome.id)
        budget = session.budget()
        assert 0 <= budget.episodes_used <= 6
        assert budget.episodes_remaining == 6 - budget.episodes_used
        assert budget.submissions_remaining >= 0


# -- host faults ------------------------------------------------------------------------------


def test_an_environment_fault_refunds_and_the_run_goes_on(tmp_path, monkeypatch):
    from evopolicy.kernel.evaluate import Evaluator
    from tests.conftest import TEST_LIMITS
    from tests.kernel.test_evaluate import REPOSITORY, _Broken

    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        session = make_session(tmp_path, evaluator, benchmark=_Broken("StepFails"))
        submission = submit_and_run(session, "0:2")
        assert submission.status == "host_fault"
        assert "simulator diverged" in (submission.error or "")
        budget = session.budget()
        assert (budget.episodes_used, budget.submissions_used) == (0, 0)
        assert [e.kind for e in session.record.events()][-1] == "submission_faulted"
        assert not (tmp_path / "workspace" / "feedback" / submission.id).exists()
        assert isinstance(session.submit("0:2", lambda: GOOD), Submission)


# -- finish -----------------------------------------------------------------------------------


def test_finish_rejections_are_atomic_and_a_valid_retry_closes_authority(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, max_candidates=2)
    first = submit_and_run(session, "0")
    second = submit_and_run(session, "1")
    running = session.submit("2", lambda: GOOD)
    assert isinstance(running, Submission)
    assert rejected(session, lambda: session.finish([])).code == "no_candidates"
    assert rejected(session, lambda: session.finish(["submission-000009"])).code == (
        "unknown_submission"
    )
    assert rejected(session, lambda: session.finish([first.id, first.id])).code == (
        "duplicate_candidate"
    )
    assert rejected(session, lambda: session.finish([first.id, second.id, running.id])).code == (
        "too_many_candidates"
    )
    still_running = rejected(session, lambda: session.finish([running.id]))
    assert (still_running.code, still_running.retryable) == ("submission_running", True)
    assert session.finish([second.id, first.id]) == (second.id, first.id)
    assert rejected(session, lambda: session.finish([first.id])).code == "run_finished"


def test_without_validation_exactly_one_candidate(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, validation_episodes=0)
    first, second = submit_and_run(session, "0"), submit_and_run(session, "1")
    assert rejected(session, lambda: session.finish([first.id, second.id])).code == (
        "too_many_candidates"
    )
    assert session.finish([second.id]) == (second.id,)


def test_strict_finish_waits_for_the_budget_to_be_spent(tmp_path, evaluator):
    session = make_session(
        tmp_path, evaluator, episode_budget=4, finish_budget_policy="require_budget_exhaustion"
    )
    first = submit_and_run(session, "0:2")
    early = rejected(session, lambda: session.finish([first.id]))
    assert (early.code, early.retryable) == ("budget_remaining", True)
    submit_and_run(session, "2:4")
    assert session.finish([first.id]) == (first.id,)
