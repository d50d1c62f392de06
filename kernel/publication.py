"""Feedback publication: the public projection of a submission, written to workspace and record.

Nothing private reaches these files: episode results carry no seeds or specs, and only
the public pool index names an episode.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from evopolicy.kernel.authoring import EpisodeResult, Feedback
from evopolicy.kernel.records import dumps, write_atomic

FEEDBACK_SCHEMA = "evopolicy/feedback/v1"
DEFAULT_BULK_LIMIT = 256 * 1024**2


def episode_summary(result: EpisodeResult) -> dict[str, Any]:
    """The per-episode entry of feedback.json."""
    return {
        "outcome": result.outcome,
        "return": result.episode_return,
        "steps": result.steps,
        "terminated": result.terminated,
        "truncated": result.truncated,
        "failure": result.failure,
        "summary": dict(result.summary),
    }


def episode_detail(result: EpisodeResult) -> dict[str, Any]:
    """One line of episodes.jsonl: the bounded evidence of one episode."""
    return {
        "index": result.index,
        "outcome": result.outcome,
        "failure": result.failure,
        "traceback": result.traceback,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "trace": dict(result.trace),
    }


def feedback_document(
    *,
    submission_id: str,
    program_digest: str,
    indices: Sequence[int],
    results: Sequence[EpisodeResult],
    feedback: Feedback,
) -> dict[str, Any]:
    """feedback.json of one submission."""
    return {
        "schema": FEEDBACK_SCHEMA,
        "submission_id": submission_id,
        "program_digest": program_digest,
        "episodes": list(indices),
        "score": feedback.score,
        "outcomes": dict(Counter(r.outcome for r in results)),
        "episode_summaries": {str(r.index): episode_summary(r) for r in results},
        "content": dict(feedback.content),
        "artifacts": [
            {
                "name": artifact.name,
                "content_type": artifact.content_type,
                "bytes": len(artifact.data),
                "sha256": hashlib.sha256(artifact.data).hexdigest(),
                "retention": artifact.retention,
            }
            for artifact in feedback.artifacts
        ],
    }


class Publisher:
    """Writes each submission's feedback into the workspace (if any) and the host record."""

    def __init__(
        self, *, workspace: Path | None, record_root: Path, bulk_limit: int = DEFAULT_BULK_LIMIT
    ) -> None:
        self.workspace = workspace
        self.record_root = record_root
        self.bulk_limit = bulk_limit

    def publish(
        self,
        submission_id: str,
        document: dict[str, Any],
        results: Sequence[EpisodeResult],
        feedback: Feedback,
    ) -> None:
        episodes = b"".join(
            orjson.dumps(episode_detail(r), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
            for r in results
        )
        for folder in self._folders(submission_id):
            for artifact in feedback.artifacts:
                write_atomic(folder / "artifacts" / _safe_name(artifact.name), artifact.data)
            write_atomic(folder / "episodes.jsonl", episodes)
            write_atomic(folder / "feedback.json", dumps(document))

    def write_index(self, entries: list[dict[str, Any]]) -> None:
        """feedback/index.json: every submission with status, score, episodes, digest."""
        body = dumps({"schema": FEEDBACK_SCHEMA, "submissions": entries})
        if self.workspace is not None:
            write_atomic(self.workspace / "feedback" / "index.json", body)
            self._evict_bulk([entry["id"] for entry in entries])
        write_atomic(self.record_root / "submissions" / "index.json", body)

    def _folders(self, submission_id: str) -> list[Path]:
        folders = [self.record_root / "submissions" / submission_id / "feedback"]
        if self.workspace is not None:
            folders.append(self.workspace / "feedback" / submission_id)
        return folders

    def _evict_bulk(self, order: list[str]) -> None:
        # Oldest first, never the newest submission; the host record keeps everything.
        assert self.workspace is not None
        feedback = self.workspace / "feedback"
        evictable = [path for i in order[:-1] for path in _bulk_artifacts(feedback / i)]
        kept = _bulk_artifacts(feedback / order[-1]) if order else []
        total = sum(path.stat().st_size for path in evictable + kept)
        for path in evictable:
            if total <= self.bulk_limit:
                return
            total -= path.stat().st_size
            path.unlink()

    def remove_workspace_feedback(self, submission_id: str) -> None:
        """Withdraw a submission's workspace files (one interrupted before it was published)."""
        if self.workspace is not None:
            shutil.rmtree(self.workspace / "feedback" / submission_id, ignore_errors=True)


def _bulk_artifacts(folder: Path) -> list[Path]:
    """The bulk artifact files of one published submission that are still present."""
    try:
        manifest = orjson.loads((folder / "feedback.json").read_bytes())["artifacts"]
    except (OSError, ValueError, KeyError):
        return []
    paths = [
        folder / "artifacts" / _safe_name(a["name"]) for a in manifest if a["retention"] == "bulk"
    ]
    return [path for path in paths if path.exists()]


def _safe_name(name: str) -> str:
    # Benchmarks name artifacts; keep them inside the artifacts folder whatever they say.
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
    return cleaned or "artifact"
