"""The documentation site as a reader sees it: built, then opened in headless Chromium, offline.

The site is built from this checkout (``sphinx-build -W``; ``PYROLIK_DOCS_HTML`` names a build to
reuse instead, as ``.ci/run`` does), and every page that holds a formula or an image is opened from
``file://`` in Debian's Chromium, driven through chromedriver (selenium), with every host name
unresolvable: what a CDN would have served is missing, as it is for a user offline. On each page the
page's JavaScript runs (MathJax typesets), then the test asserts:

- no raw TeX delimiter (``\\(``, ``\\[``, ``$$``) is left in the visible text outside code, every
  formula became a MathJax container, and none is a TeX error;
- every image loaded (``naturalWidth > 0``) and fits the width of the content it sits in;
- at 1280 px nothing sticks out of the page of ``pyrolik.ais`` or of a tutorial: no horizontal
  scroll, and no element reaches past the window's right edge unless a box around it scrolls or
  clips (a wide DataFrame scrolls in its own box).

Chromium is installed by ``.ci/run`` (``apt-get install chromium chromium-driver``); elsewhere the
test is skipped when it is missing, and fails in CI.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WIDTH, HEIGHT = 1280, 900

if not (CHROMIUM and CHROMEDRIVER) and "CI" not in os.environ:
    pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium "
                "chromium-driver; .ci/run installs them)", allow_module_level=True)
if "CI" in os.environ:
    from selenium import webdriver  # the test extra installs it: missing in CI is a failure
else:
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install -e '.[test]'")


@pytest.fixture(scope="module")
def site(docs_site) -> Path:
    return docs_site


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
                 # offline: no host name resolves, so a CDN script or font fails as it would offline
                 "--host-resolver-rules=MAP * ~NOTFOUND",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager never downloads a driver
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


# Runs in the page once it has loaded: waits for MathJax (when it loaded) and for every image,
# then measures. Text inside code is left out: a code example may well show a backslash-paren.
INSPECT = r"""
const measureOverflow = arguments[0];
const done = arguments[arguments.length - 1];
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map(img => img.complete ? null : new Promise(ok => {
    img.addEventListener("load", ok); img.addEventListener("error", ok); setTimeout(ok, 10000);
  })));
  await document.fonts.ready;
  const skip = "pre, code, script, style, textarea, mjx-container, .highlight";
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || el.closest(skip) || !el.getClientRects().length) continue;
    if (getComputedStyle(el).visibility === "hidden") continue;
    const text = node.textContent;
    if (/\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{/.test(text)) raw.push(text.trim().slice(0, 120));
  }
  const math = Array.from(document.querySelectorAll(".math"));
  const untypeset = math.filter(m => !m.querySelector("mjx-container") &&
                                     m.tagName !== "MJX-CONTAINER").length;
  const errors = Array.from(document.querySelectorAll("mjx-merror"))
                   .map(e => (e.getAttribute("data-mjx-error") || e.textContent).slice(0, 120));
  const failedFonts = Array.from(document.fonts).filter(f => f.status === "error")
                        .map(f => f.family);
  const width = document.documentElement.clientWidth;
  const brokenImages = [], wideImages = [];
  for (const img of images) {
    const name = img.getAttribute("src");
    if (!img.complete || img.naturalWidth === 0) { brokenImages.push(name); continue; }
    const box = img.getBoundingClientRect();
    const parent = img.closest("article, .bd-article, .body, main") || document.body;
    const room = parent.getBoundingClientRect();
    if (box.width > 0 && box.right > room.right + 1) wideImages.push(name);
  }
  const clips = el => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o !== "visible") return true;
    }
    return false;
  };
  const sticking = [];
  for (const el of measureOverflow ? document.body.querySelectorAll("*") : []) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) continue;
    if (getComputedStyle(el).position === "fixed" || clips(el)) continue;
    sticking.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(box.right)}`);
  }
  done({raw, math: math.length, untypeset, errors, failedFonts, brokenImages, wideImages,
        images: images.length, scrollWidth: document.documentElement.scrollWidth, width,
        sticking: sticking.slice(0, 10),
        mathjax: !!(window.MathJax && MathJax.version), title: document.title});
})().catch(e => done({exception: String(e)}));
"""


def inspect(driver, page: Path, overflow: bool = False) -> dict:
    driver.get(page.as_uri())
    report = driver.execute_async_script(INSPECT, overflow)
    assert "exception" not in report, f"{page}: {report}"
    return report


def pages_to_open(site: Path) -> list[Path]:
    """Every page with a formula or an image (the search and index pages have neither)."""
    out = []
    for page in sorted(site.rglob("*.html")):
        if "_static" in page.parts or "_sources" in page.parts:
            continue
        text = page.read_text(errors="replace")
        if 'class="math' in text or "<img" in text:
            out.append(page)
    return out


def page_of(site: Path, name: str) -> Path:
    """The HTML page that documents ``name``, read off the site's inventory (objects.inv)."""
    from sphinx.util.inventory import InventoryFile

    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    for kind, entries in inventory.data.items() if hasattr(inventory, "data") else inventory.items():
        if kind.startswith("py:") and name in entries:
            entry = entries[name]
            uri = entry.uri if hasattr(entry, "uri") else entry[2]
            return site / uri.split("#")[0]
    raise AssertionError(f"{name} is not in the site's inventory")


def test_every_formula_renders_and_every_image_loads_offline(site, browser):
    pages = pages_to_open(site)
    assert len(pages) >= 10, pages
    t0 = time.perf_counter()
    problems, formulas, images = {}, 0, 0
    for page in pages:
        # the tutorials hold the widest outputs (DataFrames, figures): nothing may stick out there
        r = inspect(browser, page, overflow="tutorials" in page.parts)
        formulas += r["math"]
        images += r["images"]
        bad = {k: r[k] for k in ("raw", "errors", "failedFonts", "brokenImages", "wideImages")
               if r[k]}
        if r["untypeset"]:
            bad["untypeset"] = r["untypeset"]
        if r["math"] and not r["mathjax"]:
            bad["mathjax"] = "MathJax did not load"
        if r["scrollWidth"] > r["width"] or r["sticking"]:
            bad["overflow"] = (r["scrollWidth"], r["sticking"])
        if bad:
            problems[str(page.relative_to(site))] = bad
    assert not problems, f"{len(problems)} of {len(pages)} pages: {problems}"
    # the check has something to check: the kernel page alone has dozens of formulas
    assert formulas >= 100 and images >= 10, (formulas, images)
    print(f"{len(pages)} pages, {formulas} formulas, {images} images, "
          f"{time.perf_counter() - t0:.0f} s")


def test_the_page_of_ais_fits_1280_pixels(site, browser):
    page = page_of(site, "pyrolik.ais")
    assert page.stem == "pyrolik.ais", f"pyrolik.ais is not on a page of its own: {page}"
    r = inspect(browser, page, overflow=True)
    assert r["width"] <= WIDTH and r["width"] >= WIDTH - 40, r["width"]  # the window is 1280 wide
    assert r["scrollWidth"] <= r["width"], f"{page.name} scrolls sideways: {r}"
    assert not r["sticking"], f"{page.name}: elements past the right edge: {r['sticking']}"
    assert r["math"] > 0 and not r["raw"], r


def test_the_check_sees_raw_tex(browser, tmp_path):
    """The inspection can fail: a page whose MathJax never loads keeps its raw delimiters."""
    page = tmp_path / "raw.html"
    page.write_text('<html><head><script src="https://cdn.example.org/mathjax.js"></script></head>'
                    '<body><p><span class="math">\\(x^2\\)</span></p><img src="missing.png">'
                    '<div style="width: 3000px">wide</div></body></html>')
    r = inspect(browser, page, overflow=True)
    assert r["raw"] and r["untypeset"] == 1 and r["brokenImages"] == ["missing.png"]
    assert r["scrollWidth"] > r["width"] and r["sticking"]
