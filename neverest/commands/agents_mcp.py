"""``neverestctl mcp``: serve this memory to a coding agent over MCP (standard input and output).

The SDK is imported only when the command runs, so every other command starts without it.
"""

from __future__ import annotations

import argparse
from typing import Any

from neverest.commands.common import clock_of_env, home_of


def cmd_mcp(args: argparse.Namespace) -> int:
    home, clock = home_of(args), clock_of_env()
    from neverest.agents.mcp_server import run  # the SDK and pydantic: only for this command

    run(home, clock)
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser | None = None) -> None:
    p = sub.add_parser(
        "mcp", parents=[common] if common else [],
        help="serve this memory to a coding agent over MCP on standard input and output",
        description="An MCP server (stdio transport) with the tools remember, recall, lessons, show and relay. "
        "Register it with the agent, e.g. `claude mcp add neverest -- neverestctl mcp`. It works while "
        "neverestd runs: events go through the daemon when it does.")
    p.set_defaults(func=cmd_mcp)
