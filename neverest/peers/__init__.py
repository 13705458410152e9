"""The peer table, zeroconf discovery, the directory, scoring.

The peer table, zeroconf discovery and the directory (PROTOCOL.md §11–§12).
"""
