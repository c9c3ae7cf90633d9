"""The fake cupy_backends.cuda.api: see cupy/__init__.py."""
