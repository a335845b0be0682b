"""``python -m cpe``: the same as the ``cpe`` command."""

import sys

from cpe._cli import main

sys.exit(main())
