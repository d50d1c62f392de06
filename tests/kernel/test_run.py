"""Run lifecycle: configuration, publication, privacy, selection, resume after SIGKILL, grade."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from evopolicy.kernel.config import RunConfig
from evopolicy.kernel.run import open_run
from evopolicy.kernel.selection import finalize, rank_candidates
from evopolicy.kernel.session import Submission
from tests.conftest import policy
from tests.kernel.test_session import GOOD, make_session, submit_and_run

BASELINE = policy(
    "def make_policy(c):\n    return P()\n"
    "class P:\n    def act(self, o):\n        return int(o[2] > 0)\n"
)
FAILING = policy("def make_policy(c):\n    raise RuntimeError('no')\n")


# -- configuration ----------------------------------------------------------------------------


def test_defaults_follow_the_core16_protocol():
    config = RunConfig()
    assert (config.episode_budget, config.pool_size, config.max_submissions) == (128, 128, 128)
    assert (config.validation_episodes, config.assessment_episodes) == (16, 32)
    assert config.max_candidates == 4
    assert config.finish_budget_policy == "allow_early"
    assert config.submission_cap == 128


def test_impossible_strict_configurations_are_rejected_with_a_reason():
    with pytest.raises(ValidationError, match="can never be met: 2 submissions of at most 4"):
        RunConfig(
            episode_budget=10,
            max_submissions=2,
            max_episodes_per_submission=4,
            finish_budget_policy="require_budget_exhaustion",
        )


def test_unknown_keys_are_rejected():
    with pytest.raises(ValidationError):
        RunConfig.model_validate({"episode_budgt": 3})


def test_config_loads_from_toml(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        'benchmark = "gymnasium:Pendulum-v1"\nepisode_budget = 32\nseed = 5\n'
        "[parameters]\nmax_episode_steps = 100\n[timeouts]\nstep_seconds = 0.5\n"
    )
    config = RunConfig.from_toml(path)
    assert config.benchmark == "gymnasium:Pendulum-v1"
    assert config.parameters == {"max_episode_steps": 100}
    assert config.timeouts.limits().step_seconds == 0.5
    assert config.pool_size == 32


# -- publication and privacy ------------------------------------------------------------------


def test_feedback_is_keyed_by_pool_index(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)
    submission = submit_and_run(session, "2,5:7", BASELINE)
    folder = tmp_path / "workspace" / "feedback" / submission.id
    document = orjson.loads((folder / "feedback.json").read_bytes())
    assert document["schema"] == "evopolicy/feedback/v1"
    assert document["submission_id"] == submission.id
    assert document["program_digest"] == BASELINE.digest
    assert document["episodes"] == [2, 5, 6]
    assert set(document["episode_summaries"]) == {"2", "5", "6"}
    entry = document["episode_summaries"]["5"]
    assert entry["outcome"] == "ok" and entry["steps"] == entry["return"]
    assert entry["summary"]["termination_cause"] in ("pole_angle", "time_limit")
    assert document["score"] == pytest.approx(
        sum(e["return"] for e in document["episode_summaries"].values()) / 3
    )
    lines = [orjson.loads(line) for line in (folder / "episodes.jsonl").read_bytes().splitlines()]
    assert [line["index"] for line in lines] == [2, 5, 6]
    assert lines[0]["trace"]["head"]
    index = orjson.loads((tmp_path / "workspace" / "feedback" / "index.json").read_bytes())
    assert index["submissions"] == [
        {
            "id": submission.id,
            "status": "published",
            "score": document["score"],
            "episodes": [2, 5, 6],
            "program_digest": BASELINE.digest,
        }
    ]
    record_copy = session.record.root / "submissions" / submission.id / "feedback" / "feedback.json"
    assert orjson.loads(record_copy.read_bytes()) == document


def test_nothing_private_reaches_the_workspace(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator)
    first = submit_and_run(session, "0:4", BASELINE)
    submit_and_run(session, "4:8", FAILING)
    session.finish([first.id])
    finalize(session)
    private = {str(e.spec.seed) for e in session.pool} | {str(e.policy_seed) for e in session.pool}
    private.add(session.record.secret().hex())
    workspace_files = [p for p in (tmp_path / "workspace").rglob("*") if p.is_file()]
    assert workspace_files
    for path in workspace_files:
        text = path.read_text()
        leaked = [value for value in private if value in text]
        assert not leaked, (path, leaked)
    names = {p.name for p in workspace_files}
    assert not names & {"validation.json", "assessment.json", "result.json", "secret"}
    assert (session.record.root / "validation.json").exists()
    assert oct((session.record.root / "secret").stat().st_mode & 0o777) == "0o600"


# -- validation and assessment ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("scored", "direction", "winner"),
    [
        ([(10.0, 0), (20.0, 0)], "maximize", 1),
        ([(10.0, 0), (20.0, 0)], "minimize", 0),
        ([(20.0, 3), (20.0, 1)], "maximize", 1),  # equal scores: fewer failures
        ([(20.0, 1), (20.0, 1)], "maximize", 0),  # full tie: the agent's order
        ([(5.0, 0), (20.0, 9), (20.0, 9)], "maximize", 1),
    ],
)
def test_selection_orders_by_score_then_failures_then_agent_order(scored, direction, winner):
    candidates = [
        {"submission": f"s{i}", "score": score, "policy_failures": failures, "agent_order": i}
        for i, (score, failures) in enumerate(scored)
    ]
    assert rank_candidates(candidates, direction)[0]["submission"] == f"s{winner}"


def test_validation_selects_the_better_program_and_assesses_it_alone(tmp_path, evaluator):
    session = make_session(
        tmp_path,
        evaluator,
        validation_episodes=3,
        assessment_episodes=4,
        parameters={"max_episode_steps": 200},
    )
    weak = submit_and_run(session, "0", BASELINE)
    strong = submit_and_run(session, "1", GOOD)
    session.finish([weak.id, strong.id])
    result = finalize(session)
    assert result["status"] == "assessed"
    assert result["selected_submission"] == strong.id
    assert result["heldout_score"] == 200.0
    validation = orjson.loads((session.record.root / "validation.json").read_bytes())
    assert validation["ranking"] == [strong.id, weak.id]
    assessment = orjson.loads((session.record.root / "assessment.json").read_bytes())
    assert assessment["submission"] == strong.id and assessment["episodes"] == 4
    run = orjson.loads((session.record.root / "run.json").read_bytes())
    assert run["status"] == "assessed"


def test_without_validation_the_single_candidate_is_selected(tmp_path, evaluator):
    session = make_session(tmp_path, evaluator, validation_episodes=0, assessment_episodes=0)
    only = submit_and_run(session, "0", BASELINE)
    session.finish([only.id])
    assert finalize(session) | {} == {
        "schema": "evopolicy/result/v1",
        "finished_by": "agent",
        "candidates": [only.id],
        "selected_submission": only.id,
        "status": "selected",
        "heldout_score": None,
    }


# -- resume -----------------------------------------------------------------------------------

HOST_SCRIPT = """
import sys
from pathlib import Path
from evopolicy.benchmarks import load_benchmark
from evopolicy.kernel.config import RunConfig
from evopolicy.kernel.evaluate import Evaluator
from evopolicy.kernel.program import Program
from evopolicy.kernel.run import create_run

root = Path(sys.argv[1])
slow = Program.from_files({"policy.py": (
    "import time\\nclass P:\\n    def act(self, o):\\n        time.sleep(0.2)\\n        return 0\\n"
    "def make_policy(c):\\n    return P()\\n")})
quick = Program.from_files({"policy.py": (
    "class P:\\n    def act(self, o):\\n        return int(o[2] > 0)\\n"
    "def make_policy(c):\\n    return P()\\n")})
config = RunConfig(episode_budget=8, seed=3, parameters={"max_episode_steps": 50})
with Evaluator(workers=1) as evaluator:
    session = create_run(config, load_benchmark("cartpole", config.parameters),
                         record_dir=root / "run", workspace=root / "workspace", evaluator=evaluator)
    first = session.submit("0:2", lambda: quick)
    session.run(first.id)
    second = session.submit("2:6", lambda: slow)
    print("running", flush=True)
    session.run(second.id)
"""


def test_a_host_killed_mid_submission_resumes_with_a_refund(tmp_path, evaluator):
    process = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "running"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)

    session = open_run(tmp_path / "run", evaluator=evaluator)
    first, second = session.submissions.values()
    assert (first.status, second.status) == ("published", "host_interrupted")
    budget = session.budget()
    assert (budget.episodes_used, budget.submissions_used) == (2, 1)
    assert [e.kind for e in session.record.events()][-1] == "submission_interrupted"
    assert (tmp_path / "workspace" / "feedback" / first.id / "feedback.json").exists()
    assert not (tmp_path / "workspace" / "feedback" / second.id).exists()
    third = session.submit("2:6", lambda: GOOD)
    assert isinstance(third, Submission) and third.id == "submission-000003"
    assert session.run(third.id).status == "published"
    assert session.budget().episodes_used == 6

    reopened = open_run(tmp_path / "run", evaluator=evaluator)
    assert [s.status for s in reopened.submissions.values()] == [
        "published",
        "host_interrupted",
        "published",
    ]


# -- grade ------------------------------------------------------------------------------------


def test_grade_finishes_an_abandoned_run_with_the_best_public_submissions(tmp_path, evaluator):
    session = make_session(
        tmp_path,
        evaluator,
        max_candidates=1,
        validation_episodes=2,
        parameters={"max_episode_steps": 200},
    )
    submit_and_run(session, "0:2", BASELINE)
    best = submit_and_run(session, "2:4", GOOD)
    submit_and_run(session, "4:6", FAILING)
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("evopolicy")), "grade", str(session.record.root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["finished_by"] == "host"
    assert result["candidates"] == [best.id]
    assert result["selected_submission"] == best.id
    assert result["status"] == "assessed"
    saved = orjson.loads((session.record.root / "result.json").read_bytes())
    assert saved == result


def test_a_fault_during_validation_is_recorded_and_keeps_the_programs(tmp_path, monkeypatch):
    from evopolicy.kernel.evaluate import Evaluator
    from tests.conftest import TEST_LIMITS
    from tests.kernel.test_evaluate import REPOSITORY, _Broken

    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        session = make_session(tmp_path, evaluator)
        only = submit_and_run(session, "0", BASELINE)
        session.finish([only.id])
        session.benchmark = _Broken("StepFails")  # the environment breaks after finish
        result = finalize(session)
    assert result["status"] == "validation_failed"
    assert "simulator diverged" in result["error"]
    assert [e.kind for e in session.record.events()][-1] == "validation_failed"
    assert (session.record.root / "programs" / only.program_digest / "policy.py").exists()


def test_bulk_artifacts_are_evicted_oldest_first_but_never_from_the_newest(tmp_path):
    from evopolicy.kernel.authoring import Artifact, Feedback
    from evopolicy.kernel.publication import Publisher, feedback_document

    publisher = Publisher(workspace=tmp_path / "ws", record_root=tmp_path / "rec", bulk_limit=250)
    ids = [f"submission-00000{i}" for i in (1, 2, 3)]
    for number, submission_id in enumerate(ids):
        feedback = Feedback(
            score=float(number),
            artifacts=(
                Artifact(name="frame.png", content_type="image/png", data=b"x" * 100,
                         retention="bulk"),
                Artifact(name="notes.txt", content_type="text/plain", data=b"keep"),
            ),
        )  # fmt: skip
        document = feedback_document(
            submission_id=submission_id, program_digest="d", indices=[0], results=[],
            feedback=feedback,
        )  # fmt: skip
        publisher.publish(submission_id, document, [], feedback)
        publisher.write_index([{"id": i} for i in ids[: number + 1]])
    frames = {i: (tmp_path / "ws/feedback" / i / "artifacts/frame.png").exists() for i in ids}
    assert frames == {ids[0]: False, ids[1]: True, ids[2]: True}
    assert all((tmp_path / "ws/feedback" / i / "artifacts/notes.txt").exists() for i in ids)
    assert all(
        (tmp_path / "rec/submissions" / i / "feedback/artifacts/frame.png").exists() for i in ids
    )
    manifest = orjson.loads((tmp_path / "ws/feedback" / ids[2] / "feedback.json").read_bytes())
    assert manifest["artifacts"][0] == {
        "name": "frame.png", "content_type": "image/png", "bytes": 100,
        "sha256": hashlib.sha256(b"x" * 100).hexdigest(),
        "retention": "bulk",
    }  # fmt: skip
