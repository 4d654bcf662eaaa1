"""LL2xx: compiled functions — Python that runs at trace time, not at every call."""
