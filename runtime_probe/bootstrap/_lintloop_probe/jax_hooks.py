"""JAX: installed when `jax` is imported.  JAX's files stop counting as user code; the hooks
live by concern (each module's `install(jax)`), and the `framework` event lists those that
installed."""
from . import jax_compile, jax_random, jax_trace
from .events import probe_error
from .frames import add_nonuser_dir
from .imports import framework_event


def install(jax):
    add_nonuser_dir(jax)
    hooks = []
    for name, installer in (
        ("jax_compile", jax_compile.install_compile_counter),
        ("jax_random", jax_random.install_random),
        ("jax_trace", jax_trace.install_trace),
        ("jax_trace_print", jax_trace.install_print),
    ):
        try:
            installer(jax)
            hooks.append(name)
        except Exception as err:
            probe_error(f"jax:{name}", err)
    framework_event("jax", jax, hooks)
