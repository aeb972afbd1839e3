"""`python -m edgellm`: the same entry point as the `edgellm` command."""

import sys

from edgellm.cli import main

sys.exit(main())
