"""A CuPy computation under libnvs: result and whether its memory is managed."""

import json

import cupy

from managed_pointer import is_managed

n = 1 << 20
x = cupy.arange(n, dtype=cupy.float64)
y = (x * 2 + 1).sum()
print(json.dumps({"sum": float(y), "expected": float(n * n),
                  "managed": is_managed(x.data.ptr)}))
