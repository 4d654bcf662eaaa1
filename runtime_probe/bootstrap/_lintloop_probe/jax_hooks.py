"""JAX: installed when `jax` is imported.  No hooks yet: JAX's files stop counting as user
code, and the `framework` event records its version."""
from .frames import add_nonuser_dir
from .imports import framework_event


def install(jax):
    add_nonuser_dir(jax)
    framework_event("jax", jax, [])
