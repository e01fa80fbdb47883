"""`inprocess_scheduler`: the Trio server running inside the test's own nursery.

It serves a real Unix socket, so the tests exercise the same code paths as the daemon without
starting a process; its log goes through the `gemshare.scheduler` logger (use caplog).
"""

from __future__ import annotations

import pytest
import trio

from gemshare_nvs.listener import open_listener
from gemshare_nvs.server import Server
from gemshare_nvs.settings import Settings


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


@pytest.fixture
async def inprocess_scheduler(nursery, short_tmp_dirs):
    started: list[InProcess] = []

    async def start(**options) -> InProcess:
        settings = Settings(socket=short_tmp_dirs() / "scheduler.sock", **options)
        listening = open_listener(settings.socket)
        running = InProcess(Server(settings, listening.sock), listening)
        started.append(running)
        await nursery.start(running.run)
        return running

    yield start
    for running in started:
        await running.stop()
