"""SPEC-0024 outbound todo notify hooks: a signed HTTPS doorbell for consumers with no live session."""
