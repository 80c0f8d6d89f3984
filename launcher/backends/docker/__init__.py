"""``backend: docker``: every task a container on one private network of its run.

The backend's kind is ``backend.DockerBackend`` (registered in launcher.backends as "docker",
imported only when a spec names it); its parts: engine.py (the SDK, imported on first use, and a
client), images.py (inspect, pull, build), volumes.py (the mounts and their ownership),
containers.py (labels, HostConfig, create/start, the task handle, removal), standby.py (warm
standby: a container per standby, promoted by its alias, name and promotion file); options.py is the
``docker:`` block. Nothing outside launcher/backends/ imports this package.
"""
