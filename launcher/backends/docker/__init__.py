"""``backend: docker``: every task a container on one private network of its run.

The backend class is ``backend.DockerBackend`` (registered in launcher.backends as "docker",
imported only when a spec names it); options.py is the ``docker:`` block.
Nothing outside launcher/backends/ imports this package.
"""
