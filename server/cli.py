"""The `evopolicy` command line. Subcommands call the kernel directly, never the MCP tools."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evopolicy.kernel.authoring import SPLITS, EpisodeResult
from evopolicy.kernel.errors import EvopolicyError
from evopolicy.kernel.limits import Limits


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `evopolicy` console script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except EvopolicyError as error:
        print(f"evopolicy: {error.code}: {error.message}", file=sys.stderr)
        return 3 if error.code == "host_fault" else 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evopolicy", description="Host for autonomous policy evolution."
    )
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands")

    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a policy program on episodes of a benchmark",
        description="Evaluate PROGRAM_DIR (default: the benchmark's baseline) and print a "
        "per-episode table and the score.",
    )
    evaluate.add_argument("program", nargs="?", type=Path, metavar="PROGRAM_DIR")
    evaluate.add_argument("--benchmark", default="cartpole", help="id, or gymnasium:<EnvId>")
    evaluate.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="benchmark parameter, e.g. max_episode_steps=200 (repeatable)",
    )
    evaluate.add_argument("--episodes", type=int, default=20)
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--split", choices=SPLITS, default="train")
    evaluate.add_argument("--workers", type=int, default=None, help="default: CPU count")
    evaluate.add_argument(
        "--step-seconds", type=float, default=None, help="deadline of one act() call"
    )
    evaluate.add_argument("--json", action="store_true", help="print JSON lines instead")
    evaluate.set_defaults(command="evaluate", handler=_evaluate)

    bench = commands.add_parser(
        "bench",
        help="measure evaluation overhead against a raw in-process loop",
        description="Measure, in one run, a raw in-process CartPole loop and evaluate() "
        "(per-episode fixed cost, per-step overhead, speed-up with 2 workers, memory).",
    )
    bench.add_argument("--episodes", type=int, default=20)
    bench.add_argument("--steps", type=int, default=500)
    bench.add_argument("--memory-episodes", type=int, default=1000)
    bench.set_defaults(command="bench", handler=_bench)

    grade = commands.add_parser(
        "grade",
        help="validate, select and assess a run's candidates (finishing it if the agent did not)",
        description="Open the host record RUN_DIR; if the agent never called finish, pick the "
        "best published submissions by public score as candidates; then run validation and "
        "assessment and write result.json.",
    )
    grade.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    grade.add_argument("--workers", type=int, default=None, help="default: from the run config")
    grade.set_defaults(command="grade", handler=_grade)

    listing = commands.add_parser("benchmarks", help="list the first-party benchmarks")
    listing.set_defaults(command="benchmarks", handler=_benchmarks)
    return parser


def _evaluate(args: argparse.Namespace) -> int:
    from evopolicy.benchmarks import baseline_program, load_benchmark
    from evopolicy.kernel.evaluate import evaluate
    from evopolicy.kernel.pool import plan_episodes
    from evopolicy.kernel.program import Program
    from evopolicy.kernel.seeds import secret_from_seed

    if args.episodes < 1:
        print("evopolicy: --episodes must be at least 1", file=sys.stderr)
        return 2
    benchmark = load_benchmark(args.benchmark, _parameters(args.param))
    program = Program.from_directory(args.program or baseline_program(args.benchmark))
    episodes = plan_episodes(
        benchmark, args.split, secret=secret_from_seed(args.seed), count=args.episodes
    )
    limits = Limits() if args.step_seconds is None else Limits(step_seconds=args.step_seconds)
    spec = benchmark.spec
    started = time.perf_counter()
    results = evaluate(program, benchmark, episodes, workers=args.workers, limits=limits)
    elapsed = time.perf_counter() - started
    feedback = benchmark.feedback(results)
    if args.json:
        for result in results:
            print(json.dumps(_result_row(result)))
        print(json.dumps({"score": feedback.score, "content": dict(feedback.content)}))
        return 0
    print(
        f"benchmark {spec.id} (parameters {spec.parameters_digest[:12]}) · "
        f"program {program.digest[:12]} · {len(results)} episodes · seed {args.seed}"
    )
    print(f"{'episode':>7}  {'outcome':<15}{'return':>10}{'steps':>7}  end")
    for result in results:
        row = _result_row(result)
        print(
            f"{row['episode']:>7}  {row['outcome']:<15}{row['return']:>10.2f}"
            f"{row['steps']:>7}  {row['end']}"
        )
    ok = sum(r.outcome == "ok" for r in results)
    print(
        f"score {feedback.score:.3f} (mean return, {spec.score_direction}) · "
        f"{ok}/{len(results)} ok · {elapsed:.2f} s"
    )
    return 0


def _result_row(result: EpisodeResult) -> dict[str, Any]:
    if result.outcome != "ok":
        end = (result.failure or result.outcome).splitlines()[0][:100]
    else:
        end = str(
            result.summary.get("termination_cause")
            or ("terminated" if result.terminated else "truncated")
        )
    return {
        "episode": result.index,
        "outcome": result.outcome,
        "return": result.episode_return,
        "steps": result.steps,
        "end": end,
    }


def _parameters(pairs: Sequence[str]) -> dict[str, Any]:
    parameters: dict[str, Any] = {}
    for pair in pairs:
        key, separator, raw = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"evopolicy: --param needs KEY=VALUE, got {pair!r}")
        try:
            parameters[key] = json.loads(raw)
        except json.JSONDecodeError:
            parameters[key] = raw
    return parameters


def _bench(args: argparse.Namespace) -> int:
    from evopolicy.benchmarks.perf import run_bench

    for line in run_bench(
        episodes=args.episodes, steps=args.steps, memory_episodes=args.memory_episodes
    ):
        print(line, flush=True)
    return 0


def _grade(args: argparse.Namespace) -> int:
    from evopolicy.kernel.evaluate import Evaluator
    from evopolicy.kernel.run import open_run, run_config
    from evopolicy.kernel.selection import finalize, finish_by_host

    config = run_config(args.run_dir)
    workers = args.workers or config.workers
    with Evaluator(workers=workers, limits=config.timeouts.limits()) as evaluator:
        session = open_run(args.run_dir, evaluator=evaluator)
        if session.candidates is None:
            try:
                finish_by_host(session)
            except ValueError as error:
                print(f"evopolicy: {error}", file=sys.stderr)
                return 2
        result = finalize(session)
    print(json.dumps(result, indent=2))
    return 0 if result["status"] in ("assessed", "selected") else 3


def _benchmarks(args: argparse.Namespace) -> int:
    from evopolicy.benchmarks import BENCHMARKS

    for entry in BENCHMARKS.values():
        print(f"{entry.id:<12} {entry.family:<16} {entry.summary}")
    print(f"{'gymnasium:<EnvId>':<29} any registered Gymnasium environment")
    return 0


if __name__ == "__main__":
    sys.exit(main())
