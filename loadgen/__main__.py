"""`python -m loadgen`: the `loadgen` command."""

import sys

from loadgen.cli.main import main

sys.exit(main())
