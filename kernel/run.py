"""Creating a run and resuming one from its record: the only places a Session is built."""

from __future__ import annotations

import hashlib
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from evopolicy.kernel.authoring import Benchmark, BenchmarkRef
from evopolicy.kernel.config import RunConfig
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.publication import Publisher
from evopolicy.kernel.records import RunRecord
from evopolicy.kernel.session import EpisodeEvaluator, Session, Submission

RUN_SCHEMA = "evopolicy/run/v1"


def run_secret(config: RunConfig) -> bytes:
    """The run secret: derived from `config.seed` when given, else fresh randomness."""
    if config.seed is None:
        return RunRecord.new_secret()
    return hashlib.sha256(f"evopolicy/run-seed/v1|{config.seed}".encode()).digest()


def create_run(
    config: RunConfig,
    benchmark: Benchmark,
    *,
    record_dir: Path,
    workspace: Path | None,
    evaluator: EpisodeEvaluator,
) -> Session:
    """Fix the pool, write run.json and the first event, and return the Session.

    Raises:
        FileExistsError: `record_dir` already holds a run.
    """
    record = RunRecord.create(record_dir, run_secret(config))
    spec = benchmark.spec
    record.append(
        "run_created",
        {
            "config": config.model_dump(mode="json"),
            "benchmark_ref": {
                "entry_point": benchmark.ref.entry_point,
                "parameters": dict(benchmark.ref.parameters),
            },
            "workspace": str(workspace) if workspace is not None else None,
        },
    )
    record.write_json(
        "run.json",
        {
            "schema": RUN_SCHEMA,
            "run_id": record_dir.name,
            "created": time.time(),
            "status": "running",
            "config": config.model_dump(mode="json"),
            "benchmark": {
                "id": spec.id,
                "parameters": dict(spec.parameters),
                "parameters_digest": spec.parameters_digest,
                "versions": dict(spec.versions),
            },
            "evopolicy": metadata.version("evopolicy"),
        },
    )
    return _session(config, benchmark, record, workspace, evaluator)


def run_config(record_dir: Path) -> RunConfig:
    """The configuration recorded in a run's first event."""
    first = next(RunRecord(record_dir).events(), None)
    if first is None or first.kind != "run_created":
        raise ValueError(f"{record_dir} holds no run record")
    return RunConfig.model_validate(first.data["config"])


def open_run(
    record_dir: Path, *, evaluator: EpisodeEvaluator, workspace: Path | None = None
) -> Session:
    """Rebuild a Session from the event log. Submissions that were running when the host
    died are marked `host_interrupted` and refunded.
    """
    config = run_config(record_dir)
    record = RunRecord(record_dir)
    events = list(record.events())
    created = events[0].data
    reference = created["benchmark_ref"]
    benchmark = BenchmarkRef(reference["entry_point"], reference["parameters"]).load()
    if workspace is None and created["workspace"] is not None:
        workspace = Path(created["workspace"])
    session = _session(config, benchmark, record, workspace, evaluator)
    for event in events[1:]:
        _replay(session, event.kind, event.data)
    for submission in session.submissions.values():
        if submission.status == "running":
            submission.status = "host_interrupted"
            submission.done.set()
            record.append("submission_interrupted", {"id": submission.id})
            session.publisher.remove_workspace_feedback(submission.id)
    session.publisher.write_index([s.index_entry() for s in session.submissions.values()])
    return session


def _session(
    config: RunConfig,
    benchmark: Benchmark,
    record: RunRecord,
    workspace: Path | None,
    evaluator: EpisodeEvaluator,
) -> Session:
    pool = plan_episodes(
        benchmark, "train", secret=record.secret(), count=config.pool_size or config.episode_budget
    )
    publisher = Publisher(workspace=workspace, record_root=record.root)
    return Session(
        config=config,
        benchmark=benchmark,
        pool=pool,
        record=record,
        publisher=publisher,
        evaluator=evaluator,
    )


def _replay(session: Session, kind: str, data: dict[str, Any]) -> None:
    if kind == "submission_started":
        submission = Submission(
            id=data["id"], program_digest=data["program_digest"], indices=tuple(data["episodes"])
        )
        session.submissions[submission.id] = submission
    elif kind == "submission_published":
        submission = session.submissions[data["id"]]
        submission.status, submission.score = "published", data["score"]
        submission.failures = data["failures"]
        submission.done.set()
    elif kind in ("submission_faulted", "submission_interrupted"):
        submission = session.submissions[data["id"]]
        submission.status = "host_fault" if kind == "submission_faulted" else "host_interrupted"
        submission.error = data.get("message")
        submission.done.set()
    elif kind == "finished":
        session.candidates, session.finished_by = tuple(data["candidates"]), data["by"]
