"""The argument parser of cpe's commands (``cpe`` and ``cpe bench``), which both
build on: it depends on neither."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: the usage is one `--help` away.
        self.exit(2, f"{self.prog}: error: {message}\n")
