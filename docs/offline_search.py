"""A hook module of mkdocs.yml: the site opened from disk (`file://`) searches as the served one does.

Material's `offline` plugin makes the links work without a server and inlines the search index in a
script; the search still runs in a web worker, which a `file://` page may not start, so the plugin
loads the iframe-worker shim, by default from unpkg.com on every page view. The site ships the shim
instead (`extra.polyfills` in mkdocs.yml names it): taken from the npm registry's package, pinned
by version and integrity, downloaded once into a cache (`$LINTLOOP_DOCS_CACHE`, default
`~/.cache/lintloop-docs`), and written with its licence beside the site's scripts.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

PACKAGE, VERSION = "iframe-worker", "1.0.4"
INTEGRITY = "sha512-roeaaI+Lg1LJNfgpCjoRe/+WzEjy9+Z08LoEvu85MCPbBjwm+qXz8Ag5U05lHa6V1CysZyGzE0SOkAtSUA5q7Q=="
TARBALL_URL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
SHIM = "assets/javascripts/iframe-worker/shim.js"  # as mkdocs.yml's extra.polyfills names it
MEMBERS = {"package/shim/index.js": "shim.js", "package/LICENSE": "LICENSE"}


def on_post_build(config: Any, **_: Any) -> None:
    with tarfile.open(_tarball(), "r:gz") as archive:
        contents = {}
        for member, name in MEMBERS.items():
            stream = archive.extractfile(member)
            if stream is None:
                raise PluginError(f"{PACKAGE} {VERSION}: no file {member} in its package")
            contents[name] = stream.read()
    target = Path(config.site_dir) / SHIM
    target.parent.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        (target.parent / name).write_bytes(data)


def _tarball() -> Path:
    """The package's tarball from the cache, fetched first where it is not there (or not intact)."""
    cache = Path(os.environ.get("LINTLOOP_DOCS_CACHE") or Path.home() / ".cache" / "lintloop-docs")
    path = cache / f"{PACKAGE}-{VERSION}.tgz"
    if path.is_file() and _intact(path.read_bytes()):
        return path
    try:
        with urllib.request.urlopen(TARBALL_URL, timeout=60) as response:
            data = response.read()
    except OSError as error:
        raise PluginError(f"the site's search from file:// needs {PACKAGE} {VERSION} from the npm registry "
                          f"({TARBALL_URL}): {error}. Without network, put that file at {path}.") from error
    if not _intact(data):
        raise PluginError(f"{TARBALL_URL}: its content does not match the pinned integrity {INTEGRITY}")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache, delete=False) as partial:
        partial.write(data)
    os.replace(partial.name, path)  # whole or not at all: a concurrent build reads one or the other
    return path


def _intact(data: bytes) -> bool:
    algorithm, _, expected = INTEGRITY.partition("-")
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode() == expected
