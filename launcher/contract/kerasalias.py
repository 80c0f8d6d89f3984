"""``import keras`` as tf_keras in a task: where the plan says so (TFCLUSTER_KERAS=tf_keras, set for
multi_worker_mirrored and parameter_server unless the spec says ``keras: 3``), a Keras 3 script
trains under those strategies unchanged, since Keras 3 ``model.fit`` cannot (keras#20585) and
tf_keras can.

A finder first on ``sys.meta_path`` answers ``keras`` and every ``keras.X`` with the module
``tf_keras`` and ``tf_keras.X`` (one module object under both names: the classes are the same,
``isinstance`` holds across them); ``tf.keras`` is tf_keras already (TF_USE_LEGACY_KERAS=1, set
beside it). A ``keras`` imported before (Keras 3, by a library) is dropped from ``sys.modules``
so the script's own import gets tf_keras. The first ``import keras`` prints one line on stderr
saying so; where tf_keras is not installed it says that instead and Keras 3 is imported.

The standby stub (launcher/remote/pystandby.py) carries this text and installs it before the
script runs: cold starts, promoted standbys and the forks of a host's zygote alike. Stdlib only,
no ``from __future__`` and no import of its own package's.
"""

import sys

KERAS_NOTE = ("tfcluster: `import keras` is tf_keras in this task ({why}); "
              "`keras: 3` in the spec keeps Keras 3")
NO_TF_KERAS = ("tfcluster: warning: tf_keras is not installed, so `import keras` is Keras 3, whose model.fit "
               "cannot train under {strategy}: pip install tf-keras (the version of TensorFlow's)")


class KerasAlias:
    """The finder: ``keras[.X]`` answered with ``tf_keras[.X]``."""

    def __init__(self, strategy, say):
        self.strategy, self.say, self.said, self.off = strategy, say, False, False

    def find_spec(self, name, path=None, target=None):
        if self.off or (name != "keras" and not name.startswith("keras.")):
            return None
        import importlib
        import importlib.util

        real = "tf_keras" + name[len("keras"):]
        if name == "keras" and "tf_keras" not in sys.modules and importlib.util.find_spec("tf_keras") is None:
            self.off = True  # Keras 3 it is, said once
            self.say(NO_TF_KERAS.format(strategy=self.strategy))
            return None
        if not self.said:  # (before tf_keras's import, and TensorFlow's lines, print theirs)
            self.said = True
            self.say(KERAS_NOTE.format(why=f"{self.strategy}: Keras 3 model.fit cannot train under it"))
        try:
            module = importlib.import_module(real)
        except ImportError:
            raise ModuleNotFoundError(f"No module named {name!r} (tf_keras, which is keras here, has no "
                                      f"{real!r})", name=name) from None
        return importlib.util.spec_from_loader(name, _Same(module))


class _Same:
    """A loader whose module is one imported already (its own ``__spec__`` kept)."""

    def __init__(self, module):
        self.module, self.spec = module, getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        if self.spec is not None:
            module.__spec__ = self.spec  # (the import system set the alias's over it)


def install_keras_alias(strategy, say=None):
    """The finder first on ``sys.meta_path`` (once), and a Keras 3 ``keras`` already imported
    dropped from ``sys.modules``; ``say``: where its one line goes (default: stderr)."""
    if any(isinstance(f, KerasAlias) or type(f).__name__ == "KerasAlias" for f in sys.meta_path):
        return
    if say is None:
        def say(line):
            print(line, file=sys.stderr, flush=True)
    for name in [n for n in sys.modules if n == "keras" or n.startswith("keras.")]:
        module = sys.modules[name]
        if not getattr(module, "__name__", "").startswith("tf_keras"):
            del sys.modules[name]
    sys.meta_path.insert(0, KerasAlias(strategy, say))
