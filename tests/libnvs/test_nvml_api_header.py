"""libnvs's own NVML declarations (libnvs/nvml/nvml_api.h) against NVIDIA's nvml.h, through the
check the libnvs build provides: the CUDA toolkit's nvml.h where it has one, else the one of the
nvidia-nvml-dev package (a test dependency); skipped where neither is installed."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from libnvs_programs import REPO

TOOLKIT = Path("/usr/local/cuda/include")


def nvml_include() -> Path | None:
    if (TOOLKIT / "nvml.h").is_file():
        return TOOLKIT
    try:
        files = metadata.files("nvidia-nvml-dev") or []
    except metadata.PackageNotFoundError:
        return None
    found = [Path(f.locate()) for f in files if f.name == "nvml.h"]
    return found[0].parent if found else None


def test_nvml_api_h_matches_nvml_h():
    include = nvml_include()
    if include is None:
        pytest.skip("no nvml.h: neither a CUDA toolkit's nor the nvidia-nvml-dev package's")
    done = subprocess.run(["make", "-s", "check-nvml-api", f"NVML_INCLUDE={include}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "check-nvml-api: ok" in output, output
