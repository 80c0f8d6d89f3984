"""What the tests share, one module per job (no lab here: the ssh, Slurm and Docker labs live
in tests/labs/, which bench/ imports too):

- ``cli``        run the CLI like a user would: ``tfcluster(...)`` (to the end), ``start_tfcluster(...)``
- ``errors``     the one error line of a spec or of the CLI (``one_error``, ``spec_errors``, ``one_cli_error``)
- ``waits``      waiting on a condition or an output line, with a timeout that says what was awaited
- ``processes``  a run's processes, found by their environment
- ``specs``      a cluster.yaml whose tasks run a small script
- ``ports``      free loopback ports
- ``fakes``      a scripted backend to run the supervisor against, no processes, no wall clock
- ``prereq``     skip (or under CI=true fail) when a prerequisite is missing
- ``approx``     comparing numbers of nested data with ``pytest.approx``
"""
