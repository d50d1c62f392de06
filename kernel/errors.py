"""Closed vocabularies of codes, and the small fault tree every boundary maps into.

Tree::

    EvopolicyError            code + human message
    ├── ProgramError          (also ValueError) a program snapshot is not acceptable
    ├── BenchmarkError        (also ValueError) unknown or misconfigured benchmark
    └── HostFault             the host or the environment failed; never the policy's fault
"""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

OutcomeCode: TypeAlias = Literal[
    "ok",  # the episode terminated or was truncated normally
    "exception",  # make_policy or act raised, or the policy process died
    "timeout",  # a step, start-up or episode deadline passed
    "invalid_action",  # act returned a value outside the action space
    "protocol_error",  # an unencodable value or garbage on the channel
    "resource_limit",  # memory, CPU or output cap hit
]
OUTCOME_CODES: tuple[OutcomeCode, ...] = get_args(OutcomeCode)

ErrorCode: TypeAlias = Literal[
    "invalid_selector",
    "index_out_of_range",
    "budget_exhausted",
    "over_submission_cap",
    "submission_limit",
    "program_invalid",
    "unknown_submission",
    "submission_running",
    "budget_remaining",
    "too_many_candidates",
    "run_finished",
    "host_fault",
    "unknown_benchmark",
    "benchmark_invalid",
    "exhaustion_unreachable",
    "no_candidates",
    "duplicate_candidate",
]
ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)

ProgramProblem: TypeAlias = Literal[
    "not_a_directory",
    "missing_policy",
    "symlink",
    "special_file",
    "invalid_path",
    "too_many_files",
    "file_too_large",
    "program_too_large",
    "unreadable",
    "invalid_content",
]


class EvopolicyError(Exception):
    """Base of evopolicy's faults: a stable machine-readable `code` plus a sentence."""

    code: ErrorCode

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ProgramError(EvopolicyError, ValueError):
    """A program folder or mapping breaks the snapshot rules; `problem` says which."""

    def __init__(self, problem: ProgramProblem, message: str) -> None:
        super().__init__("program_invalid", message)
        self.problem = problem


class BenchmarkError(EvopolicyError, ValueError):
    """A benchmark id is unknown, or its parameters or dependencies are unusable."""


class HostFault(EvopolicyError):
    """The host or the environment failed. Never charged to the policy."""

    def __init__(self, message: str) -> None:
        super().__init__("host_fault", message)
