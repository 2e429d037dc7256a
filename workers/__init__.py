"""memq's Celery side: ``celery -A workers worker -Q embed.local`` finds the app here."""

from workers.app import app

__all__ = ["app"]
