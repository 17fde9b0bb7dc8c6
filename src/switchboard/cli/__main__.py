"""``python -m switchboard.cli``."""

from switchboard.cli.run import main
from switchboard.quickexit import leave

leave(main())
