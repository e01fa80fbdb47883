"""What the scheduler reads of the host while it runs, for the policy core: NVML's processes of
each GPU (process_watch.py) and the host's memory (host_memory.py)."""
