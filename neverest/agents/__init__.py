"""The doors between a memory and the coding agents on this machine."""
