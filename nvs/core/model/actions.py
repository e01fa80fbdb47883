"""What the policy core asks its I/O shell to do. The core decides; the shell only carries out."""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol import ErrorCode


@dataclass(frozen=True)
class Send:
    """Queue one message for a client connection."""
    client: int
    message: object


@dataclass(frozen=True)
class Close:
    """Close a client connection; with a code, send it an ERROR frame carrying `reason` first."""
    client: int
    reason: str
    code: ErrorCode | None = None


@dataclass(frozen=True)
class Log:
    """One log line. `debug` lines appear only with --debug or GEMSHARE_DEBUG=1; `warning`
    lines say that something did not go as the client or the operator meant."""
    text: str
    debug: bool = False
    warning: bool = False
