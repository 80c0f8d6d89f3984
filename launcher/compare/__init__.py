"""``tfcluster compare``: the same training under several configurations, one after another.

Each configuration runs through the same path as ``tfcluster up`` (a derived spec, the plan,
the backend, the supervisor, a run record); the figures are read back from that record.

    configs.py      which configurations to run: a spec per strategy (pure)
    measure.py      one run's figures from its events and progress lines (pure)
    report.py       medians over repeats, results.csv/.json and report.md (pure)
    plots.py        the PNG plots (matplotlib)
    tensorboard.py  per-configuration TensorBoard scalars under one logdir
    run.py          running the configurations, the live progress line, writing the outputs
"""
