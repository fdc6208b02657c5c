"""oversub: find CPU oversubscription in multi-process Python jobs and say how to fix it."""

__version__ = "0.1.0"
