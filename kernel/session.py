"""Session: the one owner of a run's authority: budget, admission, submission ids, finish.

Order of `submit`: parse the selector, check range and ordering, caps, budget and
allocation, snapshot the program, then reserve (record) and hand back a ticket. Every
rejection is a value and changes nothing. `run` evaluates an admitted submission:
policy failures stay charged; a host fault refunds the reservation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal, Protocol

from evopolicy.kernel.authoring import Benchmark, Episode, EpisodeResult
from evopolicy.kernel.config import RunConfig
from evopolicy.kernel.errors import ErrorCode, HostFault, ProgramError
from evopolicy.kernel.program import Program
from evopolicy.kernel.publication import Publisher, feedback_document
from evopolicy.kernel.records import RunRecord

SubmissionStatus = Literal[
    "running",  # admitted and charged; evaluating
    "published",  # evaluated; feedback published
    "host_fault",  # a host or environment fault aborted it; refunded
    "host_interrupted",  # the host died while it ran; refunded on resume
]
REFUNDED: frozenset[SubmissionStatus] = frozenset({"host_fault", "host_interrupted"})


@dataclass(frozen=True, slots=True)
class Rejection:
    """A refused request: it changed nothing."""

    code: ErrorCode
    message: str
    retryable: bool = False


@dataclass(slots=True)
class Submission:
    """The session's view of one submission."""

    id: str
    program_digest: str
    indices: tuple[int, ...]
    status: SubmissionStatus = "running"
    score: float | None = None
    failures: int = 0
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def charged(self) -> int:
        return 0 if self.status in REFUNDED else len(self.indices)

    def index_entry(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "score": self.score,
            "episodes": list(self.indices),
            "program_digest": self.program_digest,
        }


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    episodes_used: int
    episodes_remaining: int
    submissions_used: int
    submissions_remaining: int
    pool_size: int
    per_submission_cap: int


class EpisodeEvaluator(Protocol):
    """What the session needs from evaluation (the kernel's `Evaluator` is one)."""

    def evaluate(
        self,
        program: Program,
        benchmark: Benchmark,
        episodes: Sequence[Episode],
        *,
        on_result: Callable[[EpisodeResult], None] | None = None,
    ) -> tuple[EpisodeResult, ...]: ...


class Session:
    """Authority over one run. Thread-safe: admission and bookkeeping hold one lock."""

    def __init__(
        self,
        *,
        config: RunConfig,
        benchmark: Benchmark,
        pool: tuple[Episode, ...],
        record: RunRecord,
        publisher: Publisher,
        evaluator: EpisodeEvaluator,
    ) -> None:
        self.config = config
        self.benchmark = benchmark
        self.pool = pool
        self.record = record
        self.publisher = publisher
        self.evaluator = evaluator
        self.submissions: dict[str, Submission] = {}
        self.candidates: tuple[str, ...] | None = None
        self.finished_by: Literal["agent", "host"] | None = None
        self._programs: dict[str, Program] = {}
        self._lock = threading.Lock()

    # -- state ---------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.candidates is not None

    def budget(self) -> BudgetStatus:
        with self._lock:
            return self._budget()

    def _budget(self) -> BudgetStatus:
        used = sum(s.charged for s in self.submissions.values())
        counted = sum(1 for s in self.submissions.values() if s.status not in REFUNDED)
        max_submissions = self.config.max_submissions or self.config.episode_budget
        return BudgetStatus(
            episodes_used=used,
            episodes_remaining=self.config.episode_budget - used,
            submissions_used=counted,
            submissions_remaining=max_submissions - counted,
            pool_size=len(self.pool),
            per_submission_cap=self.config.submission_cap,
        )

    # -- submit --------------------------------------------------------------------------

    def submit(
        self, episodes: str | Sequence[int], program: Callable[[], Program]
    ) -> Submission | Rejection:
        """Admit a submission and reserve its episodes; `program` snapshots it.

        Returns the running Submission (evaluate it with `run`), or a Rejection.
        """
        with self._lock:
            if self.finished:
                return Rejection("run_finished", "the run is finished; no more submissions")
            indices = parse_selector(episodes, len(self.pool))
            if isinstance(indices, Rejection):
                return indices
            budget = self._budget()
            refusal = self._check_caps(indices, budget) or self._check_budget(indices, budget)
            if refusal is not None:
                return refusal
            try:
                snapshot = program()
            except ProgramError as error:
                return Rejection("program_invalid", error.message)
            submission = Submission(
                id=f"submission-{len(self.submissions) + 1:06d}",
                program_digest=snapshot.digest,
                indices=indices,
            )
            self.record.store_program(snapshot)
            self.record.append(
                "submission_started",
                {
                    "id": submission.id,
                    "program_digest": snapshot.digest,
                    "episodes": list(indices),
                },
            )
            self.submissions[submission.id] = submission
            self._programs[submission.id] = snapshot
            self.publisher.write_index(self._index())
            return submission

    def _check_caps(self, indices: tuple[int, ...], budget: BudgetStatus) -> Rejection | None:
        if budget.submissions_remaining <= 0:
            return Rejection(
                "submission_limit",
                f"all {self.config.max_submissions} submissions are used",
            )
        if len(indices) > budget.per_submission_cap:
            return Rejection(
                "over_submission_cap",
                f"{len(indices)} episodes selected; one submission may use at most "
                f"{budget.per_submission_cap}",
            )
        return None

    def _check_budget(self, indices: tuple[int, ...], budget: BudgetStatus) -> Rejection | None:
        if len(indices) > budget.episodes_remaining:
            return Rejection(
                "budget_exhausted",
                f"{len(indices)} episodes selected; {budget.episodes_remaining} remain in the "
                "budget",
            )
        if self.config.finish_budget_policy == "require_budget_exhaustion":
            left = budget.episodes_remaining - len(indices)
            reachable = (budget.submissions_remaining - 1) * budget.per_submission_cap
            if left > reachable:
                return Rejection(
                    "exhaustion_unreachable",
                    f"after this submission {left} episodes would remain but at most "
                    f"{reachable} could still be spent; select more episodes",
                )
        return None

    # -- run -----------------------------------------------------------------------------

    def run(
        self, submission_id: str, *, on_result: Callable[[EpisodeResult], None] | None = None
    ) -> Submission:
        """Evaluate an admitted submission and publish it, or refund it on a host fault."""
        submission = self.submissions[submission_id]
        program = self._programs.pop(submission_id)
        episodes = [self.pool[i] for i in submission.indices]
        self.record.write_json(
            f"submissions/{submission.id}/evidence.json",
            {
                "episodes": [
                    {
                        "index": e.index,
                        "seed": e.spec.seed,
                        "options": dict(e.spec.options),
                        "scenario": dict(e.spec.scenario),
                        "policy_seed": e.policy_seed,
                    }
                    for e in episodes
                ]
            },
        )
        try:
            results = self.evaluator.evaluate(
                program, self.benchmark, episodes, on_result=on_result
            )
            feedback = self.benchmark.feedback(results)
            document = feedback_document(
                submission_id=submission.id,
                program_digest=submission.program_digest,
                indices=submission.indices,
                results=results,
                feedback=feedback,
            )
            self.publisher.publish(submission.id, document, results, feedback)
        except HostFault as fault:
            with self._lock:
                submission.status, submission.error = "host_fault", fault.message
                self.record.append(
                    "submission_faulted", {"id": submission.id, "message": fault.message}
                )
                self.publisher.write_index(self._index())
            submission.done.set()
            return submission
        failures = sum(r.outcome != "ok" for r in results)
        with self._lock:
            submission.status = "published"
            submission.score, submission.failures = feedback.score, failures
            self.record.append(
                "submission_published",
                {"id": submission.id, "score": feedback.score, "failures": failures},
            )
            self.publisher.write_index(self._index())
        submission.done.set()
        return submission

    def _index(self) -> list[dict[str, Any]]:
        return [s.index_entry() for s in self.submissions.values()]

    # -- finish --------------------------------------------------------------------------

    def finish(self, candidates: Sequence[str]) -> tuple[str, ...] | Rejection:
        """Hand over ordered candidates and close authority for good."""
        with self._lock:
            refusal = self._check_finish(candidates)
            if refusal is not None:
                return refusal
            self.candidates, self.finished_by = tuple(candidates), "agent"
            self.record.append("finished", {"candidates": list(candidates), "by": "agent"})
            self.record.set_status("finished")
            return self.candidates

    def _check_finish(self, candidates: Sequence[str]) -> Rejection | None:
        if self.finished:
            return Rejection("run_finished", "the run is already finished")
        limit = self.config.max_candidates if self.config.validation_episodes else 1
        if not candidates:
            return Rejection("no_candidates", "name at least one submission as a candidate")
        if len(candidates) > limit:
            return Rejection(
                "too_many_candidates", f"{len(candidates)} candidates; at most {limit}"
            )
        if len(set(candidates)) != len(candidates):
            return Rejection("duplicate_candidate", "a submission is named twice")
        for candidate in candidates:
            submission = self.submissions.get(candidate)
            if submission is None or submission.status in REFUNDED:
                return Rejection("unknown_submission", f"{candidate} is not a published submission")
            if submission.status == "running":
                return Rejection(
                    "submission_running", f"{candidate} is still running", retryable=True
                )
        if self.config.finish_budget_policy == "require_budget_exhaustion":
            remaining = self._budget().episodes_remaining
            if remaining:
                return Rejection(
                    "budget_remaining",
                    f"{remaining} episodes remain; this run requires spending the whole budget",
                    retryable=True,
                )
        return None


def parse_selector(selector: str | Sequence[int], pool_size: int) -> tuple[int, ...] | Rejection:
    """`"3"`, `"0:4"` (half-open), unions `"0:2,4:8"`, or a list of ints.

    Non-empty, strictly increasing, inside ``0..pool_size-1``.
    """
    if isinstance(selector, str):
        indices: list[int] = []
        for part in selector.replace(" ", "").split(","):
            start, colon, stop = part.partition(":")
            if not (start.isdigit() and (not colon or stop.isdigit())):
                return Rejection(
                    "invalid_selector",
                    f"cannot read {part!r}; use an index like '3', a range like '0:4', "
                    "or a union like '0:2,4:8'",
                )
            first, last = int(start), int(stop) if colon else int(start) + 1
            if last <= first:
                return Rejection("invalid_selector", f"range {part!r} is empty")
            indices.extend(range(first, min(last, first + pool_size + 1)))
    elif isinstance(selector, Sequence) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in selector
    ):
        indices = list(selector)
    else:
        return Rejection("invalid_selector", "episodes must be a selector string or a list of ints")
    if not indices:
        return Rejection("invalid_selector", "select at least one episode")
    if any(b <= a for a, b in pairwise(indices)):
        return Rejection("invalid_selector", "episode indices must be strictly increasing")
    if indices[0] < 0 or indices[-1] >= pool_size:
        return Rejection("index_out_of_range", f"episode indices must lie in 0..{pool_size - 1}")
    return tuple(indices)
