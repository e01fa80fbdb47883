"""Fixtures for the device plugin's tests.

`fake_nvml` is the stand-in pynvml of tests/fake_nvml, loaded as a module of its own
and configured through the environment (FAKE_NVML_GPUS, FAKE_NVML_FAIL_AT, ...), with TWO_GPUS
set. `plugin_factory(directory, **options)` runs a lifecycle.Plugin of the three resources in a
thread of this process on that socket directory, with that NVML, short intervals and HOST_PATHS
(unless `paths` says); every plugin started is stopped at teardown. `plugin_process(*args,
**env)` runs the command itself, logging to a file, and kills what is still running at teardown.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from plugin_helpers import FAKE_NVML_DIR, GIB, HOST_PATHS, REPO, TWO_GPUS, plugin_environment

from gemshare_plugin.allocation import Paths
from gemshare_plugin.gpu_health import GpuHealth
from gemshare_plugin.lifecycle import Plugin
from gemshare_plugin.resources import family

STOP_S = 10.0


@pytest.fixture
def fake_nvml(monkeypatch):
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_NVML_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("FAKE_NVML_GPUS", json.dumps(TWO_GPUS))
    for name in ("FAKE_NVML_FAIL_AT", "FAKE_NVML_INIT_ERROR", "FAKE_NVML_BYTES"):
        monkeypatch.delenv(name, raising=False)
    return module


class RunningPlugin:
    def __init__(self, plugin: Plugin):
        self.plugin = plugin
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=plugin.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(STOP_S)
        assert not self.thread.is_alive(), "the plugin did not stop"


@pytest.fixture
def plugin_factory(fake_nvml):
    started: list[RunningPlugin] = []

    def start(directory, slots: int = 3, resource_name: str = "gemshare.io/gpu",
              paths: Paths = HOST_PATHS, memory_unit: int = GIB, memory_overcommit: float = 1.0,
              **options) -> RunningPlugin:
        options = {"poll_interval": 0.05, "health_interval": 0.05, "register_timeout": 2.0,
                   "max_backoff": 0.2, **options}
        plugin = Plugin(str(directory),
                        family(resource_name, slots, memory_unit, memory_overcommit), paths,
                        health=GpuHealth(fake_nvml), **options)
        started.append(RunningPlugin(plugin))
        return started[-1]

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def kubelet_dir(short_tmp_dirs):
    """A short directory for the sockets (Unix socket paths are limited to 107 bytes)."""
    return short_tmp_dirs()


@pytest.fixture
def plugin_process(short_tmp_dirs):
    started: list[subprocess.Popen] = []

    def start(*args: str, **env: str) -> tuple[subprocess.Popen, Path]:
        """gemshare-device-plugin with `args`, its output in the returned log file."""
        log_path = short_tmp_dirs() / "plugin.log"
        with open(log_path, "wb") as log_file:
            started.append(subprocess.Popen(
                [sys.executable, "-m", "gemshare_plugin", *args], stdout=log_file,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                env=plugin_environment(**env)))
        return started[-1], log_path

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
