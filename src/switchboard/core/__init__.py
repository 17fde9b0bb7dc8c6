"""Shared values every layer uses and that depend on nothing heavier than the standard library: the
clock, ids, names, sender text made safe, the grantable verbs and rate-limit windows."""
