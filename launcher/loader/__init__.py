"""Reading the user's cluster.yaml into a checked Spec: load (the Spec class composed with every
registered backend's and the export's options block, load_spec/parse_spec, the one-line errors,
the JSON Schema), rules (the cross-field rules, each backend's own among them), discovery (hosts
named by a command's output), shadow (an entrypoint a file of the working directory would
shadow), notes (every warning on a valid spec: shadow's, and arguments that hold a secret). Above the backends: it asks their registry which backends and option blocks exist. The
models themselves are launcher/spec/ (a leaf the backends import)."""
