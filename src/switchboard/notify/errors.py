"""Notify-hook errors with the stable codes the MCP verbs return."""

from __future__ import annotations


class HookError(Exception):
    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CeilingExceeded(HookError):
    code = "ceiling_exceeded"


class HookNotFound(HookError):
    code = "not_found"


class InvalidHook(HookError):
    code = "invalid_argument"
