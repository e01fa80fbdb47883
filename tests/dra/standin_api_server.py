"""A stand-in Kubernetes API server for the DRA driver's tests: plain HTTP on 127.0.0.1, serving
the REST paths the official client uses for what the driver reads and writes (a Node, cluster
ResourceSlices, namespaced ResourceClaims, all resource.k8s.io/v1; /version, as `version` says), with resourceVersions,
conflicts and 404s as the real one gives them. It records every slice put, serves the claims a
test adds, and can be taken away (`available` cleared: it answers 503, as a server restarting).

Quantities are kept as they were sent; the real server writes them back in canonical form,
which the driver writes them in already (dra/resource_slice.py).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RESOURCE = "/apis/resource.k8s.io/v1"
SLICES = re.compile(rf"{RESOURCE}/resourceslices(?:/(?P<name>[^/?]+))?")
CLAIM = re.compile(rf"{RESOURCE}/namespaces/(?P<namespace>[^/]+)/resourceclaims/(?P<name>[^/?]+)")
NODE = re.compile(r"/api/v1/nodes/(?P<name>[^/?]+)")
VERSION = "/version"


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


class StandInApiServer:
    def __init__(self, nodes: dict[str, str] | None = None):
        self.nodes = nodes or {}  # name -> UID
        self.slices: dict[str, dict] = {}
        self.puts: list[dict] = []  # every slice created or replaced, in order
        self.claims: dict[tuple[str, str], dict] = {}
        self.requests: list[str] = []  # "METHOD path"
        self.available = threading.Event()
        self.available.set()
        # Device fields it drops, as an API server whose DRAConsumableCapacity gate is off does.
        self.drops: tuple[str, ...] = ()
        self.version = {"major": "1", "minor": "37", "gitVersion": "v1.37.0"}  # /version's answer
        self._version = 0
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file that names this server (no credentials: it asks for none)."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "standin",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "standin", "user": {}}],
            "contexts": [{"name": "standin",
                          "context": {"cluster": "standin", "user": "standin"}}]}))
        return path

    def add_claim(self, claim: dict) -> None:
        metadata = claim["metadata"]
        self.claims[metadata["namespace"], metadata["name"]] = copy.deepcopy(claim)

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    # ----- the REST side

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _answer(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if not self.available.is_set():
            return 503, _status(503, "ServiceUnavailable", "the server is restarting")
        if method == "GET" and path.rstrip("/") == VERSION:  # the client asks /version/
            return 200, self.version
        if method == "GET" and (match := NODE.fullmatch(path)):
            uid = self.nodes.get(match["name"])
            if uid is None:
                return 404, _status(404, "NotFound", f'nodes "{match["name"]}" not found')
            return 200, {"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": match["name"], "uid": uid}}
        if method == "GET" and (match := CLAIM.fullmatch(path)):
            claim = self.claims.get((match["namespace"], match["name"]))
            if claim is None:
                return 404, _status(404, "NotFound",
                                    f'resourceclaims.resource.k8s.io "{match["name"]}" not found')
            return 200, claim
        match = SLICES.fullmatch(path)
        if match is None:
            return 404, _status(404, "NotFound", f"the stand-in serves no {method} {path}")
        name = match["name"]
        if method == "GET" and name:
            if name not in self.slices:
                return 404, _status(404, "NotFound",
                                    f'resourceslices.resource.k8s.io "{name}" not found')
            return 200, self.slices[name]
        if method == "POST" and not name:
            name = body["metadata"]["name"]
            if name in self.slices:
                return 409, _status(409, "AlreadyExists", f"{name} already exists")
            return 201, self._keep(name, body)
        if method == "PUT" and name:
            current = self.slices.get(name)
            if current is None:
                return 404, _status(404, "NotFound", f"{name} not found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            return 200, self._keep(name, body)
        return 405, _status(405, "MethodNotAllowed", f"{method} {path}")

    def _keep(self, name: str, body: dict) -> dict:
        kept = copy.deepcopy(body)
        for device in kept["spec"].get("devices", []):
            for field in self.drops:
                device.pop(field, None)
            for capacity in device.get("capacity", {}).values():
                if "requestPolicy" in self.drops:
                    capacity.pop("requestPolicy", None)
        kept["metadata"]["resourceVersion"] = self._next_version()
        self.slices[name] = kept
        self.puts.append(copy.deepcopy(kept))
        return kept

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                path = self.path.split("?")[0]
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with server._lock:
                    server.requests.append(f"{self.command} {path}")
                    code, answer = server._answer(self.command, path, body)
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler


def allocated_claim(namespace: str, name: str, uid: str, node: str, device: str,
                    consumed: dict | None, request: str = "gpu", share_id: str | None = None,
                    whole: bool = False) -> dict:
    """A ResourceClaim as the kube-scheduler leaves it allocated: one device of our driver on
    `node`, consuming `consumed` (None: no consumable capacity, the device whole)."""
    result = {"request": request, "driver": "gpu.gemshare.io", "pool": node, "device": device}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    if share_id is not None:
        result["shareID"] = share_id
    devices = {"results": [result]}
    if whole:
        devices["config"] = [{"source": "FromClass", "requests": [request], "opaque": {
            "driver": "gpu.gemshare.io", "parameters": {"whole": True}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": namespace, "name": name, "uid": uid},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {
                "deviceClassName": "gpu-whole.gemshare.io" if whole else "gpu.gemshare.io"}}]}},
            "status": {"allocation": {"devices": devices}}}
