"""The recipes' kernels: ``cpu`` (numba) and ``gpu`` (numba.cuda), with the same driver
functions. Imported lazily by the operators, so importing the cookbook imports no numba."""
