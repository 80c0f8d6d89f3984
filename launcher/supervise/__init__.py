"""Supervision: the loop that runs a plan on a backend and carries it through faults (loop, with
its parts: phases, one attempt's watch phases; prewarm, when and where warm standbys start;
outcome, the failure and final reports), and its private helpers, each pure where it can be:
policy (restart or give up), blame (whose fault a failure was), diagnose (the hint a failure's
output earns), membership (hosts lost, suspect, back), standby (warm standby processes), gpuwatch
(GPU use while tasks run). Only the use cases in launcher.app start a supervisor."""
