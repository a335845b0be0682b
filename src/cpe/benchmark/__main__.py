"""``python -m cpe.benchmark``: the same as ``cpe bench``."""

import sys

from cpe.benchmark import main

sys.exit(main())
