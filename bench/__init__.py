"""Switchboard benchmarks: ``python -m bench`` runs every scenario and writes docs/benchmarks.md.

Not part of the test suite. Every process binds 127.0.0.1 only; every loop is bounded in count and time.
"""
