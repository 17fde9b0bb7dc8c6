"""SPEC-0018's A2A task surface and A2A push notifications (docs/a2a.md).

Tasks are todos. The SDK's JSON-RPC routes serve ``/a2a``; a custom request handler maps methods onto
the todo store; push deliveries are written to a durable outbox inside each transition's transaction
and sent by a worker pool through ``switchboard.push``.

The component is :class:`switchboard.a2a.component.A2AComponent`. This package imports nothing itself:
the CLI reads and writes A2A settings (``switchboard.a2a.settings``) without loading the A2A SDK.
"""
