"""posenc: position representations for Transformers."""
__version__ = "0.1.0"
