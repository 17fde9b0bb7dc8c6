"""Operator events (docs/self-hosting.md, "Operator events"): a hook auto-disabled, an A2A push that gave
up, notifications the delivery queue dropped, told to the instance's operator by a signed webhook."""
