"""Per-episode limits on a policy process: deadlines, memory and output."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Deadlines are wall-clock seconds of policy time; environment time is not charged.

    Attributes:
        start_seconds: importing the program and `make_policy(context)`.
        step_seconds: one `act(observation)` call.
        episode_seconds: the policy's total time in the episode, start-up included.
        memory_bytes: the policy process's data segment (RLIMIT_DATA).
        output_bytes: the most any file the policy writes may hold, stdout and stderr
            included (RLIMIT_FSIZE); reaching it ends the episode as `resource_limit`.
        capture_bytes: how much of stdout and of stderr is kept for feedback.
        max_frame_bytes: the largest message the policy may send (an action or a failure).
    """

    start_seconds: float = 20.0
    step_seconds: float = 2.0
    episode_seconds: float = 120.0
    memory_bytes: int = 2 * 1024**3
    output_bytes: int = 8 * 1024**2
    capture_bytes: int = 64 * 1024
    max_frame_bytes: int = 4 * 1024**2

    def __post_init__(self) -> None:
        for name in ("start_seconds", "step_seconds", "episode_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        for name in ("memory_bytes", "output_bytes", "capture_bytes", "max_frame_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU: a backstop above the wall-clock deadlines."""
        return int(self.episode_seconds + self.start_seconds) + 5
