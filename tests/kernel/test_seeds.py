"""Rules of kernel/seeds.py and kernel/pool.py: domain-separated, stable seeds."""

from __future__ import annotations

from evopolicy.benchmarks import load_benchmark
from evopolicy.kernel.pool import plan_episodes
from evopolicy.kernel.seeds import derive_seed, plan_seeds, secret_from_seed

SECRET = secret_from_seed(0)


def test_seeds_are_stable_uint64_values():
    seed = derive_seed(SECRET, "train", 0)
    assert seed == derive_seed(SECRET, "train", 0)
    assert 0 <= seed < 2**64


def test_domains_indices_and_secrets_never_collide():
    seeds = {
        derive_seed(secret, domain, index)
        for secret in (SECRET, secret_from_seed(1))
        for domain in ("train", "train-policy", "validation", "assessment")
        for index in range(64)
    }
    assert len(seeds) == 2 * 4 * 64


def test_plan_seeds_extend_as_prefixes():
    assert plan_seeds(7, "train", 3) == plan_seeds(7, "train", 5)[:3]
    assert plan_seeds(7, "train", 3) != plan_seeds(7, "validation", 3)
    assert plan_seeds(2**200, "train", 2) != plan_seeds(2**200 + 1, "train", 2)


def test_planned_episodes_separate_environment_and_policy_seeds():
    benchmark = load_benchmark("cartpole")
    episodes = plan_episodes(benchmark, "train", secret=SECRET, count=8)
    assert [e.index for e in episodes] == list(range(8))
    environment = {e.spec.seed for e in episodes}
    policies = {e.policy_seed for e in episodes}
    assert len(environment) == len(policies) == 8
    assert not environment & policies
    validation = plan_episodes(benchmark, "validation", secret=SECRET, count=8)
    assert not environment & {e.spec.seed for e in validation}
