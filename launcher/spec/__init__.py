"""The user's cluster.yaml: model (the pydantic models, every key and its default), load (YAML with
positions and bounds, then the cross-field rules, giving `FILE:LINE: field: problem; fix` errors),
discovery (hosts named by a command's output). A new spec key goes in model, its cross-field rule
(if any) in load."""
