"""Anti-entropy between memories: sans-IO logic, its msgpack codec, the HTTP exchange.

Built in issue 5; empty until then.

- ``codec``: the wire format v1 (message layout, bounds, ``ProtocolError`` with who is at fault);
- ``peer_auth``: who sent a message, to whom, signed; the replay cache;
- ``core``: digests, deltas cut at a byte budget, fork witnesses, the ``Initiator`` and
  ``Responder`` state machines; no I/O, no clock, no global randomness;
- ``view``: ``core.StoreView`` over the SQLite store, applying through the one receive function;
- ``loopback``: an in-memory network of real memories for tests and simulations.

The HTTP edge (a hypercorn ASGI app and an httpx client) only carries the bytes.
"""
