"""Where a container given units of ours finds what it gets (allocation.py mounts them): names
the command's help gives too, kept apart from the kubelet's messages so that the help needs no
protobuf."""

CONTAINER_LIBRARY = "/usr/local/lib/gemshare/libnvs.so"
CONTAINER_SOCKET_DIR = "/var/run/gemshare"
SHARED_MEMORY_DIR = "/dev/shm"
