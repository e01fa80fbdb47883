"""The Trio shell around the policy core: it moves bytes and time, and decides nothing.

Every connection is served by one task (reading) and one child task (writing from a queue
bounded in frames and in bytes), all inside the server's nursery; a frame with nothing queued
ahead of it is written at once, and what the socket does not take goes to the queue. Policy
events go in with `trio.current_time()`; the actions that come out are carried out
synchronously, so the policy's view and the queues never disagree. One timer task sleeps until
the policy's next deadline, and one watches the config file (configuration.py decides what a
new file changes).
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field

import trio

from .. import protocol as p
from ..config import control
from ..config import file as config_file
from ..config.configuration import Configuration
from ..config.names import names_of
from ..config.parsing import ConfigError
from ..config.runtime_state import as_json
from ..config.settings import Settings
from ..core.model.actions import Close, Log, Send
from ..core.model.container import NAMED_BY_NODE, NAMED_BY_PROGRAM, NOT_NAMED_YET, NodeIdentity
from ..core.policy import Policy
from ..kubernetes.cgroups import container_of
from ..kubernetes.lookups import (
    REGISTER_WAIT_S,
    NodeLookups,
    node_lookups,
    who_is,
)
from ..observe.status import build_status, encoded_size, fit_status
from ..version import version
from ..wire.conversation import CLIENT, CONTROL, next_kind
from ..wire.peer import Credentials, peer_credentials, peer_ids
from . import fair_slots, log_rate
from .connect_rate import ROOT, ConnectRate
from .gpus import Gpus
from .readings.host_memory import watch_host_memory
from .readings.node_units import watch_node_units
from .mps import MpsControl
from .permissions import may_control, pod_control_refusal
from .readings.process_watch import UVM_MAPPING, UVM_MAPPING_VARIABLE, ProcessWatch

log = logging.getLogger("gemshare.scheduler")

FLUSH_SECONDS = 1.0  # how long a closing connection may take to receive its last frames
ACCEPT_BACKOFF = 0.1  # after running out of file descriptors
# Connections taken from the listen queue in one turn of the accept loop, before the other tasks
# (a grant, a release) get theirs: few enough that a flood of connections adds well under a
# millisecond to a handoff (bench/abuse_flood.py measured 64 against 16).
ACCEPT_BATCH = 16
CONNECT_REPORT_SECONDS = 60.0  # how often the connections closed over a user's rate are counted
# Refusals being written at once; past it a connection over the limits is closed unanswered, so
# that a flood of connections cannot take the descriptors kept for other work.
MAX_REFUSING = 8
# The room a status object has in its reply, {"ok":true,"status":STATUS}, within one frame.
STATUS_ROOM = p.MAX_PAYLOAD - (encoded_size({"ok": True, "status": {}}) - encoded_size({}))
CONFIG_POLL_SECONDS = 1.0  # how soon an edited config file applies, without inotify
UNSET = object()  # an argument not given


@dataclass
class Conn:
    id: int
    stream: trio.SocketStream
    peer: Credentials
    outbox: trio.MemorySendChannel
    inbox: trio.MemoryReceiveChannel
    decoder: p.FrameDecoder
    kind: str | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # the whole connection
    reader: trio.CancelScope = field(default_factory=trio.CancelScope)  # reading only
    ending: str | None = None  # why it is being closed, once it is
    forgotten: bool = False  # the policy has been told it is gone
    queued: int = 0  # frames handed to the writer task and not yet written
    queued_bytes: int = 0  # and their bytes
    user: str = ""  # the peer's user and group names, as config rules match them
    group: str = ""
    # Whether the peer may change settings (root or the control group), and why not; looked
    # up when it becomes a control connection.
    privileged: bool = False
    unprivileged_why: str = ""
    node: NodeIdentity | None = None  # its program's container, as the node said at REGISTER
    named_by: str = NAMED_BY_PROGRAM  # and who named it (model/container.py)
    view_only: bool = False  # a REG_VIEW_ONLY registration: slots of its own (fair_slots.py)
    nursery: trio.Nursery | None = None  # its writer's, and its lookup's while not named
    naming: trio.CancelScope = field(default_factory=trio.CancelScope)  # that lookup

    @property
    def pid(self) -> int:
        return self.peer.pid

    @property
    def uid(self) -> int:
        return self.peer.uid

    @property
    def gid(self) -> int:
        return self.peer.gid

    @property
    def in_container(self) -> bool:
        """Whether the peer runs in a container, so that its uid and gid are the container's,
        not the node's: its cgroup names a pod (known from its REGISTER on), or it is in
        another pid namespace (SO_PEERCRED's pid 0)."""
        return self.pid == 0 or self.named_by in (NAMED_BY_NODE, NOT_NAMED_YET)

    @property
    def node_root(self) -> bool:
        """The node's root: uid 0 outside any container. Root in a container is whatever uid
        its pod spec asked for, and is held to the caps and log budget of any user."""
        return self.uid == ROOT and not self.in_container

    @property
    def peer_key(self) -> str:
        """Whose budget of log lines this connection's doings spend (log_rate.py): its uid's,
        since a user may open any number of connections. The node's root and the control group
        (once known: at REGISTER or CONTROL) have a budget of their own, ten times as large:
        the administrator's own programs are rarely held back, and a busy pair of them cannot
        write the log full (one wrote 200 KB a second)."""
        if self.node_root or (self.privileged and not self.in_container):
            return log_rate.privileged(peer_key(self.uid))
        return peer_key(self.uid) + (" in a container" if self.uid == ROOT else "")

    def __str__(self) -> str:
        return f"connection {self.id} (pid {self.pid}, uid {self.uid})"


def peer_key(uid: int) -> str:
    return f"uid {uid}"


def caused_by(key: str | None) -> dict:
    """logging's `extra` for a line that `key`'s doings caused: it spends that peer's budget."""
    return {} if key is None else {"peer": key}


# Each client message as the policy event it is: (policy, connection, message, now) -> actions.
# CONTROL is the one message the shell answers itself.
POLICY_EVENTS = {
    p.Register: lambda policy, conn, message, now: policy.register(
        conn.id, conn.pid, conn.uid, conn.gid, message, now, time.time(), user=conn.user,
        group=conn.group, node=conn.node, named_by=conn.named_by),
    p.RequestLock: lambda policy, conn, message, now: policy.request_lock(
        conn.id, message.device, now, keeping=bool(message.flags & p.REQUEST_KEEPING)),
    p.LockReleased: lambda policy, conn, message, now: policy.lock_released(
        conn.id, message.device, message.reason, now, idle_us=message.idle_us),
    p.MemReport: lambda policy, conn, message, now: policy.mem_report(
        conn.id, message.device, message.allocated_bytes, message.device_total_bytes, now),
    p.DeviceUuid: lambda policy, conn, message, now: policy.device_uuid(
        conn.id, message.device, message.gpu_uuid, now),
    p.Moved: lambda policy, conn, message, now: policy.moved(
        conn.id, message.device, message.flags, message.bytes, message.elapsed_us, now),
    p.Gang: lambda policy, conn, message, now: policy.gang(conn.id, message, now),
}


class Server:
    def __init__(self, settings: Settings, listener: socket.socket, gpus: Gpus | None = None,
                 configuration: Configuration | None = None, node: NodeLookups | None = UNSET):
        """`configuration` is what Configuration.start(settings) gives, and `node` what
        node_lookups gives for its sockets; each made here when not given (which reads the
        files they name)."""
        self.settings = settings
        self.gpus = gpus
        self.configuration = configuration or Configuration.start(settings)
        start = self.configuration.started
        self.node = node_lookups(start["cri_socket"], start["pod_resources_socket"],
                                 settings.proc, start["node_identity_socket"]) \
            if node is UNSET else node
        self.policy = Policy(start["tq"], start["anti_thrash"], start["grace_ms"] / 1000,
                             settings.max_clients,
                             reserve_bytes=start["context_reserve_mib"] << 20,
                             nvml_capacity=gpus.memory_totals() if gpus is not None else None,
                             nvml_uuids=gpus.indices_by_uuid() if gpus is not None else None,
                             capacity_limit=None if start["capacity_mib"] is None
                             else start["capacity_mib"] << 20,
                             rules=self.configuration.rules, min_slice_ms=start["min_slice_ms"],
                             mps=start["mps"],
                             link_priors=gpus.link_priors() if gpus is not None else None,
                             compute_cap=start["compute_cap"],
                             staging_limit=None if start["staging_max_mib"] is None
                             else start["staging_max_mib"] << 20)
        self.mps = MpsControl.for_scheduler(settings.socket, start["mps_pipe_directory"]) \
            if start["mps"] else None
        # NVML's processes of each GPU, against which memory reports are checked.
        self.processes = ProcessWatch(gpus, uvm_mapping=os.environ.get(
            UVM_MAPPING_VARIABLE, UVM_MAPPING)) if gpus is not None and gpus.available else None
        self._reloading = trio.Lock()  # one reload at a time, in the order asked
        self._saving = trio.Lock()  # and one write of the kept settings
        self._listener = listener
        listener.setblocking(False)
        self.connect_rate = ConnectRate.for_clients_per_user(settings.clients_per_user())
        self._over_rate_frame = p.encode(p.Error(
            p.ErrorCode.TOO_MANY_CLIENTS,
            f"this user opens connections faster than the scheduler takes them from one user "
            f"({self.connect_rate.words()}); try again shortly"))
        self.conns: dict[int, Conn] = {}
        self._ids = itertools.count(1)
        self._timer_scope = trio.CancelScope()
        self._started = time.time()
        self._version = version()  # for the status: read once, the metadata does not change
        self.max_connections = settings.max_clients + settings.max_control + \
            settings.max_view_only
        self._refusing = 0
        # The scheduler's own pod, whose containers (kubectl exec) may send control requests.
        own = container_of(os.getpid(), settings.proc)
        self._own_pod_uid = own.pod_uid if own is not None else None

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; `started` once accepting."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._timer)
                nursery.start_soon(self._report_closed_connections)
                if self.node is not None:
                    await nursery.start(self.node.serve)
                    if self.node.lists_units:
                        nursery.start_soon(watch_node_units, self.node.held_units,
                                           self._node_units)
                if self.mps is not None:
                    # Beside serving, never before it: until the daemon answers, programs run as
                    # plain contexts under the lock, as they do while it is down.
                    nursery.start_soon(self.mps.watch,
                                       lambda pipe: self._apply(self.policy.set_mps(pipe)))
                if self.settings.config is not None:
                    nursery.start_soon(self._watch_config)
                if self.processes is not None:
                    nursery.start_soon(self.processes.watch, self._gpu_processes)
                nursery.start_soon(watch_host_memory, self._host_memory)
                task_status.started(self)
                await self._accept_loop(nursery)
        finally:
            self._say_closed_connections()

    # ----- accepting --------------------------------------------------------------------

    async def _accept_loop(self, nursery: trio.Nursery) -> None:
        """Take connections as fast as they come: a batch at a time, each closed at once when
        its user is over its rate of new connections (connect_rate.py)."""
        while True:
            await trio.lowlevel.wait_readable(self._listener)
            for _ in range(ACCEPT_BATCH):
                try:
                    sock, _ = self._listener.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.warning("accept failed (%s); retrying shortly", exc.strerror,
                                    extra=caused_by("the listening socket"))
                        await trio.sleep(ACCEPT_BACKOFF)
                        break
                    if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                        continue
                    raise
                self._take(nursery, sock)

    def _take(self, nursery: trio.Nursery, sock: socket.socket) -> None:
        """One accepted connection: closed at once, refused, or served."""
        try:
            ids = peer_ids(sock)
            if not self.connect_rate.admit(ids[1]):
                self._close_over_rate(sock, ids[1])
                return
            peer = peer_credentials(sock, ids)
        except OSError as exc:
            log.warning("a connection dropped: no peer credentials (%s)", exc.strerror,
                        extra=caused_by("connections without credentials"))
            sock.close()
            return
        cid = next(self._ids)
        conn_sock = trio.socket.from_stdlib_socket(sock)
        if len(self.conns) >= self.max_connections:
            self._start_refusal(nursery, conn_sock, cid, "connections past the limit",
                                f"the scheduler already has {len(self.conns)} connections; "
                                "try again later or raise --max-clients")
        else:
            nursery.start_soon(self._serve_connection, conn_sock, cid, peer)

    def _close_over_rate(self, sock: socket.socket, uid: int) -> None:
        """Close a connection of a user over its rate: with one ERROR frame, if it is among
        the first to be told and the socket takes it at once; nothing else."""
        if self.connect_rate.told(uid):
            try:
                sock.send(self._over_rate_frame, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
            except OSError:
                pass
        sock.close()
        if self.connect_rate.first_closed(uid):
            log.warning("uid %d opens connections faster than %s: closing the ones past that "
                        "as they come (counted every %g s)", uid, self.connect_rate.words(),
                        CONNECT_REPORT_SECONDS, extra=caused_by(peer_key(uid)))

    async def _report_closed_connections(self) -> None:
        while True:
            await trio.sleep(CONNECT_REPORT_SECONDS)
            self._say_closed_connections()

    def _say_closed_connections(self) -> None:
        # No `peer` on these lines: a count is never left out, whoever's budget is spent.
        for uid, count in self.connect_rate.report().items():
            log.warning("closed %d more connections of uid %d as they came: over its rate of "
                        "new connections (%s)", count, uid, self.connect_rate.words())

    def _start_refusal(self, nursery: trio.Nursery, sock, cid: int, peer: str,
                       why: str) -> None:
        log.warning("refused connection %d: %s", cid, why, extra=caused_by(peer))
        if self._refusing >= MAX_REFUSING:
            sock.close()
            return
        self._refusing += 1
        nursery.start_soon(self._refuse, sock, why)

    async def _refuse(self, sock, why: str) -> None:
        frame = p.encode(p.Error(p.ErrorCode.TOO_MANY_CLIENTS, why))
        try:
            with trio.move_on_after(FLUSH_SECONDS):
                await trio.SocketStream(sock).send_all(frame)
        except (trio.BrokenResourceError, OSError):
            pass
        finally:
            sock.close()
            self._refusing -= 1

    # ----- one connection -----------------------------------------------------------------

    async def _serve_connection(self, sock, cid: int, peer: Credentials) -> None:
        why = fair_slots.refusal(self.conns.values(), peer.uid, "", None,
                                 self.settings.clients_per_user())
        if len(self.conns) >= self.max_connections:  # filled since it was accepted
            why = (f"the scheduler already has {len(self.conns)} connections; try again later "
                   "or raise --max-clients")
        if why is not None:
            log.warning("refused connection %d: %s", cid, why,
                        extra=caused_by(peer_key(peer.uid)))
            self._refusing += 1
            await self._refuse(sock, why)
            return
        outbox, inbox = trio.open_memory_channel(self.settings.outgoing_queue)
        conn = Conn(cid, trio.SocketStream(sock), peer, outbox, inbox,
                    p.FrameDecoder(self.settings.max_request_bytes))
        self.conns[cid] = conn
        log.debug("%s opened", conn, extra=caused_by(conn.peer_key))
        try:
            with conn.scope:
                async with trio.open_nursery() as nursery:
                    conn.nursery = nursery
                    nursery.start_soon(self._write_loop, conn)
                    conn.reader.deadline = trio.current_time() + self.settings.first_frame_seconds
                    with conn.reader:
                        await self._read_loop(conn)
                    conn.naming.cancel()
                    if conn.ending is None:
                        self._ran_out_of_time(conn)
                    self._apply(self._forget(conn), conn.peer_key)
                    conn.outbox.close()  # the writer sends what is queued, then ends
                    conn.scope.deadline = trio.current_time() + FLUSH_SECONDS
        except Exception:
            # A bug must cost one connection, not every client's lock: log it loudly.
            log.exception("internal error serving %s; closing it", conn,
                          extra=caused_by(conn.peer_key))
            conn.ending = "internal error"
        finally:
            self._apply(self._forget(conn), conn.peer_key)
            sock.close()
            del self.conns[cid]
            log.debug("%s closed: %s", conn, conn.ending or "closed",
                      extra=caused_by(conn.peer_key))

    async def _name_later(self, conn: Conn) -> None:
        """Look the program's pod up until the node names it, then give it its terms."""
        with conn.naming:
            node = await self.node.named_later(conn.pid)
            if node is not None and not conn.ending:
                conn.node, conn.named_by = node, NAMED_BY_NODE
                self._apply(self.policy.node_named(conn.id, node, trio.current_time()),
                            conn.peer_key)

    def _ran_out_of_time(self, conn: Conn) -> None:
        """The reader's deadline passed: the first frame's, or a control connection's idle
        one."""
        if conn.kind is None:
            self._apply([Close(conn.id, "no REGISTER or CONTROL within "
                               f"{self.settings.first_frame_seconds:g} s of connecting",
                               p.ErrorCode.PROTOCOL)])
        elif conn.kind == CONTROL:
            conn.ending = f"no request within {self.settings.control_idle_seconds:g} s"
            log.info("closing %s: %s, so that it holds no control slot", conn, conn.ending,
                     extra=caused_by(conn.peer_key))

    async def _read_loop(self, conn: Conn) -> None:
        while True:
            try:
                data = await conn.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if conn.decoder.inside_frame:  # worth a line: a peer that crashed or misframes
                    log.info("%s (%s) closed by the peer inside a frame", conn,
                             conn.kind or "before its first frame",
                             extra=caused_by(conn.peer_key))
                conn.ending = conn.ending or ("closed by the peer inside a frame"
                                              if conn.decoder.inside_frame
                                              else "closed by the peer")
                return
            conn.decoder.feed(data)
            while True:
                try:
                    item = conn.decoder.next()
                    if item is None:
                        break
                    await self._dispatch(conn, *item)
                except p.ProtocolError as exc:
                    self._apply([Close(conn.id, str(exc), exc.code)], conn.peer_key)
                    return
                if conn.ending:
                    return

    async def _write_loop(self, conn: Conn) -> None:
        try:
            async for frame in conn.inbox:
                await conn.stream.send_all(frame)
                conn.queued -= 1
                conn.queued_bytes -= len(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            conn.ending = conn.ending or "the peer went away"
            conn.scope.cancel()

    # ----- messages -----------------------------------------------------------------------

    async def _dispatch(self, conn: Conn, message, seq: int) -> None:
        kind = next_kind(conn.kind, message)
        if kind == CONTROL and conn.kind is None:
            await self._admit_control(conn)
        if type(message) is p.Register:
            (conn.user, conn.group), (conn.privileged, conn.unprivileged_why) = \
                await trio.to_thread.run_sync(_who_registers, conn, self.settings.control_group)
            # Within its bound, however the node's daemons fare.
            conn.node, conn.named_by = await who_is(self.node, conn.pid, self.settings.proc)
            if conn.in_container:  # its uid and groups are its pod's: not the node's admin
                conn.privileged = False
            # Checked and counted with no wait between, so that registrations of one user at
            # once cannot pass the cap together.
            if message.flags & p.REG_VIEW_ONLY:
                why = fair_slots.view_only_refusal(self.conns.values(), conn.uid, conn.user,
                                                   self.settings.max_view_only,
                                                   self.settings.view_only_per_user(),
                                                   node_root=conn.node_root)
            else:
                why = fair_slots.refusal(self.conns.values(), conn.uid, conn.user, CLIENT,
                                         self.settings.clients_per_user(),
                                         node_root=conn.node_root)
            if why is not None:
                raise p.ProtocolError(why, p.ErrorCode.TOO_MANY_CLIENTS)
            conn.view_only = bool(message.flags & p.REG_VIEW_ONLY)
        conn.kind = kind
        conn.reader.deadline = math.inf  # it has said what it is: no first-frame deadline
        if type(message) is p.Ping:  # liveness: answered here, at once; the policy never hears
            self._apply([Send(conn.id, p.Pong(message.token))], conn.peer_key)
            return
        if type(message) is p.MemReport and self.processes is not None:
            # checked against the next list of GPU processes
            self.processes.want(conn.pid, message.allocated_bytes)
        event = POLICY_EVENTS.get(type(message))
        if event is not None:
            actions = event(self.policy, conn, message, trio.current_time())
            if type(message) is p.Register and conn.named_by == NOT_NAMED_YET and \
                    self.node is not None:
                conn.nursery.start_soon(self._name_later, conn)
        else:
            reply = await self._control(conn, message.body)
            actions = [Send(conn.id, _Reply(reply, seq))]
            # Idle from now on: a connection that asks nothing more gives its slot back.
            conn.reader.deadline = trio.current_time() + self.settings.control_idle_seconds
        self._apply(actions, conn.peer_key)

    async def _admit_control(self, conn: Conn) -> None:
        """Control connections are capped on their own, so that the replies being built and
        queued at once stay bounded whatever the client limit, and shared so that no user
        outside the control group can take them all (fair_slots.py). A process in a pod may only
        register: it is refused before it is counted, so that pods hold no control slot."""
        why = await self._from_a_pod(conn)
        if why is not None:
            raise p.ProtocolError(why, p.ErrorCode.PERMISSION)
        conn.privileged, conn.unprivileged_why = await trio.to_thread.run_sync(
            may_control, conn.uid, conn.gid, conn.peer.groups, self.settings.control_group,
            os.geteuid())
        # Checked and counted (the caller sets the kind) with no wait between.
        why = fair_slots.control_refusal(self.conns.values(), conn.uid, conn.privileged,
                                         self.settings.max_control)
        if why is not None:
            raise p.ProtocolError(why, p.ErrorCode.TOO_MANY_CLIENTS)

    async def _from_a_pod(self, conn: Conn) -> str | None:
        """Why `conn`'s process may send no control request, being in a pod; else None."""
        ref, read = None, False
        with trio.move_on_after(REGISTER_WAIT_S):
            ref = await trio.to_thread.run_sync(container_of, conn.pid, self.settings.proc,
                                                abandon_on_cancel=True)
            read = True
        return pod_control_refusal(conn.pid, ref, read, self._own_pod_uid)

    async def _control(self, conn: Conn, body: dict) -> dict:
        try:
            deadline = control.take_deadline(body)
            op = control.operation(body)
            if op == "status":
                return {"ok": True, "status": await self.status()}
            if not conn.privileged:
                raise control.Refused("permission", conn.unprivileged_why)
            control.check_deadline(deadline, op)  # checked again right before anything changes
            if op == "set":
                return await self._set(conn, control.parse_set(body), deadline)
            if op == "client":
                return self._client(conn, control.parse_client(body))
            control.parse_reload(body)
            return await self._reload_op(conn, deadline)
        except control.Refused as refusal:
            if refusal.code == "expired":
                log.warning("control %s: dropped a request its sender gave up on: %s", conn,
                            refusal, extra=caused_by(conn.peer_key))
            else:
                log.info("control %s refused: %s", conn, refusal, extra=caused_by(conn.peer_key))
            return refusal.reply()

    async def _set(self, conn: Conn, request: control.SetRequest, deadline: int | None) -> dict:
        """Write the change to the state file first, then apply it and reply with no wait
        between: a slow disk delays the change, but cannot make it happen after the sender's
        deadline, when it has reported that nothing changed."""
        async with self._saving:  # one change at a time, in the order asked
            kept = await self._keep_settings(self.configuration.runtime_after(request))
            try:
                control.check_deadline(deadline, "set")
            except control.Refused:
                if kept:  # the file goes back to what stays in force
                    await self._keep_settings(dict(self.configuration.layers.runtime))
                raise
            log.info("control %s: set %s", conn, ", ".join(
                [*(["clear"] if request.clear else []),
                 *(f"{k}={as_json(v)}" for k, v in request.values.items())]),
                extra=caused_by(conn.peer_key))
            self._apply(self.configuration.set(request, self.policy, trio.current_time()),
                        conn.peer_key)
        reply = {"ok": True, "tq": self.policy.tq, "anti_thrash": self.policy.mode.label}
        if "min_slice_ms" in request.values or request.clear:
            reply["min_slice_ms"] = self.configuration.layers.value("min_slice_ms")
        if not kept and self.settings.state_dir is not None:
            reply["temporary"] = self.configuration.state.problem
        return reply

    async def _keep_settings(self, values: dict) -> bool:
        """Write `values`, gemsharectl's settings, to the state file; whether they were kept."""
        state = self.configuration.state
        if state.directory is None:
            return False
        before = state.problem
        kept = await off_loop(state.save, values)
        if not kept and state.problem != before:
            self.configuration.warn_temporary()
        elif kept and before:
            log.info("changes made with gemsharectl are kept in %s again", state.path)
        return kept

    def _client(self, conn: Conn, request: control.ClientRequest) -> dict:
        try:
            actions = self.policy.override(request.pid, request.values, trio.current_time(),
                                           reset=request.reset)
        except LookupError as exc:
            raise control.Refused("invalid", f"{exc}; nothing was changed") from None
        log.info("control %s: client pid %d %s", conn, request.pid, ", ".join(
            [*(["reset"] if request.reset else []),
             *(f"{k}={'none' if v is None else v}" for k, v in request.values.items())]),
            extra=caused_by(conn.peer_key))
        self._apply(actions, conn.peer_key)
        return {"ok": True, "pid": request.pid, "reset": request.reset, **request.values}

    async def _reload_op(self, conn: Conn, deadline: int | None) -> dict:
        problem = await self.reload(f"asked by {conn}", deadline, conn.peer_key)
        if problem is not None:
            raise control.Refused("invalid", problem)
        return {"ok": True, "config": self.configuration.status()["config"]}

    # ----- the config file ------------------------------------------------------------------

    async def reload(self, why: str, deadline: int | None = None,
                     cause: str | None = None) -> str | None:
        """Read the config file and put it in force if it is good; else keep what is in force.
        None when it was loaded, else what kept it out. A good file read after `deadline` (a
        control request's) is not put in force: control.Refused ("expired")."""
        path = self.settings.config
        if path is None:
            log.info("reload (%s): this scheduler runs without a config file", why,
                     extra=caused_by(cause))
            return ("it runs without a config file (started with --config \"\"), so there is "
                    "nothing to read; start it with --config FILE to have one")
        async with self._reloading:
            # Taken before reading: a change made while reading is seen at the next poll.
            seen_before = self.configuration.signature
            self.configuration.signature = await off_loop(config_file.signature, path)
            try:
                config, dead = await off_loop(config_file.read_with_dead_rules, path)
            except FileNotFoundError:
                self.configuration.vanished(why)
                return f"{path} does not exist; the configuration in force stays"
            except ConfigError as error:
                self.configuration.refused(error, why)
                return f"{error}; the configuration in force stays"
            try:
                control.check_deadline(deadline, "reload")
            except control.Refused:
                self.configuration.signature = seen_before  # the watcher still takes it in
                raise
            self._apply(self.configuration.loaded(config, dead, self.policy,
                                                  trio.current_time(), why), cause)
            return None

    async def _watch_config(self) -> None:
        """Reload when the file is written, replaced, created or removed."""
        path = self.settings.config
        while True:
            await trio.sleep(CONFIG_POLL_SECONDS)
            signature = await off_loop(config_file.signature, path)
            if signature != self.configuration.signature:
                await self.reload("the file changed" if signature is not None
                                  else "the file was removed")

    async def status(self) -> dict:
        gpus = None
        if self.gpus is not None and self.gpus.available:
            gpus = await trio.to_thread.run_sync(self.gpus.describe)
        extra = {"version": self._version, "pid": os.getpid(),
                 "uptime_s": round(time.time() - self._started, 3),
                 "control_group": self.settings.control_group,
                 "connections": len(self.conns),
                 "view_only": {"registered": len(self.policy.viewers),
                               "max": self.settings.max_view_only,
                               "per_user": self.settings.view_only_per_user()},
                 **self.configuration.status(),
                 "mps": self.mps_status(), "kubernetes": self.kubernetes_status()}
        return fit_status(build_status(self.policy, trio.current_time(), time.time(),
                                       grace_ms=self.configuration.started["grace_ms"], gpus=gpus,
                                       extra=extra),
                          STATUS_ROOM)

    def readiness(self) -> str | None:
        """Why the scheduler is not ready (its metrics' /readyz), or None: a node socket it was
        given is missing, so programs in pods would go unnamed, with no budget."""
        return self.node.readiness() if self.node is not None else None

    def kubernetes_status(self) -> dict:
        """Where programs' containers are learnt from (null sockets: from nowhere), and what
        their compute units cap."""
        asked = self.node.status() if self.node is not None else \
            {"cri_socket": None, "pod_resources_socket": None, "node_identity_socket": None,
             "containers_known": 0}
        return {**asked, "compute_cap": self.configuration.started["compute_cap"]}

    def mps_status(self) -> dict:
        if self.mps is None:
            return {"enabled": False}
        user = self.policy.mps_user()
        return {**self.mps.status(), "user": user,
                "clients": sum(client.mps for client in self.policy.clients.values())}

    # ----- carrying out the policy's actions --------------------------------------------

    def _apply(self, actions, cause: str | None = None) -> None:
        """Carry out the policy's actions; `cause` is the peer whose doing they are (its
        peer_key), whose budget their log lines spend."""
        # A batch's log lines go out before its frames (which may leave at once): whoever sees a
        # grant can already read the lines that explain it.
        pending = deque()
        for action in actions:
            if isinstance(action, Log):
                self._log(action, cause)
            else:
                pending.append(action)
        while pending:
            action = pending.popleft()
            if isinstance(action, Log):  # from a connection dropped on the way
                self._log(action, cause)
                continue
            conn = self.conns.get(action.client)
            if conn is None:
                continue
            if isinstance(action, Send):
                full = self._queue(conn, action.message)
                if full:
                    log.warning("%s dropped: it does not read (%s)", conn, full,
                                extra=caused_by(conn.peer_key))
                    conn.ending = conn.ending or "outgoing queue full"
                    conn.scope.cancel()
                    pending.extend(self._forget(conn))
            elif isinstance(action, Close):
                log.warning("closing %s: %s", conn, action.reason,
                            extra=caused_by(conn.peer_key))
                if action.code is not None and conn.ending is None:
                    self._queue(conn, p.Error(action.code, action.reason))
                conn.ending = conn.ending or action.reason
                conn.reader.cancel()
                pending.extend(self._forget(conn))
        deadline = self.policy.next_deadline()
        self._timer_scope.deadline = math.inf if deadline is None else deadline

    @staticmethod
    def _log(action: Log, cause: str | None) -> None:
        level = logging.DEBUG if action.debug else logging.WARNING if action.warning else \
            logging.INFO
        log.log(level, "%s", action.text, extra=caused_by(cause))

    def _queue(self, conn: Conn, message) -> str | None:
        """How the connection's outgoing queue is full, when it is; else None."""
        if isinstance(message, _Reply):
            frame = p.encode(p.ControlReply(message.body), message.seq)
        else:
            frame = p.encode(message)
        if conn.queued == 0:
            frame = self._write_now(conn, frame)
            if not frame:
                return None
        # One frame always fits; past that, bytes are bounded as well as frames, because
        # replies may be big.
        limit = self.settings.outgoing_bytes
        if conn.queued and conn.queued_bytes + len(frame) > limit:
            return (f"outgoing queue full: {conn.queued_bytes + len(frame)} bytes unsent, "
                    f"over the {limit}-byte limit")
        try:
            conn.outbox.send_nowait(frame)
        except trio.WouldBlock:
            return f"outgoing queue full: {conn.queued} frames unsent"
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return None  # already closing; the frame has nowhere to go
        conn.queued += 1
        conn.queued_bytes += len(frame)
        return None

    @staticmethod
    def _write_now(conn: Conn, frame: bytes) -> bytes:
        """With nothing queued ahead of it, write what the socket takes at once and return the
        rest for the writer task: a grant leaves without waiting for a task switch. Errors are
        left to the writer task too, which ends the connection the one way it always does."""
        try:
            written = os.write(conn.stream.socket.fileno(), frame)
        except OSError:
            return frame
        return frame[written:]

    def _forget(self, conn: Conn) -> list:
        """Tell the policy once that this connection is gone; the actions that follow."""
        if conn.forgotten:
            return []
        conn.forgotten = True
        if conn.kind != CLIENT:
            return []
        return self.policy.disconnect(conn.id, trio.current_time())

    def _host_memory(self, available: int, total: int) -> None:
        self._apply(self.policy.host_memory(available, total, trio.current_time()))

    def _node_units(self, reading) -> None:
        self._apply(self.policy.node_units(reading, trio.current_time()))

    def _gpu_processes(self, devices: dict, read_at: float) -> None:
        # Unbudgeted: each line is said once per client, or per process using a GPU.
        self._apply(self.policy.gpu_processes(devices, trio.current_time(), read_at))

    async def _timer(self) -> None:
        while True:
            deadline = self.policy.next_deadline()
            self._timer_scope = trio.CancelScope(
                deadline=math.inf if deadline is None else deadline)
            with self._timer_scope:
                await trio.sleep_forever()
            self._apply(self.policy.tick(trio.current_time()))


def _who_registers(conn: Conn, control_group: str) -> tuple[tuple[str, str], tuple[bool, str]]:
    """A registering client's user and group names, as config rules match them, and whether it
    is root, the scheduler's own user or of the control group (only to know whether its log
    lines spend a budget: Conn.peer_key). Blocking: both look in the account databases."""
    return (names_of(conn.uid, conn.gid),
            may_control(conn.uid, conn.gid, conn.peer.groups, control_group, os.geteuid()))


async def off_loop(function, *args):
    """Blocking file work, in a thread. Left to finish alone when the scheduler stops, so that
    a file on a hung network mount cannot hold up its exit."""
    return await trio.to_thread.run_sync(function, *args, abandon_on_cancel=True)


@dataclass(frozen=True)
class _Reply:
    """A control reply; it echoes its request's sequence number."""
    body: dict
    seq: int
