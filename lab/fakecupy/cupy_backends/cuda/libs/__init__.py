"""The fake cupy_backends.cuda.libs: see cupy/__init__.py."""
