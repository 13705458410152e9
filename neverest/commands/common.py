"""What every neverestctl command shares: the usage error and the memory opened with its config and clock."""

from __future__ import annotations

import argparse

from neverest.clock import clock_from_env
from neverest.config import load_config
from neverest.memory.service import Memory
from neverest.paths import resolve_home


class UsageError(Exception):
    """The user asked for something that cannot be done as asked (exit status 2)."""


def open_memory(args: argparse.Namespace) -> Memory:
    home = resolve_home(args.home)
    try:
        clock = clock_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return Memory(home, load_config(home), clock)


