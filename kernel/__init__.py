"""evopolicy's domain core: programs, the policy ABI and worker, evaluation, benchmarks' SPI.

Names load lazily so that a runner or worker process importing one module does not
pay for the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Artifact": "evopolicy.kernel.authoring",
    "Benchmark": "evopolicy.kernel.authoring",
    "BenchmarkError": "evopolicy.kernel.errors",
    "BenchmarkRef": "evopolicy.kernel.authoring",
    "BenchmarkSpec": "evopolicy.kernel.authoring",
    "Episode": "evopolicy.kernel.authoring",
    "EpisodeEnd": "evopolicy.kernel.authoring",
    "EpisodeResult": "evopolicy.kernel.authoring",
    "EpisodeSpec": "evopolicy.kernel.authoring",
    "Evaluator": "evopolicy.kernel.evaluate",
    "EvopolicyError": "evopolicy.kernel.errors",
    "Feedback": "evopolicy.kernel.authoring",
    "HostFault": "evopolicy.kernel.errors",
    "Limits": "evopolicy.kernel.limits",
    "OUTCOME_CODES": "evopolicy.kernel.errors",
    "OutcomeCode": "evopolicy.kernel.errors",
    "PolicyContext": "evopolicy.kernel.policy",
    "Rejection": "evopolicy.kernel.session",
    "RunConfig": "evopolicy.kernel.config",
    "Session": "evopolicy.kernel.session",
    "create_run": "evopolicy.kernel.run",
    "finalize": "evopolicy.kernel.selection",
    "open_run": "evopolicy.kernel.run",
    "Program": "evopolicy.kernel.program",
    "ProgramError": "evopolicy.kernel.errors",
    "ProgramLimits": "evopolicy.kernel.program",
    "derive_seed": "evopolicy.kernel.seeds",
    "evaluate": "evopolicy.kernel.evaluate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evopolicy.kernel' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
