"""``python -m switchboard.cli``."""

from switchboard.cli.run import main
from switchboard.process.quickexit import leave

leave(main())
