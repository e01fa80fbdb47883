"""A CUDA 12 runtime program (libcudart.so.12 through ctypes) that keeps the GPU busy.

It allocates with cudaMalloc, copies and launches on the per-thread default stream (so the
runtime's per-thread lookups are used), and checks every element at the end. The kernel is
add_one.ptx, loaded with cudaLibraryLoadData, so no CUDA 12 toolkit is needed.

usage: cuda12_work.py LIBCUDART_SO_12 WORK_SECONDS
"""

import ctypes
import json
import sys
import time
from pathlib import Path

import numpy

from managed_pointer import is_managed

PER_THREAD_STREAM = ctypes.c_void_p(2)  # cudaStreamPerThread
HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2
MEMORY_TYPE_MANAGED = 3
COUNT = 16 << 20  # 64 MiB of uint32
LAUNCHES_PER_CHUNK = 200
THREADS = 256


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class PointerAttributes(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p)]


runtime = ctypes.CDLL(sys.argv[1])
work_seconds = float(sys.argv[2])
P, SIZE, INT, UINT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
# Every argument typed, so that no pointer is passed as a C int.
for name, arguments in {
    "cudaRuntimeGetVersion": [P], "cudaSetDevice": [INT], "cudaMalloc": [P, SIZE],
    "cudaPointerGetAttributes": [P, P], "cudaMemGetInfo": [P, P],
    "cudaMemcpyAsync": [P, P, SIZE, INT, P], "cudaMemcpy": [P, P, SIZE, INT],
    "cudaLibraryLoadData": [P, P, P, P, UINT, P, P, UINT], "cudaLibraryGetKernel": [P, P, P],
    "cudaLaunchKernel": [P, Dim3, Dim3, P, SIZE, P], "cudaStreamSynchronize": [P],
}.items():
    getattr(runtime, name).argtypes = arguments
runtime.cudaGetErrorString.argtypes = [INT]
runtime.cudaGetErrorString.restype = ctypes.c_char_p


def check(status, what):
    if status != 0:
        raise SystemExit(f"{what} failed: {runtime.cudaGetErrorString(status).decode()}")


version = ctypes.c_int()
check(runtime.cudaRuntimeGetVersion(ctypes.byref(version)), "cudaRuntimeGetVersion")
check(runtime.cudaSetDevice(0), "cudaSetDevice")
data = ctypes.c_void_p()
check(runtime.cudaMalloc(ctypes.byref(data), COUNT * 4), "cudaMalloc")
attributes = PointerAttributes()
check(runtime.cudaPointerGetAttributes(ctypes.byref(attributes), data), "cudaPointerGetAttributes")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
check(runtime.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")

start = numpy.arange(COUNT, dtype=numpy.uint32)
check(runtime.cudaMemcpyAsync(data, start.ctypes.data, COUNT * 4, HOST_TO_DEVICE,
                              PER_THREAD_STREAM), "cudaMemcpyAsync")
library, kernel = ctypes.c_void_p(), ctypes.c_void_p()
ptx = (Path(__file__).with_name("add_one.ptx").read_bytes()) + b"\0"
check(runtime.cudaLibraryLoadData(ctypes.byref(library), ptx, None, None, 0, None, None, 0),
      "cudaLibraryLoadData")
check(runtime.cudaLibraryGetKernel(ctypes.byref(kernel), library, b"add_one"),
      "cudaLibraryGetKernel")
count = ctypes.c_uint(COUNT)
arguments = (ctypes.c_void_p * 2)(ctypes.addressof(data), ctypes.addressof(count))
grid, block = Dim3((COUNT + THREADS - 1) // THREADS, 1, 1), Dim3(THREADS, 1, 1)

check(runtime.cudaStreamSynchronize(PER_THREAD_STREAM), "cudaStreamSynchronize")
ready = time.time()
chunks = launches = 0
while time.time() - ready < work_seconds:
    for _ in range(LAUNCHES_PER_CHUNK):
        check(runtime.cudaLaunchKernel(kernel, grid, block, arguments, 0, PER_THREAD_STREAM),
              "cudaLaunchKernel")
    launches += LAUNCHES_PER_CHUNK
    check(runtime.cudaStreamSynchronize(PER_THREAD_STREAM), "cudaStreamSynchronize")
    chunks += 1
work_done = time.time()

result = numpy.empty(COUNT, dtype=numpy.uint32)
check(runtime.cudaMemcpy(result.ctypes.data, data, COUNT * 4, DEVICE_TO_HOST), "cudaMemcpy")
print(json.dumps({
    "runtime_version": version.value, "chunks": chunks, "launches": launches,
    "ready": ready, "work_done": work_done,
    "every_element_right": bool((result == start + numpy.uint32(launches)).all()),
    "runtime_says_managed": attributes.type == MEMORY_TYPE_MANAGED,
    "driver_says_managed": is_managed(data.value),
    "mem_free": free.value, "mem_total": total.value}))
