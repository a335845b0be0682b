"""What the numbers were measured with: versions, machine, commit."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import cpe


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str | None:
    """The commit of the checkout holding this benchmark (cpe may be installed from another)."""
    try:
        completed = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return completed.stdout.strip() or None


def describe_environment(torch: ModuleType | None) -> dict[str, Any]:
    return {
        "cpe": cpe.__version__,
        "numpy": np.__version__,
        "torch": f"{torch.__version__} ({torch.get_num_threads()} thread)" if torch else None,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "commit": _commit(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
