"""ASGI entry point for uvicorn: `uvicorn perfci_server.asgi:app`."""

from .app import create_app

app = create_app()
