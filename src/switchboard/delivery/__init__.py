"""Parts of outbound delivery shared by notify hooks and A2A push: the backoff schedule and the retry
decision (which failed attempt is tried again, and when)."""
