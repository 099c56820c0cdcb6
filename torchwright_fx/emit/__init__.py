"""Plan -> Machine: dense fp32 weights per layer."""
