"""The admin CLI: ``serve``, and what a self-hoster scripts (humans, endpoints, sources, routes).

Output contract (docs/cli.md): with ``--json`` stdout carries exactly one JSON object, on success and on
failure alike, so a script can always parse it; the human-readable ``error: ...`` line always goes to
stderr. A token or secret is printed once, by the command that mints it, and by nothing else.

Exit codes: 0 done; 1 refused or failed (unknown name, duplicate, database unavailable); 2 invalid input;
3 ``serve`` could not start (port taken, database unreachable).

One module per command group (accounts, inbound, hooks, todos, schema), the parser, the runner, ``serve``
and the database-free tools; every handler calls the same service function the web UI and MCP call.
"""

from switchboard.cli.run import main

__all__ = ["main"]
