"""`lintloop server`: a Language Server (LSP over stdio) on the engine the CLI uses.

- `documents`: a document's settings, rule set, lint and fix (config discovery per file, as the CLI);
- `scheduling`: debounced linting off the event loop, stale results dropped;
- `positions`: lintloop positions (1-based code points) to LSP positions (negotiated encoding);
- `notebooks`: Jupyter notebooks (notebook document sync): linted as their `.ipynb` file, findings per cell;
- `diagnostics`, `actions`, `hover`, `ruledocs`: what the editor is sent;
- `transport`: the client's messages read off stdin within bounds, whatever it sends;
- `handshake`: `initialize` answered before pygls is imported (what an editor waits for first);
- `workers`: the worker processes every analysis of a document runs in (a crash or a runaway costs
  that analysis, reported as the document's LL004, never the server);
- `app`: the pygls wiring.
"""

from __future__ import annotations


def run_server() -> int:
    """Serve LSP over stdin/stdout until the client exits; the exit code follows the spec
    (0 after a `shutdown` request, else 1)."""
    from lintloop.server.handshake import open_session

    opening = open_session()  # answers `initialize` with the standard library alone
    from lintloop.server.app import serve  # pygls is imported by the server command only, after that answer

    return serve(opening=opening)
