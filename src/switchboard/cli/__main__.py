"""``python -m switchboard.cli``."""

from switchboard.cli.run import main

raise SystemExit(main())
