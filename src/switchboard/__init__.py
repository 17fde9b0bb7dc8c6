"""Switchboard: a self-hosted work-queue server for AI agents and automation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("switchboard")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
