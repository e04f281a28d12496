"""The documentation site: it builds with ``mkdocs build --strict`` (a broken link or a bad API page
fails), and every page, with its images, loads in headless Chromium."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

# fetches every page, then loads each of its images as the browser does, and records what failed
CHECKER = """<!doctype html><html><body><pre id="result"></pre><script>
const pages = %s;
const problems = [];
let images = 0;
async function check(url) {
  const response = await fetch(url);
  if (!response.ok) { problems.push(url + ": " + response.status); return; }
  const doc = new DOMParser().parseFromString(await response.text(), "text/html");
  if (!doc.querySelector("article")) problems.push(url + ": no article");
  for (const img of doc.querySelectorAll("img")) {
    const src = new URL(img.getAttribute("src"), new URL(url, location.href)).href;
    const loaded = await new Promise((done) => {
      const image = new Image();
      image.onload = () => done(image.naturalWidth > 0);
      image.onerror = () => done(false);
      image.src = src;
    });
    images += 1;
    if (!loaded) problems.push(url + ": image " + src + " did not load");
  }
}
(async () => {
  for (const page of pages) await check(page);
  document.getElementById("result").textContent = JSON.stringify({checked: pages.length, images, problems});
  document.body.dataset.done = "1";
})();
</script></body></html>"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_section(site):
    pages = {p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for section in ("getting-started", "concepts/world", "how-to/write-a-reward", "experiments/rl", "performance"):
        assert section in pages
    for package in ("scenarios", "rewards", "envs", "agents", "evaluation", "training"):
        assert f"reference/{package}" in pages
    api = (site / "reference" / "envs" / "index.html").read_text()
    assert "Observation Space" in api and "Version History" in api  # LoopDriveEnv, documented like CartPole
    assert (site / "images" / "cameras_and_bev.png").stat().st_size > 10_000


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (make test installs Debian's chromium)")
def test_every_page_and_image_loads_in_headless_chromium(site, tmp_path):
    pages = sorted({"/" + p.parent.relative_to(site).as_posix().removeprefix(".") for p in site.rglob("index.html")})
    pages = [p.rstrip("/") + "/" for p in pages]
    (site / "_check.html").write_text(CHECKER % json.dumps(pages))
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        flags = "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
        flags += " --disable-component-update --disable-sync --virtual-time-budget=30000 --dump-dom"
        url = f"http://127.0.0.1:{httpd.server_address[1]}/_check.html"
        command = [CHROMIUM, *flags.split(), f"--user-data-dir={tmp_path / 'profile'}", url]
        dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert 'data-done="1"' in dom, "the checker page did not finish"
    result = json.loads(dom.split('<pre id="result">')[1].split("</pre>")[0])
    assert result["checked"] == len(pages) > 20 and result["images"] >= 3
    assert result["problems"] == []
