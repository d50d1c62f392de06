"""Host-side evaluation: a pool of runner processes, episodes in parallel, results in order."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from types import TracebackType

from evopolicy.kernel import channel
from evopolicy.kernel.authoring import Benchmark, Episode, EpisodeResult
from evopolicy.kernel.errors import HostFault
from evopolicy.kernel.limits import Limits
from evopolicy.kernel.program import Program
from evopolicy.kernel.runner import EpisodeJob, HostFaultReport, LoadProgram, NeedProgram

ResultCallback = Callable[[EpisodeResult], None]

# The runner's environment is built, not inherited: no host variables or secrets reach it.
_RUNNER_ENV_KEEP = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TMPDIR", "MUJOCO_GL")
_RUNNER_ENV_SET = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",  # one hash order in every worker: determinism across runners
    "PYTHONDONTWRITEBYTECODE": "1",
    "SDL_VIDEODRIVER": "dummy",
}


_SCRATCH_PREFIX = "evopolicy-runner-"


def _sweep_stale_scratch() -> None:
    # A host killed outright (SIGKILL) leaves its runners' folders; their owner is dead.
    parent = _scratch_parent() or tempfile.gettempdir()
    for entry in os.scandir(parent):
        owner = entry.name.removeprefix(_SCRATCH_PREFIX).split("-", 1)[0]
        if entry.name.startswith(_SCRATCH_PREFIX) and owner.isdigit():
            try:
                os.kill(int(owner), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except PermissionError:
                pass


def _scratch_parent() -> str | None:
    # Episode folders are made and removed for every episode; on a memory file system
    # that costs a quarter of what it costs on disk (ext4 rmdir alone is ~0.5 ms here).
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None


class _Runner:
    """The host's handle on one runner process."""

    def __init__(self, cpu: int | None) -> None:
        self.scratch = tempfile.mkdtemp(
            prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-", dir=_scratch_parent()
        )
        to_runner_read, self._to_runner = os.pipe()
        self._from_runner, from_runner_write = os.pipe()
        env = {k: os.environ[k] for k in _RUNNER_ENV_KEEP if k in os.environ} | _RUNNER_ENV_SET
        # -P and cwd="/": the host's folder (perhaps an agent's workspace) must never
        # shadow a module the trusted runner imports.
        command = [sys.executable, "-P", "-m", "evopolicy.kernel.runner"]
        command += [str(to_runner_read), str(from_runner_write), self.scratch]
        if cpu is not None:
            command.append(str(cpu))
        self._process = subprocess.Popen(
            command,
            pass_fds=(to_runner_read, from_runner_write),
            stdin=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
        )
        os.close(to_runner_read)
        os.close(from_runner_write)
        self.broken = False

    def run(self, job: EpisodeJob, program: Program) -> EpisodeResult:
        try:
            channel.send(self._to_runner, job)
            reply = channel.receive(self._from_runner)
            if isinstance(reply, NeedProgram):
                # Programs travel once per runner and stay cached there while used.
                channel.send(self._to_runner, LoadProgram(program))
                channel.send(self._to_runner, job)
                reply = channel.receive(self._from_runner)
        except (OSError, channel.ChannelClosed) as error:
            self.broken = True
            code = self._process.poll()
            raise HostFault(f"a runner process died (exit status {code}): {error}") from None
        if isinstance(reply, HostFaultReport):
            self.broken = self.broken or reply.fatal
            raise HostFault(reply.message)
        return reply

    @property
    def usable(self) -> bool:
        return not self.broken and self._process.poll() is None

    def close(self) -> None:
        if self.broken:
            self._process.kill()
        for fd in (self._to_runner, self._from_runner):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


class Evaluator:
    """Runs programs on episodes with `workers` runner processes.

    Keep one open to amortize process start-up across evaluations; it is a context
    manager. Results come back in episode order and do not depend on `workers`.
    With `pin_cpus`, runner k and its policy workers share the k-th usable CPU, which
    makes their per-step exchange several times cheaper on virtual machines.
    """

    def __init__(
        self, *, workers: int | None = None, limits: Limits | None = None, pin_cpus: bool = True
    ) -> None:
        cpus = sorted(os.sched_getaffinity(0))
        self.workers = workers if workers is not None else len(cpus)
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        self.limits = limits or Limits()
        self._cpus: list[int | None] = [
            cpus[slot % len(cpus)] if pin_cpus else None for slot in range(self.workers)
        ]
        self._runners: list[_Runner | None] = [None] * self.workers
        _sweep_stale_scratch()
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start every runner now rather than on first use."""
        for slot in range(self.workers):
            self._runner(slot)

    def evaluate(
        self,
        program: Program,
        benchmark: Benchmark,
        episodes: Sequence[Episode],
        *,
        on_result: ResultCallback | None = None,
    ) -> tuple[EpisodeResult, ...]:
        """Evaluate `program` on `episodes`; `on_result` sees each result as it finishes.

        Raises:
            HostFault: a runner, the environment or the benchmark failed; the
                evaluation is abandoned (its finished results are discarded).
        """
        if self._closed:
            raise RuntimeError("this Evaluator is closed")
        results: list[EpisodeResult | None] = [None] * len(episodes)
        pending = iter(range(len(episodes)))
        faults: list[BaseException] = []
        guard = threading.Lock()

        def drain(slot: int) -> None:
            while True:
                with guard:
                    if faults:
                        return
                    position = next(pending, None)
                if position is None:
                    return
                job = EpisodeJob(
                    benchmark=benchmark.ref,
                    program_digest=program.digest,
                    episode=episodes[position],
                    limits=self.limits,
                )
                try:
                    result = self._runner(slot).run(job, program)
                    results[position] = result
                    if on_result is not None:
                        with guard:
                            on_result(result)
                except BaseException as error:  # a thread must never lose an episode silently
                    self._discard_if_broken(slot)
                    with guard:
                        faults.append(error)
                    return

        used = min(self.workers, len(episodes))
        if used <= 1:
            drain(0)
        else:
            threads = [threading.Thread(target=drain, args=(slot,)) for slot in range(used)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if faults:
            raise faults[0]
        if any(r is None for r in results):
            raise HostFault("an evaluation ended with episodes missing")
        return tuple(r for r in results if r is not None)

    def _runner(self, slot: int) -> _Runner:
        runner = self._runners[slot]
        if runner is None:
            with self._lock:
                runner = self._runners[slot] = _Runner(self._cpus[slot])
        return runner

    def _discard_if_broken(self, slot: int) -> None:
        runner = self._runners[slot]
        if runner is not None and not runner.usable:
            runner.close()
            self._runners[slot] = None

    def close(self) -> None:
        """Stop the runner processes."""
        self._closed = True
        for slot, runner in enumerate(self._runners):
            if runner is not None:
                runner.close()
                self._runners[slot] = None


def evaluate(
    program: Program,
    benchmark: Benchmark,
    episodes: Sequence[Episode],
    *,
    workers: int | None = None,
    limits: Limits | None = None,
    on_result: ResultCallback | None = None,
) -> tuple[EpisodeResult, ...]:
    """One-shot `Evaluator(...).evaluate(...)`; see `Evaluator`."""
    with Evaluator(workers=workers, limits=limits) as evaluator:
        return evaluator.evaluate(program, benchmark, episodes, on_result=on_result)
