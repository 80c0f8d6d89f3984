"""``backend: ssh``: tasks on remote hosts over one SSH connection per host.

The backend's kind is ``backend.SSHBackend`` (registered in launcher.backends as "ssh", imported
only when a spec names it); the other modules are its parts, one job each (see backend.py).
Nothing outside launcher/backends/ imports this package.
"""
