"""Drives the policy core with a fake clock and keeps what it sends, for the policy tests."""

from __future__ import annotations

from gemshare_nvs import protocol as p
from gemshare_nvs.core.model.actions import Close, Log, Send
from gemshare_nvs.core.policy import Policy


class Driver:
    def __init__(self, tq: int = 30, mode: p.Mode = p.Mode.ON, grace: float = 10.0,
                 max_clients: int = 1024, start: float = 100.0, reserve: int = 512 << 20,
                 nvml: dict[int, int] | None = None, limit: int | None = None,
                 nvml_uuids: dict[str, int] | None = None, answer_evictions: bool = False,
                 **shares):
        """`shares`: the Policy's rules and min_slice_ms, where a test sets them."""
        self.policy = Policy(tq, mode, grace, max_clients, reserve_bytes=reserve,
                             nvml_capacity=nvml, capacity_limit=limit, nvml_uuids=nvml_uuids,
                             **shares)
        self.now = start
        self.sent: list[tuple[int, object]] = []
        self.closed: list[Close] = []
        self.logs: list[Log] = []
        self.hints: list[tuple[int, p.IdleHint]] = []  # kept apart: most tests look elsewhere
        # IDLE_HINTs to clients that hold no device: only their move out counts (prepare)
        self.prepares: list[tuple[int, p.IdleHint]] = []
        # As libnvs does when it does not hold the lock: move at once and say so.
        self.answer_evictions = answer_evictions

    def _take(self, actions: list) -> list:
        for action in actions:
            if isinstance(action, Send) and isinstance(action.message, p.IdleHint):
                holds = any(action.client in dev.holders
                            for dev in self.policy.devices.values())
                (self.hints if holds else self.prepares).append((action.client, action.message))
            elif isinstance(action, Send) and isinstance(action.message, p.Evict) and \
                    self.answer_evictions:
                self.moved(action.client, action.message.bytes, seconds=0,
                           device=action.message.device)
            elif isinstance(action, Send):
                self.sent.append((action.client, action.message))
            elif isinstance(action, Close):
                self.closed.append(action)
            else:
                self.logs.append(action)
        return actions

    def register(self, cid: int, name: str = "proc", device: int = 0, pid: int | None = None,
                 uid: int = 1000, wall: float = 1_700_000_000.0, label: str = "",
                 flags: int = 0, node=None, pod: tuple[str, str] | None = None) -> list:
        """`node`: the NodeIdentity the node gives; `pod`: the (namespace, pod) the program
        says, ("ns", "pod") by default for a named one."""
        namespace, pod_name = pod if pod is not None else ("ns", "pod") if name else ("", "")
        message = p.Register(device, flags, name, namespace, pod_name, label)
        return self._take(self.policy.register(cid, pid or 4000 + cid, uid, uid, message,
                                               self.now, wall, node=node))

    def request(self, cid: int, device: int = 0, keeping: bool = False) -> list:
        return self._take(self.policy.request_lock(cid, device, self.now, keeping=keeping))

    def release(self, cid: int, device: int = 0,
                reason: int = p.ReleaseReason.DROPPED, idle_us: int = 0) -> list:
        return self._take(self.policy.lock_released(cid, device, reason, self.now, idle_us))

    def disconnect(self, cid: int) -> list:
        return self._take(self.policy.disconnect(cid, self.now))

    def configure(self, tq: int | None = None, mode: p.Mode | None = None) -> list:
        return self._take(self.policy.configure(self.now, tq=tq, mode=mode))

    def uuid(self, cid: int, uuid: str, device: int = 0) -> list:
        return self._take(self.policy.device_uuid(cid, device, uuid, self.now))

    def mem(self, cid: int, allocated: int, device: int = 0, total: int = 0) -> list:
        return self._take(self.policy.mem_report(cid, device, allocated, total, self.now))

    def moved(self, cid: int, size: int, to_host: bool = True, done: bool = True,
              seconds: float = 1.0, failed: bool = False, device: int = 0) -> list:
        flags = (p.MOVED_TO_HOST if to_host else 0) | (p.MOVED_DONE if done else 0) | \
            (p.MOVED_FAILED if failed else 0)
        return self._take(self.policy.moved(cid, device, flags, size, round(seconds * 1e6),
                                            self.now))

    def gap_seen(self, cid: int, seconds: float, device: int = 0) -> None:
        """The client's gaps on the device are known: one of `seconds` was seen (three times, so
        that it is its usual gap and the one a loan is weighed against), as if it had let go
        early and asked again that long after its work, and its last work ended now; nothing
        else changes."""
        for _ in range(3):
            self.policy.gaps.released_idle(cid, device, self.now - seconds, 0.0)
            self.policy.gaps.requested(cid, device, self.now)
        self.policy.gaps.hold_ended(cid, device, self.now)

    def advance(self, seconds: float) -> list:
        """Move the clock and fire the timers, as the shell's timer task does."""
        self.now += seconds
        return self._take(self.policy.tick(self.now))

    def advance_to_deadline(self) -> list:
        deadline = self.policy.next_deadline()
        assert deadline is not None, "no timer is running"
        self.now = deadline
        return self._take(self.policy.tick(self.now))

    def take_sent(self, cid: int | None = None) -> list:
        """Messages sent (to `cid`, or to anyone as (cid, message)) since the last call."""
        if cid is None:
            result, self.sent = self.sent, []
            return result
        result = [m for c, m in self.sent if c == cid]
        self.sent = [(c, m) for c, m in self.sent if c != cid]
        return result

    def logged(self, since: int, prefix: str) -> list[str]:
        """The log lines from the `since`-th on that begin with `prefix`."""
        return [log.text for log in self.logs[since:] if log.text.startswith(prefix)]

    def holders(self, device: int = 0) -> list[int]:
        dev = self.policy.devices.get(device)
        return list(dev.holders) if dev else []

    def waiters(self, device: int = 0) -> list[int]:
        dev = self.policy.devices.get(device)
        return list(dev.waiters) if dev else []
