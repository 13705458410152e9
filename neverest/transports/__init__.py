"""Carriers of records between memories: the shared folder (and, later, the HTTP commons)."""
