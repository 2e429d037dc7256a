"""memq's library: the machinery behind ``memq``'s public surface.

Use it through the front door, ``from memq import Memory`` (:mod:`memq`). This package exports
nothing itself, so importing one part of it (``pipeline.config`` for the CLI's ``--help``)
loads only that part; docs/architecture.md draws its parts and who may import whom.
"""
