"""The `document` environment: long-report QA with retrieval tools and cited answers (docs/document.md).

report.py generates the report (blocks.py its parts), questions.py its question, search.py the BM25
retrieval, cite.py the reward (answer right AND cited spans that support it), env.py the tools,
source.py the generated `document` task source.
"""

from posttrain.envs.env import register_env

register_env("document", "posttrain.domains.document.env:DocumentEnv")

from posttrain.domains.document import source  # noqa: E402,F401  (registers the `document` source)
