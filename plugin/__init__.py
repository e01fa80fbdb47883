"""gemshare-device-plugin: the Kubernetes device plugin that advertises gemshare slots."""
