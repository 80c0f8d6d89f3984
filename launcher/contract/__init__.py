"""What the launcher and the code it starts agree on, and nothing else: the environment variables a
task reads (envnames), the layout of a task's state directory (statedir), the protocol lines a
worker prints (progress). worker/ and users' own scripts depend on these; this package imports
nothing of the launcher's, so they can be read without it."""
