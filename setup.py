"""Package discovery for the layout `lintloop/`, `rules/`, `runtime_probe/` -> one import name `lintloop`.

setuptools' `find` cannot map top-level folders under another name, and a hand-written package list
forgets new rule families; so every folder with an `__init__.py` below the three roots is a package.
The rules' runnable example programs, the test suite's fixture programs, are installed as
`lintloop/example_programs/` (read by lintloop.rule_examples): data, not a package to import. The
server's schema of `initialize` (lintloop.server.handshake) is data of its package.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"lintloop": "lintloop", "lintloop.rules": "rules", "lintloop.runtime_probe": "runtime_probe"}


def _packages() -> dict[str, str]:
    found = {}
    for name, folder in ROOTS.items():
        for init in sorted(Path(folder).rglob("__init__.py")):
            relative = init.parent.relative_to(folder).parts
            found[".".join((name, *relative))] = init.parent.as_posix()
    return found


PACKAGES = _packages()
EXAMPLES = "lintloop.example_programs"
setup(packages=sorted(PACKAGES) + [EXAMPLES], package_dir={**PACKAGES, EXAMPLES: "tests/fixtures"},
      package_data={EXAMPLES: ["LL*.py"], "lintloop.server": ["initialize_params.json"]},
      exclude_package_data={EXAMPLES: ["*/*"]})
