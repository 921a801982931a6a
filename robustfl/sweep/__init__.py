"""Matrices of cells: the plan, the jobs and where they run, and the driver that resumes through
the store. ``robustfl.run_matrix`` is the public entry (:func:`robustfl.sweep.driver.run_matrix`).

Imports :mod:`robustfl.simulation` (one cell's run, its results, convergence, the store) and
nothing above it: never :mod:`robustfl.reporting` or :mod:`robustfl.cli`. The modules, bottom up:

* :mod:`.plan`: every cell of a matrix as a validated :class:`~.plan.Job`;
* :mod:`.provenance`: what a run records about versions, scenario and component origins;
* :mod:`.jobs`: what one job runs, wherever it runs, and the ``failed`` cells of faults;
* :mod:`.main_guard`: scripts that call robustfl at their top level (workers import them again);
* :mod:`.executor`: the one executor protocol (and the progress protocol);
* :mod:`.pool`, :mod:`.local`: the local worker pool and the local executors;
* :mod:`.ray_executor`: the Ray executor;
* :mod:`.references`, :mod:`.verdicts`: the clean-run references and convergence verdicts;
* :mod:`.interrupt`: Ctrl-C while cells are committed;
* :mod:`.driver`: :func:`~.driver.run_matrix`, which ties them together.
"""
