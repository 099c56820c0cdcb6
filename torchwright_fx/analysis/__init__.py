"""Analyses of the captured graph that need no lowering: the facts of every node (facts.py)."""
