"""Seed derivation: every seed of a run comes from one secret, by domain-separated HMAC."""

from __future__ import annotations

import hashlib
import hmac


def derive_seed(secret: bytes, domain: str, index: int) -> int:
    """A uint64 seed for `index` in `domain` (e.g. "train", "train-policy", "validation").

    Distinct domains or indices give independent seeds; nothing about the secret leaks.
    """
    message = f"evopolicy/seed/v1|{domain}|{index}".encode()
    return int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest()[:8], "little")


def secret_from_seed(seed: int) -> bytes:
    """A run secret from a small public seed, for reproducible command-line evaluations."""
    return hashlib.sha256(f"evopolicy/public-seed/v1|{seed}".encode()).digest()


def plan_seeds(seed: int, label: str, count: int) -> tuple[int, ...]:
    """`count` independent uint64 seeds under `label` (e.g. a split) from one integer seed."""
    if seed < 0:
        raise ValueError("seed must be non-negative")
    key = seed.to_bytes(max(8, (seed.bit_length() + 7) // 8), "little")
    return tuple(derive_seed(key, f"plan/{label}", index) for index in range(count))
