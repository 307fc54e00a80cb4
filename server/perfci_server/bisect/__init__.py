"""Server-orchestrated bisection: a bisect row per search, jobs scheduled for one machine's agents,
advanced by a Celery task each time one of its results is ingested."""
