"""gemshare-device-plugin: the Kubernetes device plugin that advertises gemshare's slots, GPU
memory units and compute units."""
