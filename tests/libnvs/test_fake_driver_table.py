"""The fake driver's entry-point table against the facts it copies: cuda.h / cudaTypedefs.h where
the CUDA toolkit is installed, and libnvs's hook table (libnvs/cuda/hooks.def) everywhere."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from libnvs_programs import FAKECUDA, REPO

CUDA_INCLUDE = Path(os.environ.get("CUDA_INCLUDE", "/usr/local/cuda/include"))
PER_THREAD_SINCE = 7000
PER_THREAD_FLAGS = 2

FAKE_ENTRY = re.compile(r"^FAKE_ENTRY\((\w+),\s*(\d+),\s*(\w+),\s*(NONE|PTSZ|PTDS),", re.M)
GS_ENTRY = re.compile(r"^GS_ENTRY\(\s*(\w+),\s*(\w+),\s*(\w+),\s*(\d+),\s*(NONE|PTSZ|PTDS),",
                      re.M)


def fake_entries():
    text = (REPO / "tests/fakecuda/fake_entry_points.def").read_text()
    return [(lookup, int(since), symbol, twin) for lookup, since, symbol, twin
            in FAKE_ENTRY.findall(text)]


def hook_entries():
    text = (REPO / "libnvs/cuda/hooks.def").read_text()
    return [(kind, symbol, lookup, int(since), twin) for kind, symbol, lookup, since, twin
            in GS_ENTRY.findall(text)]


def twin_name(symbol: str, twin: str) -> str | None:
    return None if twin == "NONE" else f"{symbol}_{twin.lower()}"


@pytest.fixture(scope="module")
def typedefs():
    path = CUDA_INCLUDE / "cudaTypedefs.h"
    if not path.exists() or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip(f"no CUDA toolkit headers in {CUDA_INCLUDE} (set CUDA_INCLUDE)")
    versions: dict[tuple[str, str], set[int]] = {}
    for name, version, suffix in re.findall(r"PFN_(\w+?)_v(\d+)(_ptsz|_ptds)?\)",
                                            path.read_text()):
        versions.setdefault((name, suffix), set()).add(int(version))
    return versions, (CUDA_INCLUDE / "cuda.h").read_text()


@pytest.fixture(scope="module")
def driver(built):
    return ctypes.CDLL(str(FAKECUDA / "libcuda.so.1"))


def resolve(driver, lookup: str, version: int, flags: int) -> int | None:
    pfn = ctypes.c_void_p()
    status = ctypes.c_int(-1)
    result = driver.cuGetProcAddress_v2(lookup.encode(), ctypes.byref(pfn), version,
                                        ctypes.c_uint64(flags), ctypes.byref(status))
    return pfn.value if result == 0 and status.value == 0 else None


def address(driver, symbol: str) -> int:
    return ctypes.cast(getattr(driver, symbol), ctypes.c_void_p).value


def test_every_fake_entry_is_a_real_driver_version(typedefs):
    versions, cuda_h = typedefs
    wrong = []
    for lookup, since, symbol, twin in fake_entries():
        if since not in versions.get((lookup, ""), set()):
            wrong.append(f"no PFN_{lookup}_v{since} in cudaTypedefs.h")
        if not re.search(rf"\b{symbol}\b", cuda_h):
            wrong.append(f"cuda.h never names {symbol}")
        if twin != "NONE":
            twin_since = max(since, PER_THREAD_SINCE)
            if twin_since not in versions.get((lookup, "_" + twin.lower()), set()):
                wrong.append(f"no PFN_{lookup}_v{twin_since}_{twin.lower()} in cudaTypedefs.h")
    assert not wrong, "\n".join(wrong)


SIGNATURE_CHECK = """
#define __CUDA_API_VERSION_INTERNAL /* cuda.h then declares every exported name */
#include <cuda.h>
#define TWIN_NONE(symbol, params)
#define TWIN_PTSZ(symbol, params) CUresult CUDAAPI symbol##_ptsz params;
#define TWIN_PTDS(symbol, params) CUresult CUDAAPI symbol##_ptds params;
#define FAKE_ENTRY(lookup, since, symbol, twin, params) \\
    CUresult CUDAAPI symbol params; TWIN_##twin(symbol, params)
#include "fake_entry_points.def"
"""


def test_the_fake_declares_what_cuda_h_declares(typedefs, tmp_path):
    """Redeclaring each entry point after cuda.h fails to compile on any parameter mismatch."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = tmp_path / "fake_signatures.c"
    source.write_text(SIGNATURE_CHECK)
    done = subprocess.run([compiler, "-std=gnu11", "-fsyntax-only", "-Werror",
                           f"-I{CUDA_INCLUDE}", f"-I{REPO / 'tests/fakecuda'}", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_fake_resolves_the_newest_version_cuda_knows(typedefs):
    """An older ABI handed out for a newer request would be a driver bug the fake must not have."""
    versions, _ = typedefs
    newest = {}
    for lookup, since, _, _ in fake_entries():
        newest[lookup] = max(since, newest.get(lookup, 0))
    stale = [f"{lookup}: cudaTypedefs.h has v{max(versions[(lookup, '')])}, the fake v{since}"
             for lookup, since in newest.items()
             if max(v for v in versions.get((lookup, ""), {0}) if v <= 13000) != since]
    assert not stale, "\n".join(stale)


def test_the_fake_exports_every_entry_point_libnvs_hooks(driver):
    missing = []
    for _, symbol, _, _, twin in hook_entries():
        for name in filter(None, (symbol, twin_name(symbol, twin))):
            if not hasattr(driver, name):
                missing.append(name)
    assert not missing, f"the fake driver lacks: {missing}"


def test_the_fake_resolves_libnvs_hooks_as_the_hook_table_says(driver):
    wrong = []
    for _, symbol, lookup, since, twin in hook_entries():
        version = max(since, PER_THREAD_SINCE)
        plain = resolve(driver, lookup, version, 0)
        if plain != address(driver, symbol):
            wrong.append(f"{lookup} v{version} flags 0 is not {symbol}")
        expected = twin_name(symbol, twin) or symbol
        if resolve(driver, lookup, version, PER_THREAD_FLAGS) != address(driver, expected):
            wrong.append(f"{lookup} v{version} flags 2 is not {expected}")
    assert not wrong, "\n".join(wrong)
