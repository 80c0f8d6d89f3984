"""``backend: slurm``: one gang allocation per run, every task a job step inside it.

The backend class is ``backend.SlurmBackend`` (registered in launcher.backends as "slurm",
imported only when a spec names it); cli.py runs Slurm's commands, alloc.py the allocation,
shared.py the shared file system check, options.py the ``slurm:`` block.
Nothing outside launcher/backends/ imports this package.
"""
