"""The spec as data: model/ (the pydantic models, every key, its default and its description; a
leaf that the backends' own option blocks build on) and yamlread (YAML read within bounds, with
each value's line). Reading a user's file into a checked Spec is launcher/loader/."""
