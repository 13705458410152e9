"""Anti-entropy between memories: sans-IO logic, its msgpack codec, the HTTP exchange.

- ``codec``: the wire format v1 (message layout, bounds, ``ProtocolError`` with who is at fault);
- ``peer_auth``: who sent a message, to whom, signed; the replay cache;
- ``core``: digests, deltas cut at a byte budget, fork witnesses, the ``Initiator`` and
  ``Responder`` state machines, shared peer addresses; no I/O, no clock, no global randomness;
- ``ranges``: fingerprints of bit-prefix ranges of a digest, kept up to date entry by entry;
- ``reconcile``: revision 2, range-based reconciliation (what each RECON answer carries);
- ``view``: ``core.StoreView`` over the SQLite store, applying through the one receive function;
- ``http``: the listener's ASGI app (the exchange, ``/healthz``, ``/metrics``) and the client
  posts (through ``neverest.httpclient``);
- ``service``: gossip as the daemon runs it: answering, exchanging, rounds, and the peer table;
- ``loopback``: in-memory networks of real memories for tests and simulations.
"""
