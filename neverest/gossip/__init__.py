"""Anti-entropy between memories: sans-IO logic, its msgpack codec, the HTTP exchange.

Built in issue 5; empty until then.
"""
