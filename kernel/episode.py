"""One episode in the runner: the environment steps here, the policy answers from its own process.

Owns the outcome rules of SPEC section 2: deadlines on policy time only, checked
actions, bounded output, and the line between policy failures (an outcome) and
environment failures (`HostFault`).
"""

from __future__ import annotations

import marshal
import math
import os
import resource
import select
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evopolicy.kernel import protocol
from evopolicy.kernel.authoring import Benchmark, Episode, EpisodeEnd, EpisodeResult, jsonable
from evopolicy.kernel.errors import HostFault, OutcomeCode
from evopolicy.kernel.limits import Limits
from evopolicy.kernel.program import ENTRY_FILE, Program
from evopolicy.kernel.spaces import InvalidAction, to_action
from evopolicy.kernel.zygote import WorkerExit, Zygote

PROGRAM_DIR = "program"
TRACE_HEAD = 10
TRACE_TAIL = 20
_FAILURE_CHARS = 2_000
_TRACEBACK_CHARS = 8_000
_EXIT_GRACE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class PreparedProgram:
    """A program plus its entry module compiled once, so each worker only unmarshals it."""

    program: Program
    entry_code: bytes | None
    """Marshalled code of policy.py, or None if it does not compile (the worker then
    compiles it itself and reports the SyntaxError as the policy's exception)."""

    @classmethod
    def prepare(cls, program: Program) -> PreparedProgram:
        path = f"{PROGRAM_DIR}/{ENTRY_FILE}"
        try:
            code = compile(program.files[ENTRY_FILE], path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return cls(program, None)
        return cls(program, marshal.dumps(code))


class _Ended(Exception):
    """The policy's part of the episode ended early with a non-ok outcome."""

    def __init__(self, outcome: OutcomeCode, message: str, traceback: str | None = None) -> None:
        super().__init__(message)
        self.outcome: OutcomeCode = outcome
        self.message = message
        self.traceback = traceback


class TemplateLost(HostFault):
    """The runner's template process is gone or unusable: the runner must be replaced."""


class _Died(Exception):
    """The policy process closed its channel."""


def run_episode(
    *,
    zygote: Zygote,
    benchmark: Benchmark,
    program: PreparedProgram,
    episode: Episode,
    limits: Limits,
    scratch_root: Path,
) -> EpisodeResult:
    """Run `program` on one episode and return its result.

    Raises:
        HostFault: the environment or the benchmark failed.
    """
    spec = benchmark.spec
    work = Path(tempfile.mkdtemp(prefix=f"episode-{episode.index}-", dir=scratch_root))
    try:
        program.program.write_to(work / PROGRAM_DIR)
        env = _guard("make the environment", lambda: benchmark.make_environment(episode.spec))
        try:
            options = dict(episode.spec.options) or None
            observation, info = _guard(
                "reset the environment", lambda: env.reset(seed=episode.spec.seed, options=options)
            )
            worker = _Worker.spawn(zygote, work, scratch_root, limits)
            try:
                context = {
                    "observation_space": dict(spec.observation_space),
                    "action_space": dict(spec.action_space),
                    "metadata": dict(spec.metadata),
                    "parameters": dict(spec.parameters),
                    "policy_seed": episode.policy_seed,
                    "max_episode_steps": spec.max_episode_steps,
                }
                loop = _Loop(env, worker, limits, spec.max_episode_steps, program.entry_code)
                loop.run(context, observation, info)
            finally:
                worker.stop()
            result = loop.result(episode.index, worker)
            end = EpisodeEnd(observation=loop.observation, info=loop.info)
            summary = _guard("summarize the episode", lambda: benchmark.summarize(env, end, result))
            return replace(result, summary=summary)
        finally:
            try:
                env.close()
            except Exception:
                pass
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _guard(what: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except HostFault:
        raise
    except Exception as error:
        raise HostFault(f"failed to {what}: {type(error).__name__}: {error}") from error


class _Worker:
    """The runner's end of one policy process: descriptors, deadlines, captured output."""

    def __init__(
        self,
        zygote: Zygote,
        pid: int,
        pidfd: int,
        to_worker: int,
        from_worker: int,
        capture_fds: tuple[int, int],
        limits: Limits,
    ) -> None:
        self.zygote = zygote
        self.pid = pid
        self.pidfd = pidfd
        self.to_worker = to_worker
        self.from_worker = from_worker
        self.capture_fds = capture_fds
        self.limits = limits
        self.frames = protocol.FrameBuffer(limits.max_frame_bytes)
        self.poller = select.poll()
        self.poller.register(from_worker, select.POLLIN)
        os.set_blocking(to_worker, False)
        self.writable = select.poll()
        self.writable.register(to_worker, select.POLLOUT)
        self.stopped = False
        self.peak_rss_kib = 0
        self.stdout: tuple[str, int] = ("", 0)
        self.stderr: tuple[str, int] = ("", 0)

    @classmethod
    def spawn(cls, zygote: Zygote, work: Path, io_dir: Path, limits: Limits) -> _Worker:
        opened: list[int] = []
        try:
            obs_read, obs_write = os.pipe()
            opened += (obs_read, obs_write)
            act_read, act_write = os.pipe()
            opened += (act_read, act_write)
            # Nameless capture files: nothing the policy can unlink, replace or link away.
            out = os.open(io_dir, os.O_TMPFILE | os.O_RDWR, 0o600)
            opened.append(out)
            err = os.open(io_dir, os.O_TMPFILE | os.O_RDWR, 0o600)
            opened.append(err)
            pid = zygote.spawn((obs_read, act_write, out, err), str(work), _rlimits(limits))
        except OSError as error:
            for fd in opened:
                os.close(fd)
            raise TemplateLost(f"the template process failed to start a worker: {error}") from None
        for fd in (obs_read, act_write):
            os.close(fd)
        return cls(zygote, pid, os.pidfd_open(pid), obs_write, act_read, (out, err), limits)

    def exchange(self, data: bytes, seconds: float) -> tuple[int, bytes]:
        """Send a frame and return the next frame, all within `seconds`.

        Raises:
            _Died: the policy process closed its end.
            TimeoutError: the frame could not be sent, or no whole frame arrived, in time.
            protocol.CodecError: the policy announced an oversized or empty frame.
        """
        if seconds <= 0:
            raise TimeoutError
        deadline = time.monotonic() + seconds
        try:
            sent = os.write(self.to_worker, data)
        except BlockingIOError:
            sent = 0
        except (BrokenPipeError, ConnectionResetError):
            raise _Died() from None
        if sent < len(data):
            self._send_rest(memoryview(data)[sent:], deadline)
        frame = self.frames.pop()
        if frame is not None:
            return frame
        remaining = seconds
        while remaining > 0:
            if self.poller.poll(math.ceil(remaining * 1000)):
                data = os.read(self.from_worker, 1 << 16)
                if not data:
                    raise _Died()
                frame = self.frames.feed_and_pop(data)
                if frame is not None:
                    return frame
            remaining = deadline - time.monotonic()
        raise TimeoutError

    def _send_rest(self, view: memoryview, deadline: float) -> None:
        # The pipe is non-blocking: a policy that stops reading cannot stall the runner.
        try:
            while view:
                try:
                    view = view[os.write(self.to_worker, view) :]
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self.writable.poll(math.ceil(remaining * 1000)):
                        raise TimeoutError from None
        except (BrokenPipeError, ConnectionResetError):
            raise _Died() from None

    def exited_by_itself(self) -> bool:
        """After the channel closed: did the process end on its own (vs. merely close it)?"""
        ready, _, _ = select.select([self.pidfd], [], [], _EXIT_GRACE_SECONDS)
        return bool(ready)

    def stop(self) -> None:
        """Kill the process group and release descriptors. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        self.peak_rss_kib = _peak_rss_kib(self.pid)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for fd in (self.to_worker, self.from_worker, self.pidfd):
            os.close(fd)
        self.stdout, self.stderr = (self._read_capture(fd) for fd in self.capture_fds)
        for fd in self.capture_fds:
            os.close(fd)

    def exit_status(self) -> WorkerExit:
        """How the worker ended; only for a worker that exited by itself."""
        self.stop()
        try:
            status = self.zygote.reap(self.pid)
        except OSError as error:
            raise TemplateLost(f"the template process failed to reap a worker: {error}") from None
        # /proc no longer shows a process that has exited; its parent still knows the peak.
        self.peak_rss_kib = self.peak_rss_kib or status.peak_rss_kib
        return status

    def _read_capture(self, fd: int) -> tuple[str, int]:
        """(bounded text, total bytes written) of a capture file, read through our own fd."""
        size = os.fstat(fd).st_size
        keep = self.limits.capture_bytes
        if size <= keep:
            return os.pread(fd, size, 0).decode("utf-8", "replace"), size
        head = os.pread(fd, keep * 3 // 4, 0)
        tail = os.pread(fd, keep // 4, size - keep // 4)
        marker = f"\n[... {size - len(head) - len(tail)} bytes truncated ...]\n".encode()
        return (head + marker + tail).decode("utf-8", "replace"), size


def _peak_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _rlimits(limits: Limits) -> dict[int, int]:
    return {
        resource.RLIMIT_DATA: limits.memory_bytes,
        resource.RLIMIT_FSIZE: limits.output_bytes,
        resource.RLIMIT_CPU: limits.cpu_seconds,
        resource.RLIMIT_NOFILE: 256,
        resource.RLIMIT_CORE: 0,
    }


class _Loop:
    """The step loop and the bookkeeping that becomes the EpisodeResult."""

    def __init__(
        self, env: Any, worker: _Worker, limits: Limits, max_steps: int, entry_code: bytes | None
    ) -> None:
        self.env = env
        self.entry_code = entry_code
        self.worker = worker
        self.limits = limits
        self.max_steps = max_steps
        self.outcome: OutcomeCode = "ok"
        self.failure: str | None = None
        self.traceback: str | None = None
        self.total = 0.0
        self.steps = 0
        self.terminated = False
        self.truncated = False
        self.policy_seconds = 0.0
        self.env_seconds = 0.0
        self.observation: Any = None
        self.info: Any = {}
        self.head: list[tuple[int, bytes, Any, float]] = []
        self.tail: deque[tuple[int, bytes, Any, float]] = deque(maxlen=TRACE_TAIL)

    def run(self, context: dict[str, Any], observation: Any, info: Any) -> None:
        self.observation, self.info = observation, info
        try:
            self._start(context)
            self._steps()
        except _Ended as ended:
            self.outcome, self.failure, self.traceback = (
                ended.outcome,
                ended.message,
                ended.traceback,
            )

    def _exchange(self, data: bytes, cap: float, waiting_for: int, what: str | int) -> bytes:
        """Send a frame and wait for the answer, at most `cap` seconds or what is left of
        the episode's policy time; `what` (a step index or a phrase) names the call."""
        seconds = min(cap, self.limits.episode_seconds - self.policy_seconds)
        started = time.perf_counter()
        try:
            kind, payload = self.worker.exchange(data, seconds)
        except TimeoutError:
            raise self._timeout(what, episode_bound=seconds < cap) from None
        except _Died:
            raise self._died() from None
        except protocol.CodecError as error:
            raise _Ended("protocol_error", f"the policy sent a malformed frame: {error}") from None
        finally:
            self.policy_seconds += time.perf_counter() - started
        if kind == waiting_for:
            return payload
        if kind == protocol.FAIL:
            raise _failure(payload)
        raise _Ended("protocol_error", f"the policy sent an unexpected frame of kind {kind}")

    def _timeout(self, what: str | int, *, episode_bound: bool) -> _Ended:
        if episode_bound:
            message = f"the policy used up its {self.limits.episode_seconds:g} s of episode time"
        elif isinstance(what, int):
            message = f"act() at step {what} took longer than {self.limits.step_seconds:g} s"
        else:
            message = f"{what} took longer than {self.limits.start_seconds:g} s"
        return _Ended("timeout", message)

    def _died(self) -> _Ended:
        if not self.worker.exited_by_itself():
            return _Ended("protocol_error", "the policy closed its protocol channel")
        return _exit_outcome(self.worker.exit_status())

    def _start(self, context: dict[str, Any]) -> None:
        init = protocol.encode(
            {"program_dir": PROGRAM_DIR, "context": context, "code": self.entry_code}
        )
        self._exchange(
            protocol.frame(protocol.INIT, init),
            self.limits.start_seconds,
            protocol.READY,
            "loading policy.py and make_policy(context)",
        )

    def _steps(self) -> None:
        env, step_cap = self.env, self.limits.step_seconds
        encode, decode, frame, OBS, ACT = (
            protocol.encode,
            protocol.decode,
            protocol.frame,
            protocol.OBS,
            protocol.ACT,
        )
        action_space = env.action_space
        head, tail = self.head, self.tail
        observation = self.observation
        while self.steps < self.max_steps:
            try:
                payload = encode(observation)
            except protocol.CodecError as error:
                raise HostFault(f"the environment's observation cannot be sent: {error}") from None
            answer = self._exchange(frame(OBS, payload), step_cap, ACT, self.steps)
            try:
                action = to_action(action_space, decode(answer))
            except protocol.CodecError as error:
                raise _Ended("protocol_error", f"the action cannot be decoded: {error}") from None
            except InvalidAction as error:
                raise _Ended("invalid_action", f"step {self.steps}: {error}") from None
            except Exception as error:  # whatever the action does to the checks is its fault
                raise _Ended(
                    "invalid_action",
                    f"step {self.steps}: the action could not be checked ({type(error).__name__})",
                ) from None
            started = time.perf_counter()
            try:
                observation, reward, terminated, truncated, info = env.step(action)
            except Exception as error:
                raise HostFault(
                    f"the environment failed at step {self.steps}: {type(error).__name__}: {error}"
                ) from error
            self.env_seconds += time.perf_counter() - started
            reward = float(reward)
            entry = (self.steps, payload, action, reward)
            if len(head) < TRACE_HEAD:
                head.append(entry)
            else:
                tail.append(entry)
            self.total += reward
            self.steps += 1
            self.observation, self.info = observation, info
            if terminated or truncated:
                self.terminated, self.truncated = bool(terminated), bool(truncated)
                return
        self.truncated = True

    def result(self, index: int, worker: _Worker) -> EpisodeResult:
        stdout, stdout_size = worker.stdout
        stderr, stderr_size = worker.stderr
        outcome, failure = self.outcome, self.failure
        cap = self.limits.output_bytes
        if outcome in ("ok", "exception") and max(stdout_size, stderr_size) >= cap:
            outcome, failure = "resource_limit", f"the policy wrote {cap} bytes of output, the cap"
        return EpisodeResult(
            index=index,
            outcome=outcome,
            episode_return=self.total,
            steps=self.steps,
            terminated=self.terminated,
            truncated=self.truncated,
            failure=failure[:_FAILURE_CHARS] if failure else None,
            traceback=self.traceback[-_TRACEBACK_CHARS:] if self.traceback else None,
            stdout=stdout,
            stderr=stderr,
            trace=self._trace(),
            policy_seconds=self.policy_seconds,
            env_seconds=self.env_seconds,
            worker_peak_rss_kib=worker.peak_rss_kib,
        )

    def _trace(self) -> dict[str, Any]:
        def step(entry: tuple[int, bytes, Any, float]) -> dict[str, Any]:
            t, payload, action, reward = entry
            return {
                "t": t,
                "observation": jsonable(protocol.decode(payload)),
                "action": jsonable(action),
                "reward": reward,
            }

        shown = len(self.head) + len(self.tail)
        return {
            "head": [step(e) for e in self.head],
            "tail": [step(e) for e in self.tail],
            "omitted": self.steps - shown,
            "final_observation": jsonable(self.observation),
        }


def _failure(payload: bytes) -> _Ended:
    try:
        report = protocol.decode(payload, max_items=64)
        outcome, message, trace = report["outcome"], report["message"], report["traceback"]
        if not (isinstance(message, str) and isinstance(trace, str)):
            raise TypeError("failure text must be strings")
    except Exception:  # untrusted bytes: any defect is the policy's protocol error
        return _Ended("protocol_error", "the policy sent a malformed failure report")
    if outcome not in ("exception", "resource_limit", "protocol_error"):
        return _Ended("protocol_error", "the policy sent a failure report with an unknown outcome")
    return _Ended(outcome, message[:_FAILURE_CHARS], trace[-_TRACEBACK_CHARS:] or None)


def _exit_outcome(status: WorkerExit) -> _Ended:
    if status.signal is not None:
        try:
            name = signal.Signals(status.signal).name
        except ValueError:  # real-time signals have no name
            name = f"signal {status.signal}"
        if status.signal in (signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL):
            return _Ended("resource_limit", f"the policy process was killed by {name} (a limit)")
        return _Ended("exception", f"the policy process crashed with {name}")
    return _Ended("exception", f"the policy process exited with code {status.exit_code}")
