"""A JAX matmul on the GPU, checked exactly: 1024x1024 ones squared sums to 2**30 (every partial
sum is a multiple of 1024 below 2**34, which float32 holds exactly)."""

import json

import jax
import jax.numpy as jnp

ones = jnp.ones((1024, 1024), dtype=jnp.float32)
total = float((ones @ ones).sum())
print(json.dumps({"backend": jax.default_backend(), "sum": total, "expected": float(1 << 30)}))
