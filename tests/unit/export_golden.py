"""What both exports (TFJob and Vertex) give the demo spec's containers: the plan's environment
for a replica (TF_CONFIG is the engine's to set), in the plan's order."""

DEMO_ENV = [
    {"name": "PYTHONUNBUFFERED", "value": "1"},
    {"name": "TFCLUSTER_NAME", "value": "demo"},
    {"name": "TFCLUSTER_RESTART_COUNT", "value": "0"},
    {"name": "TFCLUSTER_RUN_ID", "value": "export"},
    {"name": "TFCLUSTER_STATE_DIR", "value": "/tfcluster/state"},
    {"name": "TFCLUSTER_STRATEGY", "value": "multi_worker_mirrored"},
    {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
]
