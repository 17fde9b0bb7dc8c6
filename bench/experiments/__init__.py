"""What-if experiments: monkeypatches that undo or change shipped behaviour, and their runner.

Not run by ``python -m bench`` (which measures only the product as it ships); run them by name:
``python -m bench.experiments.whatif``, ``BENCH_S4_PATCHES=tail_probe python -m bench --only s4``.
"""
