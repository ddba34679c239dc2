"""arlgym's version, in a module of its own so that any layer can print it (``--version``, the
env server's ``/health``, run records) without importing the package's public API."""

__version__ = "0.1.0"
