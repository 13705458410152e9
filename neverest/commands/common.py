"""What every neverestctl command shares: its errors (and their exit statuses), the memory
opened here, and the running daemon asked instead when there is one.

Exit statuses, one rule for every command: 0 success; 1 the command ran and failed (a
refused record, an unreachable peer, a locked store, a daemon that failed); 2 a usage
error (a bad flag, a missing home, an argument that cannot be right); 141, with nothing
printed, when the reader of the output went away (``| head``), as for a Unix tool.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neverest.agents.doors import render_for_agents
from neverest.client import DEFAULT_TIMEOUT_S, DaemonFailed, DaemonRefused, ask_daemon
from neverest.clock import Clock, clock_from_env
from neverest.config import load_config
from neverest.memory.service import Memory
from neverest.paths import HomeError, find_home


class UsageError(Exception):
    """The user asked for something that cannot be done as asked (exit status 2)."""


class CommandFailed(Exception):
    """The command ran and failed (exit status 1); the message says what happened."""


def home_of(args: argparse.Namespace) -> Path:
    """The home named by the command, opened (only the default home is created on first use)."""
    try:
        return find_home(args.home)
    except HomeError as exc:
        raise UsageError(str(exc)) from None


def clock_of_env() -> Clock:
    """The clock, pinned by NEVEREST_NOW when set; a bad NEVEREST_NOW is a usage error."""
    try:
        return clock_from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def open_memory(args: argparse.Namespace) -> Memory:
    home = home_of(args)
    return Memory.open(home, load_config(home), clock_of_env(), renderers=(render_for_agents,))


def through_daemon(args: argparse.Namespace, request: dict[str, Any], *, timeout_s: float = DEFAULT_TIMEOUT_S
                   ) -> dict[str, Any] | None:
    """The running daemon's answer to ``request``, or None when no daemon runs for this home.

    A writing command goes through the daemon when there is one: it is the one writer of
    the home, and it shares what changed at once.
    """
    try:
        return ask_daemon(home_of(args), request, timeout_s=timeout_s)
    except DaemonRefused as exc:  # what was asked cannot be done as asked: the caller's fault
        raise UsageError(str(exc)) from None
    except DaemonFailed as exc:
        raise CommandFailed(f"the daemon failed: {exc}") from None


def daemon_or_here(args: argparse.Namespace, request: dict[str, Any], here: Callable[[Memory], dict[str, Any]]
                   ) -> tuple[dict[str, Any], bool]:
    """What ``request`` gave, and whether the daemon did it: the running daemon's ``result``, else what
    ``here`` gives on the memory opened here (the same memory service, so the same result)."""
    answer = through_daemon(args, request)
    if answer is not None:
        return dict(answer["result"]), True
    with open_memory(args) as memory:
        return here(memory), False
