"""Doors between coding agents and the memory: their session transcripts read into events."""
