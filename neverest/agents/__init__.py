"""Doors between Neverest and the coding agents: their hooks, transcripts and memory files."""
