"""A decision of the policy core, naming the stage of its pipeline that made it (pipeline.py),
as the log and status say it: "granted: under its share", "dropped: quantum over"."""

from __future__ import annotations

from dataclasses import dataclass

GRANTED, DROPPED, WAITS, KEEPS = "granted", "dropped", "waits", "keeps"


@dataclass(frozen=True)
class Decision:
    stage: str  # the stage's name, as pipeline.STAGES lists it
    outcome: str  # GRANTED, DROPPED, WAITS or KEEPS
    why: str  # in the words the log and status use
    reason: str = ""  # for a drop: why its hold ends, as status and metrics name it (text.py)
    detail: str = ""  # for a drop: the log line's longer words, where they say more

    def __str__(self) -> str:
        return f"{self.outcome}: {self.why}"

    def logged(self) -> str:
        """The decision as the end of a log line."""
        return f"; {self} [{self.stage}]"
