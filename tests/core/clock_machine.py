"""The fake clock's rule, shared by the policy state machines.

A machine that mixes this in has `policy`, `now`, `apply(actions)` and `model_deadline()` (when
its model says the next timer is due); every step checks the core agrees, then moves time.
"""

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule


class ClockMachine(RuleBasedStateMachine):
    @rule(step=st.integers(1, 5000), to_deadline=st.booleans())
    def advance(self, step, to_deadline):
        deadline = self.policy.next_deadline()
        assert deadline == self.model_deadline(), "the core's timer disagrees with the rules"
        if deadline is not None and (to_deadline or self.now + step / 1000 >= deadline):
            self.now = deadline
        else:
            self.now += step / 1000
        self.apply(self.policy.tick(self.now))
