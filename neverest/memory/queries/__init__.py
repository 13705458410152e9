"""The SQL of the memory, one module per group of tables, each returning typed rows.

Nothing else in ``neverest`` or ``simulations`` calls ``execute`` (tests/test_store_layer.py
keeps it so): the store's connection, schema and migrations are in ``memory/store.py``,
the records and what surrounds them in ``memory/holdings.py``, the peers in
``peers/table.py``, and everything else here:

- ``episodes``     events as stored, recall's scan, the sleep's episode reads and writes
- ``embeddings``   the vector columns of episodes, lessons and predictions
- ``lessons``      lessons and their sets (``lesson_origins``, ``lesson_sources``)
- ``predictions``  predictions and their outcomes
- ``sleeps``       the record of each night and the aliases merges leave
- ``projects``     the projects whose lessons the owner publishes
- ``status``       counts for status reports

Functions that write take the connection of the caller's open write transaction
(``Store.write()``); functions that read take any connection.
"""
