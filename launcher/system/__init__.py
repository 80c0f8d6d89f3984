"""This machine's processes and signals, for every layer: ``procinfo`` (a process's identity by pid and
start time, proof that one a run record names is the run's own, who holds a port, commands run with a
timeout) and ``interrupts`` (Ctrl-C as a flag the commands that watch a run read between polls)."""
