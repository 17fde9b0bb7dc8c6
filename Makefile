# Entry points; the scripts do the work (and install what they need).
# Pass pytest arguments with ARGS, e.g. `make test ARGS="tests/unit -x"`.
ARGS ?=

.PHONY: test serve lint soak bench

test:
	scripts/test $(ARGS)

serve:
	scripts/serve $(ARGS)

lint:
	scripts/test --lint-only

# Placeholder until a real soak suite exists.
soak:
	scripts/test -m slow $(ARGS)

# The benchmarks (docs/benchmarks.md): installs the bench extra (pyinstrument) into .venv first.
bench:
	test -x .venv/bin/python || python3 -m venv .venv
	.venv/bin/pip install -q -e '.[test,bench]'
	.venv/bin/python -m bench $(ARGS)
