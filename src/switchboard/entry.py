"""The ``switchboard`` console script. ``serve`` checks its settings, data folder and port before the
full CLI (and the database and web stacks under it) is imported, so a misconfigured start is refused
within a moment (switchboard.preflight)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        from switchboard.preflight import quick_serve_check

        refused = quick_serve_check(args[1:])
        if refused is not None:
            return refused
    from switchboard.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
