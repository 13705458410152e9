"""The local memory: the SQLite store, events, embedding, sleep passes, recall, render,
forget and export; the records held and how they are received, published and judged.

SQL lives in ``store.py`` (connection, schema, migrations, meta), ``holdings.py`` (records,
forks, tombstones, refusals) and the ``queries`` package (every other table); the other
modules call those functions and get typed rows back.
"""
