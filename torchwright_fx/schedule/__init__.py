"""Scheduling: which sublayer each producer runs in, and which residual columns each signal owns."""
