"""`import keras_transformer` registers every class a saved file names with Keras's and
keras-hub's loaders, without importing Keras itself: the light parts
(`keras_transformer.core`, `keras_transformer.serving`) import without TensorFlow, Keras or
keras-hub, and the classes are registered as soon as Keras is loaded.

`install()`, run by the package's `__init__`, registers at once when Keras is loaded already.
Otherwise it watches the imports of Keras, keras-hub, TensorFlow, tensorflow-text and of the
package's own modules, and registers once the outermost of them is over and Keras is loaded:
`import keras` after `import keras_transformer`, `from keras_transformer.models import ...`,
`kt.build_transformer`, `import keras_hub` all leave every class registered, as an eager
`import keras_transformer` did. Registering imports the modules that register classes
(`REGISTERING`, and `TEXT` where keras-hub and tensorflow-text are installed), after
checking Keras's backend (`_backends.check_backend`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading

PACKAGE = __name__.rpartition(".")[0]
REGISTERING = (
    "config",
    "decoding",
    "fast",
    "layers",
    "losses",
    "metrics",
    "model",
    "ops",
    "schedule",
    "special_ids",
)
TEXT = ("models", "tokenizers")  # keras-hub's task family and the imported models' tokenizers
WATCHED = ("keras", "keras_hub", "tensorflow", "tensorflow_text")


def register() -> None:
    """Checks Keras's backend and imports every module that registers a class; once."""
    watchers = [finder for finder in sys.meta_path if isinstance(finder, _Watcher)]
    for watcher in watchers:
        sys.meta_path.remove(watcher)
    importlib.import_module(f"{PACKAGE}._backends").check_backend()
    names = REGISTERING
    if importlib.import_module(f"{PACKAGE}._backends").text_stack_installed():
        names += TEXT
    for name in names:
        importlib.import_module(f"{PACKAGE}.{name}")


def install() -> None:
    """Registers now if Keras is loaded, else once it is (the module doc)."""
    if sys.modules.get("keras") is not None:
        register()
    elif not any(isinstance(finder, _Watcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Watcher())


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds the watched modules with the other finders and counts their imports under way."""

    def __init__(self):
        self.depth = 0
        self.local = threading.local()

    def find_spec(self, name, path=None, target=None):
        watched = name in WATCHED or name.startswith(f"{PACKAGE}.")
        if not watched or getattr(self.local, "finding", False):
            return None
        self.local.finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.local.finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _Counted(spec.loader, self)
        return spec

    def finished(self) -> None:
        """An import is over: registers when it was the outermost and Keras is loaded."""
        if self.depth == 0 and sys.modules.get("keras") is not None and self in sys.meta_path:
            register()


class _Counted(importlib.abc.Loader):
    """A watched module's own loader, its import counted by the watcher."""

    def __init__(self, loader, watcher: _Watcher):
        self.loader = loader
        self.watcher = watcher

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader
        self.watcher.depth += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.watcher.depth -= 1
        self.watcher.finished()
