"""What both exports (TFJob and Vertex) are tested on: the demo and PSS example specs, and the
demo's replica environment (TF_CONFIG is the engine's to set), in the plan's order."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cluster.yaml"
PSS = ROOT / "examples" / "parameter_server.yaml"

DEMO_ENV = [
    {"name": "PYTHONUNBUFFERED", "value": "1"},
    {"name": "TFCLUSTER_NAME", "value": "demo"},
    {"name": "TFCLUSTER_RESTART_COUNT", "value": "0"},
    {"name": "TFCLUSTER_RUN_ID", "value": "export"},
    {"name": "TFCLUSTER_STATE_DIR", "value": "/tfcluster/state"},
    {"name": "TFCLUSTER_STRATEGY", "value": "multi_worker_mirrored"},
    {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
    {"name": "TF_GRPC_DEFAULT_OPTIONS", "value": "grpc.initial_reconnect_backoff_ms=100"},
    {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
]
