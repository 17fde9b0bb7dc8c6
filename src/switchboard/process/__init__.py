"""The server process's life: the checks before it binds, the operator commands that look after the
installation, the frozen start-up heap, stopping background tasks and a quick exit."""
