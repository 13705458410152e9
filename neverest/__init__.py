"""Neverest: a memory for AI coding agents whose lessons move between machines.

This package holds the shared vocabulary (records, identity, safety, paths);
``neverest.memory``, ``neverest.gossip`` and ``neverest.peers`` build on it.
"""

__version__ = "0.1.0"
