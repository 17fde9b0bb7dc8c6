"""Switchboard: a self-hosted work-queue server for AI agents and automation.

A request meets ``edge`` first (connection limits, the warm-up front app, one Authorization header, the
JSON boundary, session caps), then ``app``'s routes hand it to a face: ``ingest`` (signed webhooks in),
``mcp``, ``a2a`` or ``web``. Every face calls one service layer (``manage``, ``notify.service``, the
``store`` homes); committed transitions ring ``notify``, ``a2a`` push and the MCP doorbell, whose calls
out go through ``push``. ``settings``, ``services``, ``process``, ``core`` and ``obs`` serve them all;
docs/architecture.md draws the picture.
"""

from __future__ import annotations

import functools

__all__ = ["__version__"]


@functools.cache
def _version() -> str:
    # Looked up on first use, not at import: importlib.metadata and its scan of the installed
    # distributions cost a CLI command that never prints the version about 30 ms (docs/cli.md).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("switchboard")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0+local"


def __getattr__(name: str) -> str:
    """``switchboard.__version__`` (PEP 562: the module's attribute, computed when first read)."""
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
