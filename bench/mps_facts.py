"""What NVIDIA MPS does to the things gemshare relies on, measured on a real GPU.

    python bench/mps_facts.py [--out FILE]       (as root, on a machine with a GPU and nvcc)

Starts its own MPS control daemon (pipe and log directories of its own, `quit` at the end,
whatever happens) and runs bench/gpu/mps_probe.cu in these scenarios, printing one JSON object:

- in_process_env: a program that sets CUDA_MPS_PIPE_DIRECTORY itself before its first CUDA call
  (as libnvs does) becomes a client of that daemon's server; start-up time with and without MPS.
- managed: managed memory filled on the GPU, moved to the host and back with prefetches, checked;
  the rates through MPS and as a plain context.
- fault_*: a program that runs kernels back to back beside one that writes to an illegal
  address: both through MPS, both plain, and the faulting one alone through MPS.
- other_user: a program of another user (uid 65534) starting while root's MPS client runs: how
  long its start waits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mps_daemon import CONTROL, Daemon

HERE = Path(__file__).resolve().parent / "gpu"
NOBODY = 65534


def build(workdir: Path) -> Path:
    probe = workdir / "mps_probe"
    subprocess.run(["nvcc", "-O2", "-o", str(probe), str(HERE / "mps_probe.cu")], check=True)
    probe.chmod(0o755)
    return probe


def probe_cmd(probe: Path, daemon: Daemon | None, *args) -> list[str]:
    through = ["--setenv", str(daemon.pipe)] if daemon else []
    return [str(probe), *through, *map(str, args)]


def run_json(command: list[str], timeout: float = 60, user: int | None = None) -> dict:
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={k: v for k, v in os.environ.items()
                                   if not k.startswith("CUDA_MPS")})
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"no answer in {timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr.strip()[-300:]}
    result["exit"] = done.returncode
    return result


def start_json(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items()
                                 if not k.startswith("CUDA_MPS")})


def finish_json(process: subprocess.Popen, timeout: float = 60) -> dict:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": err.strip()[-300:]}
    result["exit"] = process.returncode
    return result


def in_process_env(probe: Path, daemon: Daemon) -> dict:
    plain = run_json(probe_cmd(probe, None, "init", 0))
    through = start_json(probe_cmd(probe, daemon, "init", 4))
    first = json.loads(through.stdout.readline())
    listed = daemon.clients()
    rest = finish_json(through)
    return {"plain_init_s": plain.get("init_s"), "mps_init_s": first.get("init_s"),
            "client_listed": first["pid"] in listed, "clients": listed, "exit": rest["exit"]}


def managed(probe: Path, daemon: Daemon, mib: int) -> dict:
    return {"plain": run_json(probe_cmd(probe, None, "managed", mib)),
            "mps": run_json(probe_cmd(probe, daemon, "managed", mib))}


def fault(probe: Path, spinner: Daemon | None, faulter: Daemon | None, daemon: Daemon) -> dict:
    spin = start_json(probe_cmd(probe, spinner, "spin", 8))
    time.sleep(3)
    bad = run_json(probe_cmd(probe, faulter, "fault"))
    result = {"spinner": finish_json(spin), "faulter": bad}
    time.sleep(1)
    result["after"] = run_json(probe_cmd(probe, daemon, "init", 0))  # does MPS still serve?
    return result


def other_user(probe: Path, daemon: Daemon) -> dict:
    spin = start_json(probe_cmd(probe, daemon, "spin", 6))
    time.sleep(2)
    began = time.monotonic()
    theirs = run_json(probe_cmd(probe, daemon, "init", 0), timeout=40, user=NOBODY)
    waited = time.monotonic() - began
    mine = finish_json(spin)
    return {"root_spinner": mine, "other_user": theirs, "other_user_waited_s": round(waited, 2),
            "root_spin_left_s": 4}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--managed-mib", type=int, default=2048)
    options = parser.parse_args()
    if shutil.which(CONTROL) is None or shutil.which("nvcc") is None:
        print(f"mps_facts: needs {CONTROL} and nvcc on PATH", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="gs-mps-", dir="/tmp"))
    workdir.chmod(0o755)
    facts: dict = {}
    daemon = Daemon(workdir)
    try:
        probe = build(workdir)
        daemon.start()
        steps = {"in_process_env": lambda: in_process_env(probe, daemon),
                 "managed": lambda: managed(probe, daemon, options.managed_mib),
                 "fault_both_mps": lambda: fault(probe, daemon, daemon, daemon),
                 "fault_both_plain": lambda: fault(probe, None, None, daemon),
                 "fault_mps_beside_plain": lambda: fault(probe, None, daemon, daemon),
                 "other_user": lambda: other_user(probe, daemon)}
        for name, step in steps.items():
            try:
                facts[name] = step()
            except Exception as error:  # one failed step must not hide the others' facts
                facts[name] = {"error": repr(error)}
            print(name, json.dumps(facts[name]), file=sys.stderr, flush=True)
        facts["servers_at_end"] = daemon.ask("get_server_list")
    finally:
        daemon.quit()
        time.sleep(1)
        logs = {path.name: path.read_text(errors="replace")[-4000:]
                for path in daemon.log.glob("*.log")}
        facts["mps_logs"] = logs
        shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(facts, indent=1)
    if options.out:
        options.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
