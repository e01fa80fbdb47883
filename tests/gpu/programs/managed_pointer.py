"""Ask the CUDA driver whether a device pointer is managed (Unified Memory)."""

import ctypes

CU_POINTER_ATTRIBUTE_IS_MANAGED = 8


def is_managed(pointer: int) -> bool:
    driver = ctypes.CDLL("libcuda.so.1")
    answer = ctypes.c_uint(0)
    status = driver.cuPointerGetAttribute(ctypes.byref(answer), CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                          ctypes.c_ulonglong(pointer))
    if status != 0:
        raise RuntimeError(f"cuPointerGetAttribute failed with CUresult {status}")
    return bool(answer.value)
