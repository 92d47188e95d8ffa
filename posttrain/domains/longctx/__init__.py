"""Long context: needle-in-a-haystack probes (source.py, filler.py), the `needle` verifier (needle.py),
the eval's lost-in-the-middle table (analysis.py) and its report section (report.py)."""

from posttrain.verifiers.registry import register

register("needle", "posttrain.domains.longctx.needle:needle")

from posttrain.domains.longctx import source  # noqa: E402,F401  (registers needle, needle_multi, needle_multihop)
