"""The one place kbatch's version is written (read by setuptools and by ``kbatch.__version__``)."""

__version__ = "0.1.0.dev0"
