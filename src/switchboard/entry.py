"""The ``switchboard`` console script. ``serve`` checks its settings, data folder and port before the
full CLI (and the database and web stacks under it) is imported, so a misconfigured start is refused
within a moment (switchboard.process.preflight)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"] and not {"-h", "--help"} & set(args):
        from switchboard.process.preflight import quick_serve_check

        refused = quick_serve_check(args[1:])
        if refused is not None:
            return refused
    from switchboard.cli import main as cli_main

    return cli_main(args)


def run() -> NoReturn:
    """The console script: :func:`main`, then exit without the interpreter's teardown (quickexit)."""
    from switchboard.process.quickexit import leave

    try:
        code: object = main()
    except SystemExit as exc:  # argparse's refusals and --help
        code = exc.code
    leave(code)


if __name__ == "__main__":
    run()
