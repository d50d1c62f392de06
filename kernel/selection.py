"""After finish, host-only: validate the candidates, select one, assess it on held-out episodes.

Selection order: better validation score (in the benchmark's direction), then fewer
policy failures, then the agent's order. Results go to the host record only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evopolicy.kernel.errors import HostFault
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.session import Session


def choose_candidates_for_host(session: Session) -> tuple[str, ...]:
    """For a run the agent never finished: the best published submissions by public score."""
    sign = -1.0 if session.benchmark.spec.score_direction == "maximize" else 1.0
    published = [s for s in session.submissions.values() if s.status == "published"]
    ranked = sorted(published, key=lambda s: (sign * (s.score or 0.0), s.id))
    limit = session.config.max_candidates if session.config.validation_episodes else 1
    return tuple(s.id for s in ranked[:limit])


def finish_by_host(session: Session) -> tuple[str, ...]:
    """Close authority on the agent's behalf (`evopolicy grade`)."""
    if session.candidates is not None:
        return session.candidates
    candidates = choose_candidates_for_host(session)
    if not candidates:
        raise ValueError("the run has no published submission to grade")
    session.candidates, session.finished_by = candidates, "host"
    session.record.append("finished", {"candidates": list(candidates), "by": "host"})
    session.record.set_status("finished")
    return candidates


def finalize(session: Session) -> dict[str, Any]:
    """Validate, select and assess; write validation.json, assessment.json, result.json."""
    if session.candidates is None:
        raise ValueError("finalize needs a finished run")
    finished_by = session.finished_by
    record, config, benchmark = session.record, session.config, session.benchmark
    candidates = session.candidates
    result: dict[str, Any] = {
        "schema": "evopolicy/result/v1",
        "finished_by": finished_by,
        "candidates": list(candidates),
    }
    try:
        selected, validation = _validate(session, candidates)
    except HostFault as fault:
        record.append("validation_failed", {"message": fault.message})
        result |= {"status": "validation_failed", "error": fault.message}
        return _conclude(session, result)
    record.write_json("validation.json", validation)
    record.append("validation_done", {"selected": selected})
    result["selected_submission"] = selected
    if config.assessment_episodes == 0:
        result |= {"status": "selected", "heldout_score": None}
        return _conclude(session, result)
    try:
        assessment = _assess(session, selected)
    except HostFault as fault:
        record.append("assessment_failed", {"message": fault.message})
        result |= {"status": "assessment_failed", "error": fault.message}
        return _conclude(session, result)
    record.write_json("assessment.json", assessment)
    record.append("assessment_done", {"score": assessment["score"]})
    result |= {
        "status": "assessed",
        "heldout_score": assessment["score"],
        "score_direction": benchmark.spec.score_direction,
    }
    return _conclude(session, result)


def _conclude(session: Session, result: dict[str, Any]) -> dict[str, Any]:
    session.record.write_json("result.json", result)
    session.record.set_status(result["status"])
    return result


def _validate(session: Session, candidates: Sequence[str]) -> tuple[str, dict[str, Any]]:
    config = session.config
    if config.validation_episodes == 0:
        return candidates[0], {"enabled": False, "selected": candidates[0]}
    episodes = plan_episodes(
        session.benchmark,
        "validation",
        secret=session.record.secret(),
        count=config.validation_episodes,
    )
    scored: list[dict[str, Any]] = []
    for order, candidate in enumerate(candidates):
        program = session.record.load_program(session.submissions[candidate].program_digest)
        results = session.evaluator.evaluate(program, session.benchmark, episodes)
        feedback = session.benchmark.feedback(results)
        scored.append(
            {
                "submission": candidate,
                "agent_order": order,
                "score": feedback.score,
                "policy_failures": sum(r.outcome != "ok" for r in results),
                "outcomes": [r.outcome for r in results],
            }
        )
    ranked = rank_candidates(scored, session.benchmark.spec.score_direction)
    return ranked[0]["submission"], {
        "enabled": True,
        "episodes": config.validation_episodes,
        "candidates": scored,
        "ranking": [c["submission"] for c in ranked],
        "selected": ranked[0]["submission"],
        "rule": "score in the benchmark's direction, then fewer policy failures, then agent order",
    }


def rank_candidates(scored: Sequence[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """Best first: score in `direction`, then fewer policy failures, then agent order."""
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted(scored, key=lambda c: (sign * c["score"], c["policy_failures"], c["agent_order"]))


def _assess(session: Session, selected: str) -> dict[str, Any]:
    episodes = plan_episodes(
        session.benchmark,
        "assessment",
        secret=session.record.secret(),
        count=session.config.assessment_episodes,
    )
    program = session.record.load_program(session.submissions[selected].program_digest)
    results = session.evaluator.evaluate(program, session.benchmark, episodes)
    feedback = session.benchmark.feedback(results)
    return {
        "submission": selected,
        "program_digest": program.digest,
        "episodes": len(results),
        "score": feedback.score,
        "outcomes": [r.outcome for r in results],
        "returns": [r.episode_return for r in results],
        "content": dict(feedback.content),
    }
