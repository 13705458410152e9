"""Doors between Neverest and the coding agents: their transcripts, hooks, MCP, memory files and setup."""
