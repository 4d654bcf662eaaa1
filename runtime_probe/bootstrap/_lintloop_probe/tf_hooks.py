"""TensorFlow: installed when `tensorflow` is imported.  `tape.gradient` (None gradients,
eager steps, errors, the gradients' global norm at memory samples), autograph's source maps
(generated code -> the user's line), TensorFlow's logged warnings; the other hooks live by
concern: `tf_function` (traces, `print`, trace-time mutations, check_numerics), `tf_distribute`,
`tf_data`, `tf_summary`, `tf_tapes` (persistent tapes) and `tf_amp` (loss scaling).
"""
import functools
import logging

from . import events, grad_norms, tf_amp, tf_data, tf_distribute, tf_function, tf_summary, tf_tapes
from .errors import record_exception
from .events import first_line, probe_error
from .frames import PROBE_DIR, add_autograph_line, add_nonuser_dir, user_site
from .imports import framework_event
from .state import S
from .steps import eager_step


def install(tf):
    add_nonuser_dir(tf)
    hooks = []
    try:
        tf_function.install_context()
    except Exception as err:
        probe_error("tf_context", err)
    for name, installer in (
            ("autograph_source_map", _install_autograph),
            ("GradientTape.gradient", _install_tape),
            ("tf.function", tf_function.install_function),
            ("print", tf_function.install_print),
            ("autograph.converted_call", tf_function.install_trace_mutations),
            ("check_numerics", tf_function.install_check_numerics),
            ("Strategy.run", tf_distribute.install_strategy),
            ("reduce_mean", tf_distribute.install_reduce_mean),
            ("tf.summary.write", tf_summary.install),
            ("tf_logging", _install_logging),
            ("tf.data", tf_data.install),
            ("GradientTape.persistent", tf_tapes.install),
            ("mixed_float16 loss scaling", tf_amp.install)):
        try:
            installer(tf)
            hooks.append(name)
        except Exception as err:
            probe_error(f"tf:{name}", err)
    framework_event("tensorflow", tf, hooks)


def _install_autograph(tf):
    from tensorflow.python.autograph.core import config as ag_config
    from tensorflow.python.autograph.impl import api as ag_api
    from tensorflow.python.util import traceback_utils

    # Keep our wrapper frames out of TF's filtered tracebacks and "in user code:" messages.
    traceback_utils._EXCLUDED_PATHS = tuple(traceback_utils._EXCLUDED_PATHS) + (PROBE_DIR,)

    # Never let autograph convert our wrappers (it would transpile the probe's code).
    ag_config.CONVERSION_RULES = (ag_config.DoNotConvert(__package__),) + tuple(
        ag_config.CONVERSION_RULES)
    original = ag_api._convert_actual

    def _convert_actual(entity, program_ctx):
        transformed = original(entity, program_ctx)
        try:
            source_map = getattr(transformed, "ag_source_map", None) or {}
            for loc, origin in source_map.items():
                add_autograph_line((loc.filename, loc.lineno),
                                   (origin.loc.filename, origin.loc.lineno))
        except Exception as err:
            probe_error("autograph_source_map", err)
        return transformed

    ag_api._convert_actual = _convert_actual


def _source_names(sources, flat_result, nest):
    names = []
    try:
        flat_sources = nest.flatten(sources)
        if len(flat_sources) != len(flat_result):
            return names
        for src, grad in zip(flat_sources, flat_result):
            if grad is not None:
                continue
            name = getattr(src, "path", None)
            if name is None:
                try:
                    name = src.name
                except Exception:
                    shape = getattr(src, "shape", None)
                    name = f"{type(src).__name__}{list(shape) if shape is not None else ''}"
            names.append(str(name))
            if len(names) >= 10:
                break
    except Exception:
        pass
    return names


def _install_tape(tf):
    from tensorflow.python.eager import backprop
    from tensorflow.python.util import nest

    original = backprop.GradientTape.gradient

    @functools.wraps(original)
    def gradient(self, target, sources, *args, **kwargs):
        try:
            result = original(self, target, sources, *args, **kwargs)
        except Exception as exc:
            record_exception(exc, "tape.gradient", from_stack=True)
            raise
        try:
            eager = tf_function.eager()
            if not eager:
                tf_function.mark_training()
            flat = nest.flatten(result)
            total = len(flat)
            none = sum(1 for g in flat if g is None)
            S.checks["tape_gradient"] = S.checks.get("tape_gradient", 0) + 1
            if none:
                site = user_site(2)
                key = ("tf", site)
                if S.none_seen.get(key) != (none, total):
                    S.none_seen[key] = (none, total)
                    events.emit({"type": "none_gradients", "framework": "tensorflow", "none": none,
                                 "total": total, "eager": eager,
                                 "step": S.steps + (1 if eager else 0),
                                 "names": _source_names(sources, flat, nest),
                                 "file": site[0], "line": site[1]})
        except Exception as err:
            probe_error("tape_gradient", err)
            return result
        if eager:
            step = S.steps + 1  # the step these gradients belong to (counted here or at apply_gradients)
            if grad_norms.memory_sampled(step):
                grad_norms.add_tape_gradients(tf, flat, step)
            eager_step("tape_gradient", "tf", grad_norms.tape_norm_extra(step))
        return result

    backprop.GradientTape.gradient = gradient


def _install_logging(tf):
    class Handler(logging.Handler):
        def emit(self, record):
            try:
                events.emit({"type": "warning", "category": f"tf_logging.{record.levelname}",
                             "message": first_line(record.getMessage())})
            except Exception:
                pass

    logging.getLogger("tensorflow").addHandler(Handler(logging.WARNING))
