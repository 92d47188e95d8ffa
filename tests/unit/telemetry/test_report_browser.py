"""report.html in a real browser (headless Debian `chromium`): the page leads with the verdict line, then the
per-stage change table and example completions; every figure decodes, the headline table is there,
nothing is fetched; a screenshot of the top of the page is kept as a test artefact.

    POSTTRAIN_ARTIFACTS=artifacts .venv/bin/python -m pytest tests/unit/telemetry/test_report_browser.py -s

The screenshot goes to $POSTTRAIN_ARTIFACTS (else the test's tmp_path) as report_browser.png; its path
is printed. Skipped only when no chromium binary is installed (`make setup` installs it).
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pytest

from posttrain.telemetry.plots import grouped_bar_plot
from posttrain.telemetry.report import write_report
from posttrain.telemetry.report.evals import EXTRA_TABLES
from posttrain.telemetry.report.html import img
from tests.unit.telemetry.report_fixtures import lead_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1280, 2400)
BROKEN = '<img id="control" src="data:image/png;base64,AAAA" alt="control">'  # must not decode
# Run on load (after every image has loaded or failed): write what the page saw into the DOM for --dump-dom.
CHECK = """<script>
window.addEventListener("load", () => {
  const out = {images: Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight]),
               headline_rows: document.querySelectorAll("table.headline tbody tr").length,
               first_h2: document.querySelector("h2").textContent,
               verdict: (document.querySelector("p.verdict") || {}).innerText,
               verdict_top: (document.querySelector("p.verdict") || {getBoundingClientRect: () => ({top: -1})})
                 .getBoundingClientRect().top,
               stage_rows: document.querySelectorAll("table.stages tbody tr").length,
               examples: document.querySelectorAll("table.examples pre.completion").length,
               fetched: performance.getEntriesByType("resource").map(r => r.name)};
  const pre = document.createElement("pre");
  pre.id = "browser-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")


def fake_heatmap(data: dict, kit) -> str:
    return img(grouped_bar_plot(["4k", "8k"], {"depth 0.5": data["acc"]}, title="long context"), "long-context heatmap")


def _chromium(profile: Path, *args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={profile}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_report_in_headless_chromium(tmp_path, monkeypatch):
    monkeypatch.setitem(EXTRA_TABLES, "long_context", f"{__name__}:fake_heatmap")
    run = lead_run(tmp_path / "run")
    rl_eval = run / "eval" / "general" / "rl.json"
    rl_eval.write_text(json.dumps({**json.loads(rl_eval.read_text()), "long_context": {"acc": [0.9, 0.6]}}))
    report = write_report(run)
    html = report.read_text()
    n_images = html.count("<img ")
    assert n_images > 10 and "long-context heatmap" in html

    artifacts = Path(os.environ.get("POSTTRAIN_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report_browser.png"
    _chromium(tmp_path / "profile", f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--screenshot={shot}",
              report.as_uri())
    print(f"report screenshot: {shot}")
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert (pixels[..., :3].min(axis=-1) < 0.9).mean() > 0.02  # not a blank page: text, tables and plots drawn

    probe = report.with_name("browser_check.html")  # the report itself holds no script; a copy gets the probe
    probe.write_text(html.replace("</body>", BROKEN + CHECK + "</body>"))
    dom = _chromium(tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    seen = json.loads(html_lib.unescape(found.group(1)))
    *images, control = seen["images"]
    assert control[0] == "control" and control[2] == 0  # an undecodable image does read naturalWidth 0
    assert len(images) == n_images
    bad = [alt for alt, complete, width, height in images if not (complete and width > 0 and height > 0)]
    assert not bad, bad
    assert "long-context heatmap" in [alt for alt, *_ in images]
    assert seen["headline_rows"] == 3  # base, sft, rl
    # the first screen: the verdict right under the headline title, then the stage table and completions
    assert seen["first_h2"] == "Headline" and 0 < seen["verdict_top"] < 400
    assert seen["verdict"].startswith("rl raised general pass@1 from 0.3 (base) to 0.45 (+15.0 points, p < 0.001, "
                                      "n = 200, significant) in 11.5 min")
    assert "WARNING: base stopped by its time cap" in seen["verdict"]
    assert seen["stage_rows"] == 9  # 3 stages x (overall + 2 domains)
    assert seen["examples"] >= 8  # rendered completion cells (empty ones are flagged, not cells)
    assert [u for u in seen["fetched"] if not u.startswith("data:")] == []
