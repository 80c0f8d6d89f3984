"""The use cases, one module each: up (validate, plan, run and supervise), detach (a run that
outlives the terminal), inspect (status, logs, attach, runs), down, tensorboard. The CLI
calls them; they return data (or an exit code) and print through the console they are given."""
