"""Engine, runner, metrics, matrix, executors and the results store."""
