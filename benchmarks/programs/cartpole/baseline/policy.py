"""CartPole baseline: a hand-tuned linear controller on the pole and cart state.

Push toward the side the pole is falling, with small corrections that keep the
cart near the centre. Improve it by tuning the gains, or replace it entirely.
"""

GAINS = (0.1, 0.5, 10.0, 2.0)  # cart position, cart velocity, pole angle, pole angular velocity


class LinearPolicy:
    def __init__(self, gains):
        self.gains = gains

    def act(self, observation):
        push = sum(g * float(v) for g, v in zip(self.gains, observation))
        return 1 if push > 0 else 0


def make_policy(context):
    return LinearPolicy(GAINS)
