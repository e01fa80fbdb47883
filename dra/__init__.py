"""gemshare's Dynamic Resource Allocation driver for Kubernetes (`gemshare-dra-plugin`)."""
