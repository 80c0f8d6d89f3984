"""The plan: one immutable value per attempt (per task: host, address, port, TF_CONFIG, command,
env), built from a loaded spec by pure functions: build (the plan itself), threads (per-task CPU
threads), gpus (which GPUs a task gets; gputext: that placement in words; containergpus: a
container's), elastic (the next plan after hosts are lost), preflight (the plan a preflight's
typed findings, hostreport, give). No I/O here."""
