"""The library's light parts for the programs, without `keras_transformer/__init__`.

Importing `keras_transformer.anything` runs the package's `__init__` first, which imports Keras
and so TensorFlow. The programs check their arguments and paths before TensorFlow starts,
and `trainers.translate` runs a CTranslate2 directory without it at all; the parts they use
meanwhile import nothing heavy (`keras_transformer._logs`, the `keras_transformer.serving`
package), and `light_module` loads such a part by its file alone. It is registered under its
own name, so it is the package's own afterwards: a later `import keras_transformer` finds it
in `sys.modules` and loads it no second time.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path


def light_module(name: str) -> types.ModuleType:
    """Module or package `name` of the library ("keras_transformer._logs",
    "keras_transformer.serving"), loaded without the package's `__init__` unless the package
    is imported already. A package's own modules then import as usual, beneath it."""
    if name in sys.modules:
        return sys.modules[name]
    if "keras_transformer" in sys.modules:
        return importlib.import_module(name)
    package = importlib.util.find_spec("keras_transformer")
    path = Path(next(iter(package.submodule_search_locations))).joinpath(*name.split(".")[1:])
    if path.is_dir():
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


__all__ = ["light_module"]
