"""Provider batch-file embedding APIs: the client side (see ``api.py``)."""
