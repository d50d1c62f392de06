"""The runner process: holds environments and drives policy workers, one episode at a time.

Started by the host as ``python -m evopolicy.kernel.runner FD_IN FD_OUT SCRATCH [CPU]``;
the host owns SCRATCH (episode folders) and removes it, even if the runner dies. Before it
reads anything from the host, it forks its template process (see zygote.py), so
no worker can inherit a seed. Then it serves jobs until the host closes the channel.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from evopolicy.kernel import channel
from evopolicy.kernel.authoring import Benchmark, BenchmarkRef, Episode
from evopolicy.kernel.limits import Limits
from evopolicy.kernel.program import Program
from evopolicy.kernel.zygote import Zygote

_CACHED_PROGRAMS = 8
_CACHED_BENCHMARKS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeJob:
    """One episode for a runner; the program travels once per runner, by digest."""

    benchmark: BenchmarkRef
    program_digest: str
    episode: Episode
    limits: Limits


@dataclass(frozen=True, slots=True)
class LoadProgram:
    program: Program


@dataclass(frozen=True, slots=True)
class HostFaultReport:
    message: str
    fatal: bool = False
    """The runner cannot go on (its template is lost) and exits after this report."""


@dataclass(frozen=True, slots=True)
class NeedProgram:
    """The runner does not hold (or no longer holds) the job's program."""

    digest: str


def main(fd_in: int, fd_out: int, scratch: Path, cpu: int | None = None) -> None:
    if cpu is not None:
        # Runner, template and worker hand control to one another; on one core a wake-up
        # costs a few microseconds, across cores (idle vCPUs especially) ten times more.
        os.sched_setaffinity(0, {cpu})
    zygote = Zygote.start(close_in_child=(fd_in, fd_out))
    # Heavy imports after the fork: the template stays small and never sees them.
    from evopolicy.kernel.episode import PreparedProgram, TemplateLost, run_episode
    from evopolicy.kernel.errors import EvopolicyError

    programs: OrderedDict[str, PreparedProgram] = OrderedDict()
    benchmarks: OrderedDict[BenchmarkRef, Benchmark] = OrderedDict()
    try:
        while True:
            try:
                message = channel.receive(fd_in)
            except channel.ChannelClosed:
                return
            if isinstance(message, LoadProgram):
                prepared = PreparedProgram.prepare(message.program)
                _remember(programs, message.program.digest, prepared, _CACHED_PROGRAMS)
                continue
            job: EpisodeJob = message
            program = programs.get(job.program_digest)
            if program is None:
                channel.send(fd_out, NeedProgram(job.program_digest))
                continue
            programs.move_to_end(job.program_digest)
            try:
                benchmark = benchmarks.get(job.benchmark) or job.benchmark.load()
                _remember(benchmarks, job.benchmark, benchmark, _CACHED_BENCHMARKS)
                reply: object = run_episode(
                    zygote=zygote,
                    benchmark=benchmark,
                    program=program,
                    episode=job.episode,
                    limits=job.limits,
                    scratch_root=scratch,
                )
            except TemplateLost as error:
                channel.send(fd_out, HostFaultReport(error.message, fatal=True))
                return
            except EvopolicyError as error:
                reply = HostFaultReport(error.message)
            except Exception as error:  # a runner bug is still the host's fault
                reply = HostFaultReport(f"runner failed: {type(error).__name__}: {error}")
            channel.send(fd_out, reply)
    finally:
        zygote.close()
        # The host removes it too; this covers a host that died without closing us.
        shutil.rmtree(scratch, ignore_errors=True)


def _remember(cache: OrderedDict, key: object, value: object, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


if __name__ == "__main__":
    # Run through the package's own module, not __main__, so pickled classes resolve.
    from evopolicy.kernel import runner

    fd_in, fd_out, scratch, *cpu = sys.argv[1:]
    runner.main(int(fd_in), int(fd_out), Path(scratch), int(cpu[0]) if cpu else None)
    os._exit(0)
