"""ASGI entry point for uvicorn: `uvicorn perfci_server.asgi:app`."""

import gc

from . import logs
from .app import create_app
from .settings import get_settings

# Every process uvicorn starts imports this (`perfci server --workers N` spawns N): each sends its
# lines through logs.py, whatever logging uvicorn set up before.
logs.configure(get_settings())
app = create_app()

# Garbage collection tuned for a server process (measured: benchmarks/server_ingest). With
# CPython's default first-generation threshold (700 allocations) the objects of requests queued
# at saturation (a result document is thousands of objects) survive two collections while they
# wait and reach the oldest generation as garbage; full collections of the whole heap then ran
# every second or so and stalled every request of the process for 100-250 ms. A larger young
# generation lets request garbage die young, and freezing what startup built (the app, its
# models and routes) keeps it out of every later full collection.
gc.freeze()
gc.set_threshold(10_000, 10, 10)
