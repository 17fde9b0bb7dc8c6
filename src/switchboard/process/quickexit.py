"""Leave a finished process without the interpreter's teardown.

Freeing every module at exit costs this program about a second of CPU per process (the MCP and A2A
SDKs' pydantic models dominate; measured with ``python -c "import switchboard.app"`` against the same
with ``os._exit``). A server start spawns two notify children and an operator's script may run dozens
of CLI commands, so each process ends here once its work is done: logging handlers and the standard
streams are flushed, then the process exits with its status. Everything durable was committed and every
engine disposed before this point; nothing runs at exit that Switchboard relies on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def leave(code: object) -> NoReturn:
    """Exit with ``code`` as ``SystemExit`` would read it (None is 0, a string is printed and 1)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing to write to
            stream.flush()
    os._exit(status)
