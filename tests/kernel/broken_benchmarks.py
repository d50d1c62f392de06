"""Benchmarks with one defect each, loaded by entry point inside real runner processes."""

from __future__ import annotations

import os
from typing import Any

import gymnasium

from evopolicy.benchmarks.cartpole import CartPole
from evopolicy.kernel.authoring import EpisodeSpec


class _FailingStep(gymnasium.Wrapper):
    def __init__(self, env: Any, at_step: int) -> None:
        super().__init__(env)
        self.at_step = at_step
        self.count = 0

    def step(self, action: Any) -> Any:
        self.count += 1
        if self.count > self.at_step:
            raise RuntimeError("simulator diverged")
        return self.env.step(action)


class StepFails(CartPole):
    """The environment raises at its fourth step."""

    def make_environment(self, episode: EpisodeSpec) -> Any:
        return _FailingStep(super().make_environment(episode), at_step=3)


class RunnerDies(CartPole):
    """Making the environment kills the runner process itself."""

    def make_environment(self, episode: EpisodeSpec) -> Any:
        os._exit(17)
