"""ML I/O admission: trace features, slow/fast labels, the model, the failover simulator, and the runner."""
