"""``memq eval``: retrieval quality measured through memq's own indexing and search.

:mod:`.metrics` holds the ranking metrics, :mod:`.workspace` indexes a generated workspace
with ``run_index`` and searches it in each mode, :mod:`.beir` and :mod:`.locomo` turn the two
kinds of public collections into memory files and score the answers, :mod:`.report` prints.
"""
