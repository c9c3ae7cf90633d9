"""The fake cupy_backends.cuda: see cupy/__init__.py."""
