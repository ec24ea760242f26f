"""The worker process of one background session (``python -m roost_core.worker``)."""
