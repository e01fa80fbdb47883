"""A Trio scheduler server running inside a test's own nursery (the `inprocess_scheduler` fixture).

It serves a real Unix socket, so the tests exercise the same code paths as the daemon without
starting a process; its log goes through the `gemshare.scheduler` logger (use caplog).
"""

from __future__ import annotations

import trio

from gemshare_nvs.service.server import Server


class InProcess:
    def __init__(self, server: Server, listening):
        self.server = server
        self.listening = listening
        self.socket = listening.path
        self.scope = trio.CancelScope()
        self.finished = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.scope:
                await self.server.serve(task_status=task_status)
        finally:
            self.finished.set()

    async def stop(self) -> None:
        self.scope.cancel()
        with trio.fail_after(10):
            await self.finished.wait()
        self.listening.close()
