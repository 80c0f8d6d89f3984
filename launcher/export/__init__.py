"""Files for other systems, generated from the spec and checked offline: `tfcluster compose` (a
docker-compose file), `tfcluster export` (a Kubeflow TFJob, a Vertex AI CustomJob), and the
marker that lets tfcluster rewrite only the files it generated (generated)."""
