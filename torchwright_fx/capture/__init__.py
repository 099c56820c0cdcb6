"""Capture: trace a Python function into an fx graph and annotate it."""
