"""The kubelet's plugin registration, `pluginregistration` v1: a plugin serves Registration on a
socket in the kubelet's registry directory; the kubelet's plugin watcher finds the socket, asks
GetInfo (what kind of plugin, its name, where its own service listens) and answers with
NotifyRegistrationStatus.

Names and field numbers are those of the kubelet's pkg/apis/pluginregistration/v1/api.proto,
whose package is `pluginregistration` (not v1), checked against its copy in
tests/kubernetes/upstream.
"""

from __future__ import annotations

from functools import cache

from gemshare_nvs.kubernetes.proto_messages import MANY, Field, build

PACKAGE = "pluginregistration"
SERVICE = "Registration"
DRA_PLUGIN_TYPE = "DRAPlugin"  # pluginregistration/v1/constants.go
METHODS = {"GetInfo": ("InfoRequest", "PluginInfo"),
           "NotifyRegistrationStatus": ("RegistrationStatus", "RegistrationStatusResponse")}

MESSAGES = {
    "PluginInfo": [Field("type", 1, "string"), Field("name", 2, "string"),
                   Field("endpoint", 3, "string"), Field("supported_versions", 4, "string", MANY)],
    "RegistrationStatus": [Field("plugin_registered", 1, "bool"), Field("error", 2, "string")],
    "RegistrationStatusResponse": [],
    "InfoRequest": [],
}


@cache
def messages() -> dict[str, type]:
    """Message name -> class; ImportError without protobuf."""
    return build("gemshare/pluginregistration/v1.proto", PACKAGE, MESSAGES)


def method_path(method: str) -> str:
    return f"/{PACKAGE}.{SERVICE}/{method}"
