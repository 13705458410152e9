"""Neverest: a memory for AI coding agents whose lessons move between machines.

This package holds the shared vocabulary (records, identity, safety, paths);
``neverest.memory``, ``neverest.gossip`` and ``neverest.peers`` build on it.
"""

import os as _os

__version__ = "0.1.0"

# One BLAS thread for numpy's matrix products, unless the owner says otherwise (read when numpy loads,
# so here, before any module of the package imports it).  The products are a receive's or a sleep's, on
# a machine where the verifying processes and the owner's own work already use every core; OpenBLAS's
# extra thread spins while it waits for work: 2.3-2.6 s of CPU in a 20 000-lesson pull of 4.4 s, with
# the pull no quicker (measured, 2 cores: benchmarks/bench_gossip.py --distinct).
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_name, "1")
