"""Entry points (``fit``, ``evaluate``) and the data pipeline."""
