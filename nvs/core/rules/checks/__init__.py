"""What clients say, checked: their memory against NVML's processes, their returns against what
the scheduler saw (part of the policy core's rules)."""
