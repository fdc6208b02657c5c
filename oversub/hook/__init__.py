"""The start-up hook of `oversub run` and `import oversub.auto` (standard library only).

This directory goes first on PYTHONPATH in the tree `oversub run` starts, so its only other
module, `sitecustomize.py`, runs at the start of every Python process there, oversub
installed or not. Nothing else may live here: every module of this directory is importable
by its bare name in those processes.
"""
