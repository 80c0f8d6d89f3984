"""``backend: slurm``: one gang allocation per run, every task a job step inside it.

The backend's kind is ``backend.SlurmBackend`` (registered in launcher.backends as "slurm",
imported only when a spec names it); job.py is the run's job that both seams share, step.py a
task's step (its srun command line and its handle), cli.py runs Slurm's commands, alloc.py the
allocation, gpus.py the GPUs per node and per step, shared.py the shared file system check,
options.py the ``slurm:`` block.
Nothing outside launcher/backends/ imports this package.
"""
