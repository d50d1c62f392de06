"""Episode planning from a secret: public indices over trusted specs and policy seeds."""

from __future__ import annotations

from evopolicy.kernel.authoring import Benchmark, Episode, Split
from evopolicy.kernel.seeds import derive_seed


def plan_episodes(
    benchmark: Benchmark, split: Split, *, secret: bytes, count: int
) -> tuple[Episode, ...]:
    """`count` episodes of `split`: index i gets the benchmark's i-th spec and its own policy seed.

    The environment seeds (inside the specs) and the policy seeds come from separate
    HMAC domains, so neither reveals the other.
    """
    specs = benchmark.plan(split, seed=derive_seed(secret, split, 0), count=count)
    if len(specs) != count:
        raise ValueError(f"benchmark planned {len(specs)} episodes, {count} were asked for")
    return tuple(
        Episode(index=i, spec=spec, policy_seed=derive_seed(secret, f"{split}-policy", i))
        for i, spec in enumerate(specs)
    )
