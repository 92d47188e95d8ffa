"""The `document` environment: long-report QA with retrieval tools and cited answers (docs/document.md).

report.py generates the report, questions.py its question, search.py the BM25 retrieval, cite.py
the reward (answer right AND cited spans that support it), env.py the tools.
"""

from posttrain.envs.env import Resources, register_env
from posttrain.domains.document.env import DocumentEnv


@register_env("document")
def make_document_env(resources: Resources) -> DocumentEnv:
    return DocumentEnv(resources)
