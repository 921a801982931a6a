"""One cell's run: the round loop (runner), the engine, metrics, results, convergence and the
results store. Imports nothing of robustfl.sweep, robustfl.reporting or robustfl.cli."""
