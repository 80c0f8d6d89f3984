"""What the tests share, one module per job (no lab here: the ssh, Slurm and Docker labs live
in tests/labs/, which bench/ imports too):

- ``cli``        run the CLI like a user would: ``tfcluster(...)`` (to the end), ``start_tfcluster(...)``
- ``errors``     the one error line of a spec or of the CLI (``one_error``, ``spec_errors``, ``one_cli_error``)
- ``waits``      waiting on a condition or an output line, with a timeout that says what was awaited
- ``processes``  a run's processes, found by their environment
- ``specs``      every cluster.yaml a test writes: ``spec_file``, ``local_spec``, ``script_spec``, ``BASE``
- ``tfrun``      real TensorFlow runs through ``tfcluster up``: the spec, the run, its progress lines
- ``terminal``   `tfcluster up` in a tmux window that is closed mid-run; a run's recorded outcome
- ``ssh_helpers``, ``slurm_helpers``, ``docker_helpers``  what each lab's tests share (pid files,
                 firewall, jobs, containers left)
- ``readme``     README.md's example blocks, which the generated output must match
- ``export_golden``  the specs and environment both exports are tested on
- ``gpus``       a fake nvidia-smi (``nvidia-smi`` beside it) and its GPUs
- ``standby_task``  a task entrypoint that follows the warm-standby protocol
- ``docker_warmup``  the session's one start of the docker engine and images, begun early
- ``ports``      free loopback ports
- ``fakes``      a scripted backend to run the supervisor against, no processes, no wall clock
- ``prereq``     skip (or under CI=true fail) when a prerequisite is missing
- ``approx``     comparing numbers of nested data with ``pytest.approx``
"""
