"""The operations every face (the CLI, the web UI, MCP, A2A) calls: each exists once, validates once.

A face parses what its user typed, checks who may act, calls one function here and renders the result;
the rules (what a valid event kind is, how a source secret is minted, what is audited) live here only.
Notify hooks have theirs in :mod:`switchboard.notify.service`.
"""
