"""``tfcluster export``: the spec as a Kubeflow TFJob or a Vertex AI CustomJob, validated offline."""
