"""Rules of kernel/episode.py: every outcome code, produced by a real misbehaving policy."""

from __future__ import annotations

import time

import pytest

from evopolicy.benchmarks.gymnasium_env import GymnasiumBenchmark
from evopolicy.kernel.authoring import EpisodeResult
from evopolicy.kernel.errors import HostFault
from evopolicy.kernel.evaluate import Evaluator
from evopolicy.kernel.limits import Limits
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.program import Program
from evopolicy.kernel.seeds import secret_from_seed
from tests.conftest import TEST_LIMITS, cartpole_episodes, policy

BALANCING = """
class Policy:
    def act(self, observation):
        x, v, theta, omega = observation
        return 1 if 0.1 * x + 0.5 * v + 10 * theta + 2 * omega > 0 else 0

def make_policy(context):
    return Policy()
"""


def one(evaluator: Evaluator, program: Program, steps: int = 40) -> EpisodeResult:
    benchmark, episodes = cartpole_episodes(1, steps=steps)
    (result,) = evaluator.evaluate(program, benchmark, episodes)
    return result


def acting(body: str, prelude: str = "") -> Program:
    """A CartPole policy whose act() runs `body` (indented by the caller's lines)."""
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return policy(
        f"{prelude}\nclass Policy:\n    def act(self, observation):\n{lines}\n\n"
        "def make_policy(context):\n    return Policy()\n"
    )


def test_a_sound_policy_ends_ok_with_its_return(evaluator):
    result = one(evaluator, policy(BALANCING), steps=40)
    assert result.outcome == "ok"
    assert result.failure is None
    assert result.steps == 40
    assert result.episode_return == 40.0
    assert result.truncated and not result.terminated


def test_exception_in_act_is_reported_with_a_program_relative_traceback(evaluator):
    result = one(evaluator, acting("raise ValueError('bad gain')"))
    assert result.outcome == "exception"
    assert result.failure == "ValueError: bad gain"
    assert result.steps == 0
    assert result.traceback is not None
    assert 'File "program/policy.py", line 4, in act' in result.traceback
    assert "evopolicy" not in result.traceback  # the worker's own frames are cut
    assert "/dev/shm" not in result.traceback and "/tmp" not in result.traceback


def test_exception_after_some_steps_keeps_the_return_so_far(evaluator):
    program = acting(
        "self.t = getattr(self, 't', 0) + 1\nif self.t > 5:\n    raise RuntimeError('late')\n"
        "return 0"
    )
    result = one(evaluator, program)
    assert result.outcome == "exception"
    assert result.steps == 5
    assert result.episode_return == 5.0


def test_exception_in_make_policy_ends_before_any_step(evaluator):
    result = one(evaluator, policy("def make_policy(context):\n    raise KeyError('gains')\n"))
    assert result.outcome == "exception"
    assert result.failure == "KeyError: 'gains'"
    assert result.steps == 0
    assert "line 2, in make_policy" in (result.traceback or "")


def test_missing_make_policy_is_an_exception(evaluator):
    result = one(evaluator, policy("def make_agent(context):\n    return None\n"))
    assert result.outcome == "exception"
    assert result.failure == "policy.py defines no make_policy(context)"


def test_a_policy_without_act_is_an_exception(evaluator):
    result = one(evaluator, policy("def make_policy(context):\n    return 42\n"))
    assert result.outcome == "exception"
    assert "has no act(observation)" in (result.failure or "")


def test_syntax_error_is_an_exception_naming_the_line(evaluator):
    result = one(evaluator, policy("def make_policy(context):\n    return (\n"))
    assert result.outcome == "exception"
    assert (result.failure or "").startswith("SyntaxError")
    assert "program/policy.py" in (result.traceback or "")


def test_helper_modules_beside_policy_import(evaluator):
    program = policy(
        "from helpers.gains import GAINS\n" + BALANCING.replace("0.1 * x", "GAINS[0] * x"),
        **{"helpers/__init__.py": "", "helpers/gains.py": "GAINS = (0.1,)\n"},
    )
    assert one(evaluator, program).outcome == "ok"


def test_sleeping_past_the_step_deadline_is_a_timeout(evaluator):
    result = one(evaluator, acting("import time\ntime.sleep(30)\nreturn 0"))
    assert result.outcome == "timeout"
    assert result.failure == "act() at step 0 took longer than 1 s"
    assert result.policy_seconds < 5


def test_busy_loop_in_act_is_a_timeout(evaluator):
    result = one(evaluator, acting("while True:\n    pass"))
    assert result.outcome == "timeout"


def test_sleeping_in_make_policy_is_a_timeout(evaluator):
    program = policy("import time\ndef make_policy(context):\n    time.sleep(30)\n")
    result = one(evaluator, program)
    assert result.outcome == "timeout"
    assert "make_policy" in (result.failure or "")


def test_slow_steps_exhaust_the_episode_deadline():
    limits = Limits(step_seconds=1.0, episode_seconds=0.5, start_seconds=5.0)
    with Evaluator(workers=1, limits=limits) as evaluator:
        result = one(evaluator, acting("import time\ntime.sleep(0.05)\nreturn 0"), steps=200)
    assert result.outcome == "timeout"
    assert result.failure == "the policy used up its 0.5 s of episode time"
    assert 3 <= result.steps < 15


def test_environment_time_is_not_charged_to_the_policy(evaluator):
    result = one(evaluator, policy(BALANCING), steps=40)
    assert result.env_seconds > 0
    assert result.policy_seconds < TEST_LIMITS.episode_seconds


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        ("2", "is not in Discrete(2)"),
        ("-1", "is not in Discrete(2)"),
        ("1.0", "must be an integer"),
        ("True", "must be an integer"),
        ("'left'", "must be an integer"),
        ("[1]", "must be an integer"),
    ],
)
def test_an_action_outside_the_space_is_invalid_and_never_repaired(evaluator, returned, reason):
    result = one(evaluator, acting(f"return {returned}"))
    assert result.outcome == "invalid_action"
    assert result.failure is not None and reason in result.failure
    assert result.steps == 0


@pytest.mark.parametrize("returned", ["float('nan')", "[3.0]", "np.array([-2.5])", "[0.1, 0.2]"])
def test_bad_continuous_actions_are_invalid(returned):
    benchmark = GymnasiumBenchmark("Pendulum-v1", max_episode_steps=20)
    episodes = plan_episodes(benchmark, "train", secret=secret_from_seed(1), count=1)
    program = acting(f"return {returned}", prelude="import numpy as np")
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        (result,) = evaluator.evaluate(program, benchmark, episodes)
    assert result.outcome == "invalid_action"
    assert result.steps == 0


def test_an_unencodable_action_is_a_protocol_error(evaluator):
    result = one(evaluator, acting("return object()"))
    assert result.outcome == "protocol_error"
    assert "cannot be sent" in (result.failure or "")


def test_an_action_object_whose_methods_raise_is_a_protocol_error(evaluator):
    prelude = (
        "class Evil(int):\n"
        "    def __eq__(self, other): raise RuntimeError('eq')\n"
        "    def __index__(self): raise RuntimeError('index')\n"
        "    def __array__(self, *a, **k): raise RuntimeError('array')\n"
        "    __hash__ = int.__hash__\n"
    )
    result = one(evaluator, acting("return Evil(1)", prelude=prelude))
    # An int subclass travels as its int value; no method of it ever runs in the host.
    assert result.outcome == "ok"


def test_a_gigantic_action_is_a_protocol_error(evaluator):
    result = one(evaluator, acting("return np.zeros(1_000_000)", "import numpy as np"))
    assert result.outcome == "protocol_error"
    assert "limit" in (result.failure or "")


def test_a_deeply_nested_action_is_a_protocol_error(evaluator):
    result = one(evaluator, acting("a = 0\nfor _ in range(100):\n    a = [a]\nreturn a"))
    assert result.outcome == "protocol_error"


def test_garbage_on_the_protocol_channel_is_a_protocol_error(evaluator):
    result = one(evaluator, acting("import os\nos.write(4, b'\\x05\\x00\\x00\\x00\\x09garbage')"))
    assert result.outcome == "protocol_error"


def test_closing_the_protocol_channel_is_a_protocol_error(evaluator):
    result = one(evaluator, acting("import os, time\nos.close(4)\ntime.sleep(30)"))
    assert result.outcome == "protocol_error"
    assert result.failure == "the policy closed its protocol channel"


def test_exiting_the_process_is_an_exception_with_its_code(evaluator):
    result = one(evaluator, acting("import os\nos._exit(7)"))
    assert result.outcome == "exception"
    assert result.failure == "the policy process exited with code 7"


def test_sys_exit_is_an_exception(evaluator):
    result = one(evaluator, acting("import sys\nsys.exit(0)"))
    assert result.outcome == "exception"
    assert result.failure == "SystemExit: 0"


def test_a_crash_is_an_exception_naming_the_signal(evaluator):
    result = one(evaluator, acting("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"))
    assert result.outcome == "exception"
    assert result.failure == "the policy process crashed with SIGSEGV"


def test_a_memory_bomb_is_a_resource_limit(evaluator):
    # np.empty reserves without touching pages: the limit, not page faults, stops it.
    program = acting(
        "blocks = []\nwhile True:\n    blocks.append(np.empty(1 << 26))", "import numpy as np"
    )
    result = one(evaluator, program)
    assert result.outcome == "resource_limit"
    assert "MemoryError" in (result.failure or "")


def test_one_allocation_over_the_limit_is_a_resource_limit(evaluator):
    result = one(evaluator, acting("return bytearray(1 << 34)"))
    assert result.outcome == "resource_limit"


def test_print_spam_hits_the_output_cap_and_capture_stays_bounded(evaluator):
    result = one(evaluator, acting("while True:\n    print('spam' * 100)"))
    assert result.outcome == "resource_limit"
    assert len(result.stdout) < TEST_LIMITS.capture_bytes + 200
    assert "bytes truncated" in result.stdout
    assert result.stdout.startswith("spam")


def test_writing_a_huge_file_hits_the_output_cap(evaluator):
    program = acting("with open('big.bin', 'wb') as f:\n    f.write(b'x' * (1 << 30))\nreturn 0")
    result = one(evaluator, program)
    assert result.outcome == "resource_limit"


def test_print_works_and_stdout_and_stderr_are_kept(evaluator):
    program = acting(
        "import sys\nprint('step', getattr(self, 't', 0))\n"
        "print('to stderr', file=sys.stderr)\nself.t = getattr(self, 't', 0) + 1\nreturn 0"
    )
    result = one(evaluator, program, steps=3)
    assert result.outcome == "ok"
    assert result.stdout.splitlines()[:2] == ["step 0", "step 1"]
    assert "to stderr" in result.stderr


def test_the_context_carries_public_fields_only(evaluator):
    program = policy(
        "import json\n"
        "def make_policy(context):\n"
        "    print(json.dumps({'seed': context.policy_seed, 'action': context.action_space,\n"
        "        'steps': context.max_episode_steps, 'params': dict(context.parameters),\n"
        "        'fields': sorted(type(context).__dataclass_fields__)}))\n"
        "    raise SystemExit(0)\n"
    )
    import json

    report = json.loads(one(evaluator, program, steps=25).stdout)
    assert report["action"] == {"kind": "discrete", "n": 2, "start": 0}
    assert report["steps"] == 25
    assert report["params"] == {"max_episode_steps": 25}
    assert 0 <= report["seed"] < 2**64
    assert report["fields"] == [
        "action_space",
        "max_episode_steps",
        "metadata",
        "observation_space",
        "parameters",
        "policy_seed",
    ]


def test_each_episode_starts_in_a_fresh_folder_and_process(evaluator):
    program = acting(
        "import os\nif not hasattr(self, 'seen'):\n"
        "    self.seen = True\n    print(sorted(os.listdir('.')), os.getpid())\n"
        "    open('leftover.txt', 'w').write('x')\n    open('program/policy.py', 'a').write('#')\n"
        "return 0"
    )
    benchmark, episodes = cartpole_episodes(4, steps=3)
    results = evaluator.evaluate(program, benchmark, episodes)
    listings = [r.stdout.rsplit(" ", 1) for r in results]
    assert all(listing == "['program']" for listing, _ in listings)
    assert len({pid for _, pid in listings}) == 4


def test_the_worker_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("EVOPOLICY_TEST_SECRET", "hunter2")
    program = acting("import os\nprint(sorted(os.environ))\nreturn 0")
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        result = one(evaluator, program, steps=1)
    assert "EVOPOLICY_TEST_SECRET" not in result.stdout
    names = set(eval(result.stdout))
    assert names <= {
        "PATH",
        "LANG",
        "HOME",
        "TMPDIR",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }


def test_children_of_the_policy_are_killed_with_its_episode(evaluator):
    program = acting(
        "import os, time\nif not hasattr(self, 'child'):\n"
        "    self.child = os.fork()\n"
        "    if self.child == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    print(self.child)\nreturn 0"
    )
    result = one(evaluator, program, steps=3)
    child = int(result.stdout.split()[0])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_later_episodes_are_unaffected_by_a_failed_one(evaluator):
    benchmark, episodes = cartpole_episodes(2, steps=5)
    crashing = acting("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert [r.outcome for r in evaluator.evaluate(crashing, benchmark, episodes)] == [
        "exception",
        "exception",
    ]
    results = evaluator.evaluate(policy(BALANCING), benchmark, episodes)
    assert [(r.outcome, r.steps) for r in results] == [("ok", 5), ("ok", 5)]


def test_a_daemon_that_leaves_the_process_group_dies_before_the_next_episode(evaluator):
    program = acting(
        "import os, time\nif not hasattr(self, 'child'):\n"
        "    read, write = os.pipe()\n"
        "    self.child = os.fork()\n"
        "    if self.child == 0:\n"
        "        os.setsid()\n"
        "        if os.fork():\n            os._exit(0)\n"
        "        os.write(write, str(os.getpid()).encode())\n"
        "        time.sleep(60)\n        os._exit(0)\n"
        "    os.waitpid(self.child, 0)\n"
        "    print(os.read(read, 32).decode())\nreturn 0"
    )
    benchmark, episodes = cartpole_episodes(1, steps=3)
    (first,) = evaluator.evaluate(program, benchmark, episodes)
    daemon = int(first.stdout.split()[0])
    assert _alive(daemon)  # it left the process group, so the episode's kill missed it
    evaluator.evaluate(policy(BALANCING), benchmark, episodes)  # the next spawn sweeps
    deadline = time.monotonic() + 5
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(daemon)


def test_an_unprintable_action_is_invalid_not_a_host_fault(evaluator):
    assert one(evaluator, acting("return 10**5000")).outcome == "invalid_action"


def test_a_nameless_signal_is_still_an_exception(evaluator):
    result = one(evaluator, acting("import os\nos.kill(os.getpid(), 40)"))
    assert result.outcome == "exception"
    assert result.failure == "the policy process crashed with signal 40"


def test_a_policy_that_stops_reading_cannot_stall_the_runner(evaluator):
    program = acting(
        "import os\nw = os.open('/proc/self/fd/3', os.O_WRONLY | os.O_NONBLOCK)\n"
        "try:\n    while True:\n        os.write(w, b'x' * 4096)\nexcept BlockingIOError:\n"
        "    pass\nreturn 0"
    )
    result = one(evaluator, program)
    assert result.outcome in ("timeout", "protocol_error")


def test_capture_files_have_no_name_to_tamper_with(evaluator):
    program = acting("import os\nprint(sorted(os.listdir('..')))\nreturn 0")
    result = one(evaluator, program, steps=1)
    assert result.outcome == "ok"
    assert "stdout" not in result.stdout and "stderr" not in result.stdout


def test_killing_the_template_is_a_host_fault_and_the_runner_is_replaced():
    with Evaluator(workers=1, limits=TEST_LIMITS) as evaluator:
        with pytest.raises(HostFault):
            one(evaluator, acting("import os\nos.kill(os.getppid(), 9)\nreturn 0"))
        assert one(evaluator, policy(BALANCING)).outcome == "ok"
