"""A notify hook's value types, where the notify package and its callers import them.

They are declared in :mod:`switchboard.store.notify_hook_types`: the ``notify_hooks`` home under
``store/`` builds them from its rows, and ``store/`` sits below the features (it never imports notify).
"""

from __future__ import annotations

from switchboard.store.notify_hook_types import (
    AUTOMATIC_DISABLES,
    DISABLE_AFTER,
    HUMAN_DISABLE,
    NOTIFICATION_IDS_LOGGED,
    EndpointHooks,
    HealthFold,
    HealthOutcome,
    Hook,
    MatchedHook,
    SendableHook,
    effective_limit,
)

__all__ = [
    "AUTOMATIC_DISABLES",
    "DISABLE_AFTER",
    "HUMAN_DISABLE",
    "NOTIFICATION_IDS_LOGGED",
    "EndpointHooks",
    "HealthFold",
    "HealthOutcome",
    "Hook",
    "MatchedHook",
    "SendableHook",
    "effective_limit",
]
