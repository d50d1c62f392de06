"""Dependency rules and the public surface, checked from the source with `ast`."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evopolicy.kernel
from evopolicy.kernel.errors import OUTCOME_CODES

ROOT = Path(__file__).resolve().parents[1]
STDLIB = sys.stdlib_module_names


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("evopolicy.kernel", "evopolicy.benchmarks", "evopolicy.server"):
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def package_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.py"))


def test_the_kernel_exports_are_pinned():
    assert evopolicy.kernel.__all__ == [
        "Artifact", "Benchmark", "BenchmarkError", "BenchmarkRef", "BenchmarkSpec", "Episode",
        "EpisodeEnd", "EpisodeResult", "EpisodeSpec", "Evaluator", "EvopolicyError", "Feedback",
        "HostFault", "Limits", "OUTCOME_CODES", "OutcomeCode", "PolicyContext", "Program",
        "ProgramError", "ProgramLimits", "Rejection", "RunConfig", "Session", "create_run",
        "derive_seed", "evaluate", "finalize", "open_run",
    ]  # fmt: skip
    for name in evopolicy.kernel.__all__:
        assert getattr(evopolicy.kernel, name) is not None


@pytest.mark.parametrize("path", package_files("kernel"), ids=lambda p: p.name)
def test_the_kernel_never_imports_the_server_or_benchmarks(path):
    outward = {
        n for n in imports(path) if n.startswith(("evopolicy.server", "evopolicy.benchmarks"))
    }
    assert not outward


def test_the_policy_abi_imports_only_the_standard_library():
    assert {top(n) for n in imports(ROOT / "kernel" / "policy.py")} <= set(STDLIB)


def test_the_protocol_codec_does_no_io():
    assert {top(n) for n in imports(ROOT / "kernel" / "protocol.py")} <= {
        "__future__", "struct", "collections", "typing", "numpy",
    }  # fmt: skip


def test_the_worker_side_loads_no_host_machinery():
    # What shares a process with the policy: no environments, pickles or evaluation.
    allowed = set(STDLIB) | {"numpy"}
    for name in ("worker.py", "zygote.py", "policy.py", "protocol.py"):
        for module in imports(ROOT / "kernel" / name):
            if module.startswith("evopolicy."):
                assert module in {"evopolicy.kernel.protocol", "evopolicy.kernel.policy",
                                  "evopolicy.kernel.worker"}, (name, module)  # fmt: skip
            else:
                assert top(module) in allowed and top(module) != "pickle", (name, module)


@pytest.mark.parametrize("path", package_files("benchmarks"), ids=lambda p: p.name)
def test_benchmarks_use_the_kernel_authoring_surface_only(path):
    kernel = {n for n in imports(path) if n.startswith("evopolicy.kernel")}
    internal = {
        "evopolicy.kernel.evaluate",
        "evopolicy.kernel.runner",
        "evopolicy.kernel.episode",
        "evopolicy.kernel.zygote",
        "evopolicy.kernel.worker",
        "evopolicy.kernel.channel",
    }
    if path.name == "perf.py":  # the bench measures evaluation itself
        internal.discard("evopolicy.kernel.evaluate")
    assert not kernel & internal


def test_importing_the_policy_abi_loads_nothing_else():
    completed = subprocess.run(
        [sys.executable, "-c", "import sys, evopolicy.kernel.policy; print(sorted(m for m in "
         "sys.modules if m.startswith(('numpy', 'gymnasium', 'pydantic'))))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert completed.stdout.strip() == "[]"


def test_every_outcome_the_runner_emits_is_in_the_vocabulary():
    source = (ROOT / "kernel" / "episode.py").read_text()
    emitted = set(re.findall(r'_Ended\(\s*"([a-z_]+)"', source))
    assert emitted and emitted <= set(OUTCOME_CODES)
