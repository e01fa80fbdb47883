"""Runs a Python module as `python -m` would, but stops the first time it imports a given
module until a file appears: a test can then do what it likes to the process at that point of
its start (send it signals) and let it go on.

    python import_pause.py MODULE_TO_PAUSE_AT PAUSED_FILE GO_FILE python -m MODULE ARGS...

PAUSED_FILE is created when the pause begins; the import goes on once GO_FILE exists.
"""

from __future__ import annotations

import os
import runpy
import sys
import time

WAIT_LIMIT = 60.0  # only catches a test that never says go


class PauseAt:
    def __init__(self, name: str, paused: str, go: str):
        self.name, self.paused, self.go = name, paused, go
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name == self.name and not self.done:
            self.done = True
            open(self.paused, "w").close()
            deadline = time.monotonic() + WAIT_LIMIT
            while not os.path.exists(self.go) and time.monotonic() < deadline:
                time.sleep(0.01)
        return None  # the usual finders import it


def main() -> None:
    name, paused, go, _python, dash_m, module, *args = sys.argv[1:]
    assert dash_m == "-m", sys.argv
    sys.meta_path.insert(0, PauseAt(name, paused, go))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
