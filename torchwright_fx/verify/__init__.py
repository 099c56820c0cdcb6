"""Verification: node-by-node probe, checks in debug runs, and end-to-end verify."""
