"""The A2A surface's errors: the SDK's own exception classes, built here with our messages.

The SDK maps an error to its JSON-RPC code by exact class (``JSON_RPC_ERROR_CODE_MAP[type(err)]``), so a
subclass would come out as -32603. These helpers therefore return the SDK classes themselves; what this
module adds is the wording, written once, and the rule that no message ever quotes a token, a
credential, a URL or any other value the caller sent.
"""

from __future__ import annotations

from typing import Final

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

__all__ = [
    "A2AError",
    "ConfigRefused",
    "ceiling_exceeded",
    "internal",
    "invalid",
    "not_cancelable",
    "push_not_supported",
    "task_not_found",
    "unavailable",
    "unsupported",
]

# One message for "unknown" and "another endpoint's": a caller cannot probe for ids it does not own.
TASK_NOT_FOUND: Final = "task not found"
CONFIG_NOT_FOUND: Final = "push notification config not found"


class ConfigRefused(Exception):
    """A push config the store will not keep (bad field, refused URL, ceiling). ``message`` is safe to
    show: it names the field and the reason, never the value."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def task_not_found(message: str = TASK_NOT_FOUND) -> TaskNotFoundError:
    """-32001. Also the answer for a missing push config (A2A §3.1.8)."""
    return TaskNotFoundError(message)


def not_cancelable(state: str) -> TaskNotCancelableError:
    return TaskNotCancelableError(f"the task is {state} and cannot be canceled")


def push_not_supported() -> PushNotificationNotSupportedError:
    return PushNotificationNotSupportedError("push notifications are disabled on this server")


def unsupported(message: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(message)


def invalid(message: str) -> InvalidParamsError:
    """-32602 with a message that names the field, never its value."""
    return InvalidParamsError(message)


def ceiling_exceeded(ceiling: int) -> InvalidParamsError:
    return InvalidParamsError(f"this task already has the maximum of {ceiling} push notification configs")


def unavailable() -> InternalError:
    return InternalError("the database is unavailable; retry later")


def internal() -> InternalError:
    return InternalError("internal error; the server logged it")
