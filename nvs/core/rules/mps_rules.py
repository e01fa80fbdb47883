"""The rules of NVIDIA MPS, as part of the policy core: which programs go through the
scheduler's MPS server, decided once as each registers (the driver reads its MPS settings when
it starts, so a running program keeps what it was given).

A program goes through MPS when the control daemon answers, the anti-thrash mode lets programs
hold a GPU together (auto or off; `on` keeps one holder at a time), neither a config rule
(`mps = false`) nor its owner (GEMSHARE_MPS=0, REG_NO_MPS) keeps it out, and no program of
another user is using MPS now: an MPS server serves one user at a time, and a client of another
user would wait for every client of the current one to exit before its driver even starts.

MpsRules, beside the decision pipeline (pipeline.py), keeps whether the scheduler runs MPS and
where its daemon answers, and reads the policy's clients and mode.
"""

from __future__ import annotations

from ... import protocol as p
from ..model.actions import Log, Send
from ..model.state import Client

# Why a program runs as a plain context, as status and the log say it.
NO_DAEMON = "the MPS control daemon is not running"
# A program that went through MPS when its daemon stopped: its contexts went with the server.
DAEMON_DIED = "the MPS control daemon it went through stopped"
MODE_ON = "anti-thrash on keeps one program on a GPU at a time"
RULE = "a config rule says mps = false"
OWNER = "its owner set GEMSHARE_MPS=0"
OTHER_USER = "programs of uid {uid} use the MPS server, which serves one user at a time"


class MpsRules:
    def __init__(self, policy, enabled: bool):
        self.policy = policy
        self.enabled = enabled  # the scheduler runs MPS (--mps)
        self.pipe: str | None = None  # the MPS control daemon's pipe directory, while it runs

    def set_mps(self, pipe_directory: str | None) -> list:
        """The control daemon answers at `pipe_directory` from now on, or (None) not at all.
        Programs already running keep what they were given, but those that went through a
        daemon that stopped do so no more: its server, and their MPS contexts, went with it."""
        if pipe_directory == self.pipe:
            return []
        self.pipe = pipe_directory
        if pipe_directory is not None:
            return [Log(f"MPS: programs that may share a GPU go through {pipe_directory}")]
        ended = [client for client in self.policy.clients.values() if client.mps]
        for client in ended:
            client.mps, client.mps_why = False, DAEMON_DIED
        clients = "" if not ended else \
            f"; the {len(ended)} that went through it no longer count as its clients"
        return [Log("MPS: the control daemon is gone; programs that start now run as plain "
                    f"contexts{clients}")]

    def mps_user(self) -> int | None:
        """The uid whose programs use the MPS server now, None when none does."""
        return next((client.registration.uid for client in self.policy.clients.values()
                     if client.mps),
                    None)

    def through_mps(self, client: Client) -> list:
        """Decide whether `client`, registering now, goes through MPS; the MPS frame if so."""
        if not self.enabled:
            return []
        who = client.registration
        user = self.mps_user()
        if self.pipe is None:
            client.mps_why = NO_DAEMON
        elif self.policy.mode is p.Mode.ON:
            client.mps_why = MODE_ON
        elif not client.terms.mps:
            client.mps_why = RULE
        elif who.flags & p.REG_NO_MPS:
            client.mps_why = OWNER
        elif user is not None and user != who.uid:
            client.mps_why = OTHER_USER.format(uid=user)
        else:
            client.mps, client.mps_why = True, ""
            terms = client.terms
            return [Send(who.id, p.Mps(terms.sm_share or 0, terms.mps_priority, self.pipe))]
        return []


def mps_words(client: Client) -> str:
    """How a register line says where the program runs, when the scheduler runs MPS."""
    if client.mps:
        share, priority = client.terms.sm_share, client.terms.mps_priority
        given = [f"{share}% of the SMs" if share else "",
                 f"{priority.label} priority" if priority is not p.MpsPriority.NORMAL else ""]
        words = ", ".join(word for word in given if word)
        return ", through MPS" + (f" ({words})" if words else "")
    return f", not through MPS: {client.mps_why}" if client.mps_why else ""
