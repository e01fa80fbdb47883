"""`--metrics ADDR:PORT`: off unless asked, refused with a clear message when the address is
bad or taken, and served over HTTP to Prometheus from the running scheduler, whatever peers
send to it."""

from __future__ import annotations

import errno
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from metrics_scrape import metrics_url, scrape

from gemshare_nvs import protocol as p
from gemshare_nvs.observe.metrics_http import HEAD_SECONDS, MAX_PER_PEER, MAX_SCRAPES


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports a process listens on (IPv4 and IPv6), from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_metrics_are_off_by_default(scheduler):
    assert listening_tcp_ports(scheduler.process.pid) == set()
    assert "metrics" not in scheduler.log()


@pytest.mark.parametrize("address, words", [
    ("localhost", "expected ADDRESS:PORT such as 127.0.0.1:9410, not 'localhost'"),
    ("127.0.0.1:", "the port must be a whole number from 0 to 65535, not ''"),
    ("127.0.0.1:65536", "the port must be a whole number from 0 to 65535, not '65536'"),
    ("127.0.0.1:http", "the port must be a whole number from 0 to 65535, not 'http'"),
    (":9410", "expected ADDRESS:PORT"),
    ("::1:9410", "write an IPv6 address in brackets, as [::1]:9410"),
])
def test_a_bad_address_is_refused_before_anything_starts(short_tmp_dirs, run_scheduler,
                                                         address, words):
    path = short_tmp_dirs() / "never.sock"
    result = run_scheduler("--socket", str(path), "--metrics", address)
    assert result.returncode == 2
    assert f"Invalid value for '--metrics': {words}" in result.stderr
    assert not path.exists()


def test_a_taken_port_stops_the_start_naming_the_address(short_tmp_dirs, run_scheduler):
    path = short_tmp_dirs() / "never.sock"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_scheduler("--socket", str(path), "--config", "", "--state-dir", "",
                               "--metrics", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "another address" in result.stderr
    assert "Traceback" not in result.stderr
    assert not path.exists()


def test_an_address_of_another_machine_is_named_as_such(short_tmp_dirs, run_scheduler):
    path = short_tmp_dirs() / "never.sock"
    result = run_scheduler("--socket", str(path), "--config", "", "--state-dir", "",
                           "--metrics", "192.0.2.1:9410")  # TEST-NET-1: nobody's address
    assert result.returncode == 1
    assert "cannot serve metrics on 192.0.2.1:9410: 192.0.2.1 is not an address of this " \
           "machine; give --metrics one of its own (127.0.0.1:9410 for this machine alone, " \
           "0.0.0.0:9410 for every interface)" in result.stderr
    assert "listens there" not in result.stderr and "Traceback" not in result.stderr
    assert not path.exists()


def test_a_client_shows_in_the_metrics_while_it_is_connected(scheduler_factory):
    running = scheduler_factory(metrics="127.0.0.1:0")
    url = metrics_url(running)
    assert listening_tcp_ports(running.process.pid) == {int(url.rsplit(":", 1)[1].split("/")[0])}
    with running.connect() as client:
        client.send(p.Register(0, 0, "metricsprog"))
        registered, _ = client.recv()
        client.send(p.MemReport(0, 0, 5 << 20, 0))
        client.send(p.RequestLock(0))
        assert isinstance(client.recv()[0], p.LockGranted)
        time.sleep(0.2)
        samples = scrape(url)
        mine = {"device": 0, "process": "metricsprog"}
        assert samples.value("gemshare_clients_connected") == 1
        assert samples.only("gemshare_holders", device=0) == 1
        assert samples.only("gemshare_grants_total", device=0) == 1
        (held,) = samples.labelled("gemshare_lock_held_seconds_total", **mine).values()
        assert held >= 0.2
        assert list(samples.labelled("gemshare_allocated_bytes", **mine).values()) == [5 << 20]
    deadline = time.monotonic() + 10
    while scrape(url).value("gemshare_clients_connected") != 0:
        assert time.monotonic() < deadline, "the client never left"
        time.sleep(0.05)
    samples = scrape(url)
    assert "gemshare_lock_held_seconds_total" not in samples
    assert "gemshare_allocated_bytes" not in samples
    assert samples.only("gemshare_drops_total", device=0, reason="disconnected") == 1
    assert samples.only("gemshare_grants_total", device=0) == 1


def raw_request(url: str, data: bytes, close: bool = True) -> bytes:
    host, port = url.split("/")[2].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        answer = b""
        try:
            conn.sendall(data)
            if close:
                conn.shutdown(socket.SHUT_WR)
            while chunk := conn.recv(65536):
                answer += chunk
        # Closed by the server with some of what was sent unread: a reset, which may come while
        # this side still sends or shuts down (ENOTCONN) as well as while it reads.
        except (ConnectionResetError, BrokenPipeError):
            pass
        except OSError as error:
            if error.errno != errno.ENOTCONN:
                raise
    return answer


def test_what_peers_send_never_stops_the_metrics_or_the_scheduler(scheduler_factory):
    running = scheduler_factory(metrics="127.0.0.1:0")
    url = metrics_url(running)
    base = url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(base + "/elsewhere", timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as posted:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
    assert posted.value.code == 405
    assert raw_request(url, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw_request(url, b"GET /metrics") == b""  # closed before its headers ended
    assert raw_request(url, b"X" * 100_000) == b""  # too much before a blank line
    head = raw_request(url, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    with running.connect() as control:
        assert control.request({"op": "status"})["ok"]
    assert running.process.poll() is None


def test_slow_and_silent_peers_neither_keep_scrapes_out_nor_stay(scheduler_factory):
    running = scheduler_factory(metrics="127.0.0.1:0")
    url = metrics_url(running)
    host, port = url.split("/")[2].rsplit(":", 1)
    # More than every slot, each taken by a peer that sends a byte of its request and no more.
    slow = [socket.create_connection((host, int(port)), timeout=10)
            for _ in range(MAX_SCRAPES + MAX_PER_PEER)]
    try:
        for conn in slow:
            conn.sendall(b"G")
        for _ in range(3):  # as Prometheus would, from the same address as all of them
            assert scrape(url).value("gemshare_clients_connected") == 0
        for conn in slow:  # none is held past the deadline for a request's head
            conn.settimeout(HEAD_SECONDS + 10)
            try:
                assert conn.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for conn in slow:
            conn.close()
    assert running.process.poll() is None
