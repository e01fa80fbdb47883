"""What the scheduler reads of the host while it runs, for the policy core: NVML's processes of
each GPU (process_watch.py), the host's memory (host_memory.py) and what the node's Kubernetes
containers hold of each GPU (node_units.py)."""
