"""The labs: real hosts on this machine for the integration tests and the benchmarks (bench/*.py
imports them too). Each needs root and its own system packages (tests/setup/):

- ``ssh``     hosts in network namespaces joined by a bridge, each with its own sshd and private disk
- ``slurm``   munged, slurmctld and one slurmd per namespace, on the ssh lab's network
- ``docker``  a private Docker engine and locally built images (no registry reached)
"""
