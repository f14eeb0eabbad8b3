"""The former name of `keras_transformer.trainers`, kept in the checkout as an alias.

`python -m trainers.train ...` (from the repository's root, as the README and `make demo` run
the programs) runs `keras_transformer.trainers.train`, as `python -m
keras_transformer.trainers.train` and the `kt-train` console script do. Importing a module
under the old name (`from trainers.run_dir import RunDirectory`) gives the new module with a
DeprecationWarning: that alias goes in the next release. The experiments' configurations stay
here, in trainers/configs/.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

import keras_transformer.trainers  # noqa: F401  (its logging setup, as before the move)

NEW = "keras_transformer.trainers"


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `trainers.X` as `keras_transformer.trainers.X`: runpy (`python -m`) gets the new
    module's code to run as `__main__`; an import gets the new module itself."""

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(f"{__name__}."):
            return None
        new = importlib.util.find_spec(NEW + name[len(__name__) :])
        if new is None:
            return None
        return importlib.util.spec_from_loader(name, self, origin=new.origin)

    def create_module(self, spec):
        new = NEW + spec.name[len(__name__) :]
        warnings.warn(
            f"{spec.name} was renamed {new}; the alias {spec.name} will be removed in the next "
            f"release (`python -m {spec.name}` keeps working from the repository's root)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module):
        pass  # the new module, already run

    def get_code(self, name):  # runpy's `python -m trainers.X`
        new = importlib.util.find_spec(NEW + name[len(__name__) :])
        return new.loader.get_code(new.name)


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
