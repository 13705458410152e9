"""The doors between the memory and the coding agents: transcripts, hooks, the MCP server."""
