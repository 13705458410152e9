"""Simulated networks of Neverest agents running the project's own code (docs/simulations.md; PROTOCOL.md §14).

Only the network (network.py: latency, loss, partitions, churn) and the clock (engine.py: a
heap of timed events) are simulated; records, the gossip exchange, the receive function,
the commons states and the trust policies are ``neverest``'s.  ``python -m simulations``
runs the experiments: dissemination, robustness, commons, transports (cli.py).
"""
