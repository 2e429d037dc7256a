"""The parts of ``memory_search``: tokens, retrievers, fusion, temporal decay and MMR.

``pipeline.query`` puts them together and stays the public entry point.
"""
