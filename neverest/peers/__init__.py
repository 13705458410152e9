"""The peer table, zeroconf discovery, the directory, scoring.

Built in issue 5; empty until then.
"""
