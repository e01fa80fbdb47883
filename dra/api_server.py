"""What the DRA driver asks of the API server, through the official Kubernetes client: put the
node's ResourceSlice, read a ResourceClaim, find the Node that owns the slice, its version.

Objects travel as plain JSON (`_preload_content=False`): the client's models of a release may
lack fields a newer API server sends (consumed capacity, share IDs), and a model drops what it
does not know. Every failure comes out as ApiError, which says whether the object is missing.
"""

from __future__ import annotations

import json

INSTALL = "pip install 'gemshare[dra]'"
REQUEST_TIMEOUT_S = 10.0


class ClientMissing(Exception):
    """The Kubernetes client is not installed."""


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # HTTP status, None when the server was not reached

    @property
    def not_found(self) -> bool:
        return self.status == 404


def require_client():
    try:
        import kubernetes
    except ImportError as exc:
        raise ClientMissing(f"the DRA driver needs the Kubernetes client, which is not "
                            f"installed ({exc}); {INSTALL}") from None
    return kubernetes


class ApiServer:
    """The API server of `kubeconfig`'s current context, or, without one, of the cluster this
    pod runs in (its service account)."""

    def __init__(self, kubeconfig: str | None):
        kubernetes = require_client()
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig,
                                        client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError, TypeError) as exc:
            where = kubeconfig or "the in-cluster service account (no --kubeconfig given)"
            raise ApiError(f"cannot read the API server's address and credentials from "
                           f"{where}: {exc}") from None
        self.host = configuration.host
        self._api = client.ApiClient(configuration)
        self._resource = client.ResourceV1Api(self._api)
        self._core = client.CoreV1Api(self._api)
        self._version = client.VersionApi(self._api)
        self._api_exception = kubernetes.client.exceptions.ApiException

    def _call(self, what: str, method, *args, **kwargs) -> dict:
        try:
            reply = method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
                           **kwargs)
            return json.loads(reply.data or b"{}")
        except self._api_exception as exc:
            reason = exc.reason
            try:
                reason = json.loads(exc.body).get("message", reason)
            except (TypeError, ValueError, AttributeError):
                pass
            raise ApiError(f"{what}: {exc.status} {reason}", exc.status) from None
        except Exception as exc:  # the server not reached: urllib3's errors, a refused socket
            raise ApiError(f"{what}: {self.host} not reached ({type(exc).__name__}: {exc})") \
                from None

    def version(self) -> dict:
        """/version: the server's major, minor and gitVersion."""
        return self._call("reading the API server's version", self._version.get_code)

    def node_owner(self, node: str) -> dict:
        """The ownerReference that ties an object to the Node `node`."""
        found = self._call(f"reading node {node}", self._core.read_node, node)
        return {"apiVersion": "v1", "kind": "Node", "name": node,
                "uid": found["metadata"]["uid"], "controller": True}

    def current_slice(self, name: str) -> dict | None:
        """The ResourceSlice of that name as the server keeps it; None when there is none."""
        try:
            return self._call(f"reading ResourceSlice {name}",
                              self._resource.read_resource_slice, name)
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def put_slice(self, body: dict, current: dict | None) -> dict:
        """Create the slice (`current` None), or replace `current` with it."""
        name = body["metadata"]["name"]
        if current is None:
            return self._call(f"creating ResourceSlice {name}",
                              self._resource.create_resource_slice, body)
        body = {**body, "metadata": {**body["metadata"],
                                     "resourceVersion": current["metadata"]["resourceVersion"]}}
        return self._call(f"replacing ResourceSlice {name}",
                          self._resource.replace_resource_slice, name, body)

    def claim(self, namespace: str, name: str) -> dict:
        return self._call(f"reading ResourceClaim {namespace}/{name}",
                          self._resource.read_namespaced_resource_claim, name, namespace)

