"""The fake cupy_backends: see cupy/__init__.py."""
