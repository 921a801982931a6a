"""robustfl's benchmarks: ratios measured side by side in one process (``make bench``)."""
