"""The template process: forked before the runner learns any secret; forks a worker per episode.

Forking a pre-imported template makes an episode's process cheap (about a
millisecond) while guaranteeing it never held seeds, environments or other
episodes' state: the template itself never receives any.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import io
import os
import resource
import signal
import socket
import struct
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from evopolicy.kernel import protocol

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_KILL_ROUNDS = 8
_STATUS = struct.Struct("<qqq")  # pid, wait status, peak RSS (KiB)
_KEPT_EXITS = 64
_PRELOADED = (
    "numpy",
    "numpy.random",
    "numpy.linalg",
    "math",
    "random",
    "json",
    "collections",
    "itertools",
    "functools",
    "dataclasses",
    "heapq",
    "bisect",
    "evopolicy.kernel.worker",
)
_WORKER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass(frozen=True, slots=True)
class WorkerExit:
    """How a worker process ended, as seen by its parent."""

    status: int
    peak_rss_kib: int

    @property
    def signal(self) -> int | None:
        return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None

    @property
    def exit_code(self) -> int | None:
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None


class Zygote:
    """The runner's handle on its template process."""

    def __init__(self, pid: int, channel: socket.socket) -> None:
        self.pid = pid
        self._channel = channel

    @classmethod
    def start(cls, close_in_child: Sequence[int]) -> Zygote:
        """Fork the template. Call before importing heavy modules or receiving secrets."""
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                parent_end.close()
                for fd in close_in_child:
                    os.close(fd)
                _serve(child_end)
            finally:
                os._exit(0)
        child_end.close()
        return cls(pid, parent_end)

    def spawn(self, fds: Sequence[int], scratch: str, rlimits: dict[int, int]) -> int:
        """Fork a worker with (protocol in, protocol out, stdout, stderr) descriptors.

        The worker runs in `scratch` under `rlimits`, on the runner's CPUs.
        """
        request = b"S" + protocol.encode({"scratch": scratch, "rlimits": rlimits})
        socket.send_fds(self._channel, [request], list(fds))
        reply = self._channel.recv(64)
        if len(reply) != 8:
            raise OSError("template process did not answer a spawn request")
        return int.from_bytes(reply, "little", signed=True)

    def reap(self, pid: int) -> WorkerExit:
        """How a worker that has exited ended. Killed workers need no reaping: the
        template collects them in the background."""
        self._channel.send(b"W" + pid.to_bytes(8, "little", signed=True))
        reply = self._channel.recv(64)
        if len(reply) != _STATUS.size:
            raise OSError("template process did not answer a wait request")
        _, status, peak = _STATUS.unpack(reply)
        return WorkerExit(status=status, peak_rss_kib=peak)

    def close(self) -> None:
        self._channel.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _serve(channel: socket.socket) -> None:
    _die_with_parent()
    # Orphans of a worker (a daemon that left its process group, say) are reparented
    # here, so the next episode's spawn can find and kill them.
    _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Preload what every episode needs, so each fork starts warm. numpy imports its
    # random package lazily (about 10 ms); policies use it, and the worker seeds it.
    for name in _PRELOADED:
        importlib.import_module(name)

    # Freeze the preloaded heap so the collector never walks (and copies) it in a worker.
    gc.collect()
    gc.freeze()
    os.environ.clear()
    os.environ.update(_WORKER_ENV)
    exits: OrderedDict[int, tuple[int, int]] = OrderedDict()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 16, 8)
        except OSError:
            return
        if not message:
            return
        if message[:1] == b"S":
            request = protocol.decode(message[1:])
            _kill_leftovers(exits)
            pid = os.fork()
            if pid == 0:
                channel.close()
                _become_worker(fds, request["scratch"], request["rlimits"])
            for fd in fds:
                os.close(fd)
            channel.send(pid.to_bytes(8, "little", signed=True))
            _collect(exits)
        elif message[:1] == b"W":
            pid = int.from_bytes(message[1:9], "little", signed=True)
            if pid not in exits:
                try:
                    _, status, usage = os.wait4(pid, 0)
                    _remember_exit(exits, pid, status, usage.ru_maxrss)
                except ChildProcessError:
                    _remember_exit(exits, pid, 0, 0)
            status, peak = exits.pop(pid)
            channel.send(_STATUS.pack(pid, status, peak))


def _kill_leftovers(exits: OrderedDict[int, tuple[int, int]]) -> None:
    # One episode runs at a time, so every child here belongs to a finished episode.
    children_file = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    for _ in range(_KILL_ROUNDS):
        try:
            with open(children_file) as handle:
                children = [int(pid) for pid in handle.read().split()]
        except OSError:
            return
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                _, status, usage = os.wait4(pid, 0)
            except ChildProcessError:
                continue
            _remember_exit(exits, pid, status, usage.ru_maxrss)


def _collect(exits: OrderedDict[int, tuple[int, int]]) -> None:
    # Reap finished workers without blocking; keep recent statuses for `reap` requests.
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _remember_exit(exits, pid, status, usage.ru_maxrss)


def _remember_exit(
    exits: OrderedDict[int, tuple[int, int]], pid: int, status: int, peak: int
) -> None:
    exits[pid] = (status, peak)
    while len(exits) > _KEPT_EXITS:
        exits.popitem(last=False)


def _become_worker(fds: list[int], scratch: str, rlimits: dict[int, int]) -> NoReturn:
    code = 2
    try:
        os.setsid()
        _die_with_parent()
        # Park the descriptors high first so the dup2s below cannot clobber one another.
        high = [os.dup2(fd, 100 + i) if fd < 100 else fd for i, fd in enumerate(fds)]
        proto_in, proto_out, out, err = high
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(proto_in, 3)
        os.dup2(proto_out, 4)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(5, 1 << 16)
        os.chdir(scratch)
        os.environ["HOME"] = os.environ["TMPDIR"] = scratch
        for limit, value in rlimits.items():
            resource.setrlimit(int(limit), (value, value))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = _unbuffered(1)
        sys.stderr = _unbuffered(2)
        from evopolicy.kernel import worker

        worker.serve(3, 4)
    except BaseException:
        code = 3
        try:
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
    os._exit(code)


def _unbuffered(fd: int) -> io.TextIOWrapper:
    # Unbuffered so nothing is lost when the episode's process group is killed.
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(0)
