"""CartPole: the first-party benchmark `cartpole` (Gymnasium CartPole-v1, 500 steps)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from evopolicy.benchmarks.gymnasium_env import GymnasiumBenchmark
from evopolicy.kernel.authoring import EpisodeEnd, EpisodeResult, Feedback

_STATE_NAMES = ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity")


class CartPole(GymnasiumBenchmark):
    """Balance a pole on a cart by pushing the cart left or right.

    Description:
        Gymnasium CartPole-v1: a pole hinged on a cart that moves on a frictionless track.
    Observation:
        Box(4,) float32: cart position (m), cart velocity (m/s), pole angle (rad),
        pole angular velocity (rad/s). Each reset draws all four from U(-0.05, 0.05).
    Action:
        Discrete(2): 0 pushes the cart left, 1 pushes it right (10 N).
    Reward:
        +1 for every step the pole stays up, so the return is the number of steps survived.
        The score is the mean return (maximized; 500 is perfect).
    Episode end:
        The pole leans past 12 degrees, the cart leaves [-2.4, 2.4] m, or 500 steps pass.
    Parameters:
        max_episode_steps (default 500).
    Feedback:
        Per episode: return, steps, termination cause (pole_angle, cart_position,
        time_limit or policy_failure), the state at the end with margins to both limits,
        and a trace of the first and last steps. Overall: score, cause counts, the share
        of episodes that reached the time limit.
    Version history:
        v1: first version.
    """

    benchmark_id = "cartpole"
    description = (
        "Balance a pole on a cart (Gymnasium CartPole-v1). Observation: cart position, cart "
        "velocity, pole angle (rad), pole angular velocity. Actions: 0 = push left, "
        "1 = push right. Reward +1 per step upright; episodes end when the pole passes 12 "
        "degrees, the cart leaves +-2.4 m, or after max_episode_steps (500)."
    )

    def __init__(self, *, max_episode_steps: int = 500) -> None:
        super().__init__("CartPole-v1", max_episode_steps=max_episode_steps)

    @property
    def parameters(self) -> dict[str, Any]:
        return {"max_episode_steps": self.max_episode_steps}

    def metadata(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "observation_names": list(_STATE_NAMES),
            "action_names": ["push_left", "push_right"],
            "limits": {"cart_position": 2.4, "pole_angle_radians": 12 * 2 * math.pi / 360},
        }

    def summarize(self, env: Any, end: EpisodeEnd, result: EpisodeResult) -> dict[str, Any]:
        physics = env.unwrapped
        x, x_dot, theta, theta_dot = (float(v) for v in end.observation)
        if result.outcome != "ok":
            cause = "policy_failure"
        elif result.terminated and abs(theta) > physics.theta_threshold_radians:
            cause = "pole_angle"
        elif result.terminated:
            cause = "cart_position"
        else:
            cause = "time_limit"
        summary = super().summarize(env, end, result)
        summary |= {
            "termination_cause": cause,
            "final_state": dict(zip(_STATE_NAMES, (x, x_dot, theta, theta_dot), strict=True))
            | {"pole_angle_degrees": math.degrees(theta)},
            "margins_at_end": {
                "cart_position_m": physics.x_threshold - abs(x),
                "pole_angle_degrees": math.degrees(physics.theta_threshold_radians - abs(theta)),
            },
        }
        return summary

    def feedback(self, results: Sequence[EpisodeResult]) -> Feedback:
        base = super().feedback(results)
        causes = Counter(r.summary.get("termination_cause", "unknown") for r in results)
        reached = causes.get("time_limit", 0)
        content = dict(base.content) | {
            "termination_causes": dict(causes),
            "time_limit_rate": reached / len(results) if results else 0.0,
        }
        return Feedback(score=base.score, content=content)
