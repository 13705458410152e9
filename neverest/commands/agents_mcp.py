"""``neverestctl mcp``: serve this memory to a coding agent over MCP (standard input and output).

The server (the protocol's few messages, served without the MCP SDK) is imported only when the command runs.
"""

from __future__ import annotations

import argparse

from neverest.commands.common import clock_of_env, home_of


def cmd_mcp(args: argparse.Namespace) -> int:
    home, clock = home_of(args), clock_of_env()
    from neverest.agents.mcp_server import run  # the memory service and the operations: only for this command

    run(home, clock)
    return 0
