"""A Flower app with a robustfl defense on the server and robustfl attacks on chosen clients."""
