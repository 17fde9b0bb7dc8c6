"""The shapes of what an operator names: slugs, queues, emails, source kinds and trusts, todo states and
ages. Plain constants with nothing heavier than ``re`` under them, so the CLI's argument parser (and its
``--help``) is built without loading the stores that use them (docs/cli.md, "Start-up time")."""

from __future__ import annotations

import re

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
QUEUE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,255}$")

KINDS = ("gitea", "github", "standard", "generic")  # inbound source kinds (SPEC-0003)
TRUSTS = ("signature", "token", "none")  # how a source's deliveries are authenticated

STATES = ("pending", "claimed", "failed", "dead", "done", "canceled")  # a todo's states
AGES: dict[str, int] = {"5m": 300, "1h": 3600, "24h": 86_400, "7d": 7 * 86_400}  # console age filters
