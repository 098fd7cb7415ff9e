"""One module per backend; each subclasses ``zstores.base.Store``."""
