"""The local memory: the SQLite store, events, embedding, sleep passes, recall, render.

Built in issue 3; empty until then.
"""
