"""Simulated networks of agents running the real Neverest code (issue 7); empty until then."""
