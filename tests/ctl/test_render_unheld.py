"""`gemsharectl status` says, per GPU, what the node's containers hold in units and what that
leaves to containers without units of a kind (ctl/render.py's unheld_lines)."""

from __future__ import annotations

from gemshare_ctl.render import unheld_lines

GIB = 1 << 30


def test_each_gpu_with_units_held_is_one_line_and_none_held_is_no_line():
    lines = unheld_lines({"unheld": [
        {"gpu_uuid": "GPU-1", "device": 0, "containers": 2, "memory_held_bytes": 60 * GIB,
         "memory_unheld_bytes": 20 * GIB, "compute_held_units": 90, "compute_unheld_units": 10},
        {"gpu_uuid": "GPU-2", "device": None, "containers": 1, "memory_held_bytes": 8 * GIB,
         "memory_unheld_bytes": None, "compute_held_units": 0, "compute_unheld_units": None},
    ]}).plain.splitlines()
    assert lines[0].startswith("Units on device 0 (GPU-1), 2 containers: memory 60.0 GiB held, "
                               "20.0 GiB left; compute 90 held, 10 left")
    assert lines[1].startswith("Units on GPU (GPU-2), 1 containers: memory 8.0 GiB held, GPU "
                               "memory unknown (")
    assert unheld_lines({"unheld": []}) is None and unheld_lines({}) is None
