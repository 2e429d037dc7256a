"""Voyage's Batch API: OpenAI's Files and Batches routes, with Voyage's differences.

Lines carry only ``{custom_id, body: {input: [text]}}``; the model and ``input_type`` go once
in the create call's ``request_params`` (the document input type the sync path uses, so both
paths give the same vectors). The window is 12 h; a job holds at most 100,000 inputs and a
1 GB file (docs.voyageai.com/docs/batch-inference). Timestamps are ISO strings, which memq
does not read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pipeline.batch.api import BatchRequest
from pipeline.batch.openai import OpenAIBatchApi

__all__ = ["VoyageBatchApi"]


class VoyageBatchApi(OpenAIBatchApi):
    """The :class:`~pipeline.batch.api.BatchApi` of Voyage AI."""

    provider: ClassVar[str] = "voyage"
    max_requests: ClassVar[int] = 100_000
    max_bytes: ClassVar[int] = 1000 * 1000 * 1000
    completion_window: ClassVar[str] = "12h"

    def _line(self, request: BatchRequest) -> dict[str, Any]:
        return {"custom_id": request.custom_id, "body": {"input": [request.text]}}

    def _create_body(self, file_id: str, display_name: str) -> dict[str, Any]:
        params = {"model": self.model,
                  "input_type": getattr(self._provider, "input_types", {}).get("document")}
        return {**super()._create_body(file_id, display_name), "request_params": params}
