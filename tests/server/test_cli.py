"""The `evopolicy` console script, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# The script installed beside this interpreter: the tests run against the installed package.
EVOPOLICY = str(Path(sys.executable).with_name("evopolicy"))


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EVOPOLICY, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def test_evaluate_with_no_arguments_runs_the_cartpole_baseline(tmp_path):
    completed = run("evaluate", "--episodes", "4", "--workers", "2", cwd=str(tmp_path))
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("benchmark cartpole (parameters ")
    assert lines[1].split() == ["episode", "outcome", "return", "steps", "end"]
    rows = [line.split() for line in lines[2:6]]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert all(row[1] == "ok" and row[4] == "pole_angle" for row in rows)
    assert lines[6].startswith("score ")
    assert "4/4 ok" in lines[6]


def test_evaluate_json_lines_match_the_table(tmp_path):
    program = tmp_path / "program"
    program.mkdir()
    (program / "policy.py").write_text(
        "def make_policy(context):\n    return P()\n"
        "class P:\n    def act(self, observation):\n        return 5\n"
    )
    completed = run(
        "evaluate",
        str(program),
        "--benchmark",
        "gymnasium:CartPole-v1",
        "--episodes",
        "2",
        "--json",
    )
    assert completed.returncode == 0, completed.stderr
    *rows, summary = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [row["outcome"] for row in rows] == ["invalid_action", "invalid_action"]
    assert summary["score"] == 0.0
    assert summary["content"]["outcomes"] == {"invalid_action": 2}


def test_an_invalid_program_is_a_coded_error(tmp_path):
    completed = run("evaluate", str(tmp_path))
    assert completed.returncode == 2
    assert completed.stderr.startswith("evopolicy: program_invalid: program has no policy.py")


def test_an_unknown_benchmark_is_a_coded_error():
    completed = run("evaluate", "--benchmark", "nope")
    assert completed.returncode == 2
    assert completed.stderr.startswith("evopolicy: unknown_benchmark:")


def test_benchmarks_lists_cartpole():
    completed = run("benchmarks")
    assert completed.returncode == 0
    assert completed.stdout.split()[0] == "cartpole"


def test_the_module_entry_point_matches_the_script():
    completed = subprocess.run(
        [sys.executable, "-m", "evopolicy.server.cli", "benchmarks"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0
    assert completed.stdout == run("benchmarks").stdout
