"""lintloop: a static analyzer for deep-learning training loops."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# Installed, `rules/` and `runtime_probe/` are subpackages of `lintloop`. In a source
# checkout they sit beside this directory; let `lintloop.rules` resolve there too, so that
# `python -m lintloop` from the repository root uses the same code as the installed tool.
_checkout_root = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).parent / "rules").is_dir() and (_checkout_root / "rules" / "__init__.py").is_file():
    __path__.append(str(_checkout_root))  # type: ignore[name-defined]
