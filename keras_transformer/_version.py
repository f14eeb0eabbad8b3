"""This package's version, in a module of its own: what the exports record in their manifests
without importing the package around them."""

__version__ = "0.1.0"

__all__ = ["__version__"]
