"""The host record of a run: an fsync'd event log (the source of truth) and atomic projections.

Layout (SPEC section 5)::

    runs/<run-id>/
      run.json  events.jsonl  secret  programs/<digest>/  submissions/<id>/
      validation.json  assessment.json  result.json
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from evopolicy.kernel.program import Program

EventKind = Literal[
    "run_created",  # the config and identity are fixed
    "submission_started",  # admitted; its episodes are reserved (charged)
    "submission_published",  # evaluated; feedback is published
    "submission_faulted",  # a host fault aborted it; its reservation is refunded
    "submission_interrupted",  # the host died while it ran; refunded on resume
    "finished",  # authority closed with an ordered candidate list
    "validation_done",
    "validation_failed",
    "assessment_done",
    "assessment_failed",
]


class Event(BaseModel):
    """One line of events.jsonl."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    """1-based position in the log."""
    time: float
    """Seconds since the epoch when it was recorded."""
    kind: EventKind
    data: dict[str, Any]


def dumps(value: Any) -> bytes:
    """The one JSON encoder for records and feedback (numpy-aware, sorted keys)."""
    return orjson.dumps(
        value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
    )


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(path.parent)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class RunRecord:
    """The files of one run, outside the agent's workspace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._events_path = root / "events.jsonl"
        self._seq = sum(1 for _ in self.events())

    @classmethod
    def create(cls, root: Path, secret: bytes) -> RunRecord:
        """A new, empty record with its secret (mode 0600).

        Raises:
            FileExistsError: `root` already holds a record.
        """
        root.mkdir(parents=True, exist_ok=True)
        if (root / "events.jsonl").exists():
            raise FileExistsError(f"{root} already holds a run record")
        write_atomic(root / "secret", secret.hex().encode(), mode=0o600)
        (root / "events.jsonl").touch(mode=0o600)
        return cls(root)

    @staticmethod
    def new_secret() -> bytes:
        return secrets.token_bytes(32)

    def secret(self) -> bytes:
        return bytes.fromhex((self.root / "secret").read_text().strip())

    def append(self, kind: EventKind, data: dict[str, Any]) -> Event:
        """Append an event and fsync it before returning: the change is then durable."""
        event = Event(seq=self._seq + 1, time=time.time(), kind=kind, data=data)
        line = orjson.dumps(event.model_dump(), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        with open(self._events_path, "ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._seq += 1
        return event

    def events(self) -> Iterator[Event]:
        """The recorded events; a torn last line (a crash mid-write) is ignored."""
        if not self._events_path.exists():
            return
        with open(self._events_path, "rb") as handle:
            for line in handle:
                if not line.endswith(b"\n"):
                    return
                yield Event.model_validate(orjson.loads(line))

    def write_json(self, relative: str, value: Any) -> None:
        write_atomic(self.root / relative, dumps(value))

    def set_status(self, status: str) -> None:
        """Project the run's lifecycle status into run.json."""
        run = orjson.loads((self.root / "run.json").read_bytes())
        self.write_json("run.json", run | {"status": status})

    def store_program(self, program: Program) -> None:
        """Keep an immutable copy of a program under programs/<digest>/."""
        target = self.root / "programs" / program.digest
        if target.exists():
            return
        staging = Path(tempfile.mkdtemp(prefix=".program-", dir=self.root))
        program.write_to(staging)
        target.parent.mkdir(exist_ok=True)
        try:
            os.rename(staging, target)
        except OSError:  # a concurrent store won the race; the content is identical
            pass

    def load_program(self, digest: str) -> Program:
        return Program.from_directory(self.root / "programs" / digest)
