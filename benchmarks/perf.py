"""`evopolicy bench`: evaluation overhead against a raw in-process loop, measured in one run.

Targets (issue 2): per-episode fixed cost <= 5 ms, per-step overhead <= 20 us over the
raw loop, >= 1.8x speed-up with 2 workers, host memory flat in the number of episodes.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium

from evopolicy.benchmarks.cartpole import CartPole
from evopolicy.kernel.authoring import Episode
from evopolicy.kernel.evaluate import Evaluator
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.program import Program
from evopolicy.kernel.seeds import secret_from_seed

# A controller that keeps CartPole up for all 500 steps, so every episode is full length.
BALANCING_POLICY = """
GAINS = (0.1, 0.5, 10.0, 2.0)

class Policy:
    def act(self, observation):
        push = sum(g * float(v) for g, v in zip(GAINS, observation))
        return 1 if push > 0 else 0

def make_policy(context):
    return Policy()
"""


def run_bench(
    *, episodes: int = 20, steps: int = 500, memory_episodes: int = 1000
) -> Iterator[str]:
    """Yield report lines as each measurement finishes."""
    program = Program.from_files({"policy.py": BALANCING_POLICY})
    long_bench = CartPole(max_episode_steps=steps)
    short_bench = CartPole(max_episode_steps=1)
    secret = secret_from_seed(0)
    long_episodes = plan_episodes(long_bench, "train", secret=secret, count=episodes)
    short_episodes = plan_episodes(short_bench, "train", secret=secret, count=episodes)

    raw_seconds, raw_steps = _raw_loop(long_bench, long_episodes)
    raw_step = raw_seconds / raw_steps
    yield (
        f"raw in-process loop: {raw_steps} steps in {raw_seconds:.3f} s "
        f"= {raw_step * 1e6:.2f} us/step"
    )

    timings: dict[int, float] = {}
    for workers in (1, 2):
        with Evaluator(workers=workers) as evaluator:
            started = time.perf_counter()
            evaluator.start()
            evaluator.evaluate(program, short_bench, short_episodes[:workers])
            yield f"workers={workers}: runner start-up {time.perf_counter() - started:.3f} s (once)"
            if workers == 1:
                short = _timed(evaluator, program, short_bench, short_episodes)
                fixed = short / episodes - raw_step
            results, timings[workers] = _timed_results(
                evaluator, program, long_bench, long_episodes
            )
            total_steps = sum(r.steps for r in results)
            if total_steps != raw_steps:
                yield f"warning: evaluate ran {total_steps} steps, the raw loop {raw_steps}"
            worker_rss = max(r.worker_peak_rss_kib for r in results)
        per_step = (timings[workers] - episodes * fixed) / total_steps
        yield (
            f"workers={workers}: {episodes} x {steps}-step episodes in {timings[workers]:.3f} s "
            f"= {per_step * 1e6:.2f} us/step wall"
        )
    overhead = (timings[1] - episodes * fixed) / raw_steps - raw_step
    yield f"per-episode fixed cost: {fixed * 1e3:.2f} ms  (target <= 5 ms)"
    yield f"per-step overhead over the raw loop: {overhead * 1e6:.2f} us  (target <= 20 us)"
    yield f"evaluate/raw time ratio at 1 worker: {timings[1] / raw_seconds:.2f}x"
    yield f"speed-up with 2 workers: {timings[1] / timings[2]:.2f}x  (target >= 1.8x)"
    yield f"peak RSS of one policy worker: {worker_rss / 1024:.1f} MiB"
    yield from _memory(program, short_bench, secret, memory_episodes)


def _raw_loop(benchmark: CartPole, episodes: tuple[Episode, ...]) -> tuple[float, int]:
    module = _load_policy(BALANCING_POLICY)
    env = gymnasium.make("CartPole-v1", max_episode_steps=benchmark.max_episode_steps)
    total_steps = 0
    started = time.perf_counter()
    for episode in episodes:
        policy = module.make_policy(None)
        observation, _ = env.reset(seed=episode.spec.seed)
        done = False
        while not done:
            observation, _, terminated, truncated, _ = env.step(policy.act(observation))
            total_steps += 1
            done = terminated or truncated
    return time.perf_counter() - started, total_steps


def _load_policy(source: str) -> Any:
    spec = importlib.util.spec_from_loader("bench_policy", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "policy.py", "exec"), module.__dict__)
    return module


def _timed(evaluator: Evaluator, program: Program, benchmark: Any, episodes: Any) -> float:
    return _timed_results(evaluator, program, benchmark, episodes)[1]


def _timed_results(
    evaluator: Evaluator, program: Program, benchmark: Any, episodes: Any
) -> tuple[Any, float]:
    started = time.perf_counter()
    results = evaluator.evaluate(program, benchmark, episodes)
    elapsed = time.perf_counter() - started
    if any(r.outcome != "ok" for r in results):
        raise RuntimeError(f"bench episodes failed: {[r.failure for r in results]}")
    return results, elapsed


def _memory(program: Program, benchmark: CartPole, secret: bytes, count: int) -> Iterator[str]:
    batch = 100
    episodes = plan_episodes(benchmark, "train", secret=secret, count=batch)
    samples: list[float] = []
    with Evaluator(workers=2) as evaluator:
        for _ in range(max(1, count // batch)):
            evaluator.evaluate(program, benchmark, episodes)
            samples.append(_current_rss_mib())
    evaluated = batch * len(samples)
    yield (
        f"host RSS after {batch} episodes: {samples[0]:.1f} MiB; after {evaluated}: "
        f"{samples[-1]:.1f} MiB (growth {samples[-1] - samples[0]:+.1f} MiB)"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    yield f"host peak RSS: {peak:.1f} MiB"


def _current_rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
