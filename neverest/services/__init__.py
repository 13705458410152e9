"""The daemon's services: one module each, each ``serve_*(state, ..., task_status=...)``.

``neverestd`` (``neverest/daemon.py``) only composes them in one nursery.  Every one of
them reaches the memory through ``DaemonState.worker``, which runs the memory service's
methods (``neverest.memory.service.Memory``) in a worker thread, one writer at a time.
"""
