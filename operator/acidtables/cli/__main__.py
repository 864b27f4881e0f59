"""`python -m acidtables.cli`: the same as the `acidtables` console script, for environments without it."""

import sys

from acidtables.cli.main import main

sys.exit(main())
