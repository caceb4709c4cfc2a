"""The package's version, in a module of its own: ``base`` records it in every pickle,
and reading it from here does not import the package's estimators (which import
``base``: an import circle)."""

__version__ = "0.1.0"
