"""`robustfl report STORE --format html`: one self-contained page, checked by parsing and in a real
headless Chromium (skipped, saying so, where no Chromium is installed)."""

from __future__ import annotations

import base64
import io
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from robustfl.cli import main
from robustfl.reporting import curves
from robustfl.simulation.results import Cell

from ..conftest import ROOT
from ..factories import write_store

ROUNDS = 6
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _cell(
    attack: str,
    defense: str,
    seed: int,
    drift0: float,
    *,
    status: str = "ok",
    point: float | None = None,
    weighted: bool = True,
) -> Cell:
    """A hand-made cell whose relative drift decays geometrically from ``drift0``."""
    rounds = []
    n = 2 if status == "diverged" else ROUNDS
    for r in range(1, n + 1):
        m: dict[str, object] = {"round": r, "relative_drift": drift0 * 0.7**r, "drift": 2 * drift0 * 0.7**r}
        if status == "diverged" and r == n:
            m["relative_drift"] = m["drift"] = None
        if weighted:
            m["byzantine_weight"] = 0.2 / r if attack != "none" else 0.0
            m["detection_precision"] = 1.0 if attack != "none" else None
            m["detection_recall"] = min(1.0, 0.2 * r) if attack != "none" else None
        m.update({"defense": {}, "algorithm": {}, "sharing": {}})
        rounds.append(m)
    return Cell(
        attack,
        defense,
        seed,
        status=status,
        error="model diverged" if status == "diverged" else None,
        final=dict(rounds[-1]) if status != "failed" else {},
        rounds=rounds if status != "failed" else [],
        sweep={"threat.byzantine": point} if point is not None else {},
    )


SEEDS_DRIFT = {0: 1.0, 1: 2.0, 2: 4.0}  # sign_flip x fltrust: final drifts 0.7^6 x (1, 2, 4)


def _cells() -> list[Cell]:
    cells = []
    for point in (0.1, 0.3):
        for attack in ("none", "sign_flip", "ipm-<b>"):
            for defense in ("fedavg", "fltrust", "median"):
                for seed, d0 in SEEDS_DRIFT.items():
                    status = "ok"
                    if (attack, defense, seed) == ("ipm-<b>", "fedavg", 2):
                        status = "diverged"
                    if (attack, defense, seed) == ("ipm-<b>", "median", 1):
                        status = "failed"
                    cells.append(
                        _cell(
                            attack,
                            defense,
                            seed,
                            d0 * (1 + point),
                            status=status,
                            point=point,
                            weighted=defense != "median",
                        )
                    )
    return cells


PROVENANCE = {
    "robustfl": "9.9.9-test",
    "torch": "2.13.0",
    "numpy": "2.0",
    "python": "3.11.7",
    "scenario_hash": "abc123def456",
    "origins": {"sign_flip": "built-in", "nan_rows": "plugin file /x/y.py"},
    "overrides": ["federation.rounds=6"],
    "created": 1.7e9,
}


def _store(path: Path, cells: list[Cell] | None = None) -> Path:
    copies = [Cell.from_json(c.to_json()) for c in (cells if cells is not None else _cells())]
    for c in copies:
        if c.status == "failed":
            c.error = "RuntimeError: injected <fault>"
    return write_store(path, copies, run=({"task": {"name": "ridge"}}, PROVENANCE))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(text)
    p.close()
    return p.tags


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    store = _store(tmp / "runs.db")
    out = tmp / "out" / "report.html"
    assert main(["report", str(store), "--format", "html", "--output", str(out)]) == 0
    return out


def test_page_is_self_contained(report_page: Path) -> None:
    text = report_page.read_text(encoding="utf-8")
    tags = _tags(text)
    # No network: no external src/href, no stylesheet link, no script, no CSS url().
    for tag, attrs in tags:
        for name in ("src", "href", "srcset", "data", "poster", "action"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:", "file:")), (tag, name, value)
        if "href" in attrs:  # in-page anchors only
            assert (attrs["href"] or "").startswith("#"), attrs
    assert not [t for t, _ in tags if t in ("link", "script", "iframe", "object", "embed")]
    assert "url(" not in text and "@import" not in text
    imgs = [attrs for tag, attrs in tags if tag == "img"]
    assert len(imgs) == 5  # heatmap + (drift curves, weight diagnostics) per sweep point
    for attrs in imgs:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_SIGNATURE)
        Image.open(io.BytesIO(data)).verify()  # a complete, valid PNG (chunks and CRCs)
        w, h = Image.open(io.BytesIO(data)).size
        assert w > 200 and h > 150
        assert attrs.get("alt")


def test_table_mean_and_95_interval_and_provenance(report_page: Path) -> None:
    text = report_page.read_text(encoding="utf-8")
    # sign_flip x fltrust at threat.byzantine=0.3: final drift 1.3 * 0.7^6 * (1, 2, 4).
    values = np.array([1.3 * d * 0.7**ROUNDS for d in SEEDS_DRIFT.values()])
    half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3)
    assert f"{values.mean():.3g} ± {half:.2g}" in text
    assert "diverged (1/3)" in text and "(1 failed)" in text
    # Labels and errors are escaped, never markup.
    assert "ipm-&lt;b&gt;" in text and "<b>" not in text
    assert "RuntimeError: injected &lt;fault&gt;" in text
    # Provenance of the last run.
    for needle in ("9.9.9-test", "abc123def456", "plugin file /x/y.py", "federation.rounds=6"):
        assert needle in text
    assert "threat.byzantine=0.1" in text and "threat.byzantine=0.3" in text


def test_curve_matches_numpy() -> None:
    """Per round: the mean over the seeds that reached it, with the 95 % Student-t half-width."""
    cells = [_cell("a", "d", s, d0) for s, d0 in SEEDS_DRIFT.items()]
    cells.append(_cell("a", "d", 9, 8.0, status="diverged"))  # reaches round 1 only (round 2 is null)
    xs, means, halves = curves.curve(cells, "relative_drift")
    assert xs == list(range(1, ROUNDS + 1))
    for r, m, h in zip(xs, means, halves, strict=True):
        v = np.array([d0 * 0.7**r for d0 in SEEDS_DRIFT.values()] + ([8.0 * 0.7] if r == 1 else []))
        assert m == pytest.approx(v.mean(), rel=1e-12)
        assert h == pytest.approx(
            stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)), rel=1e-9
        )
    one = curves.curve(cells[:1], "relative_drift")
    assert all(math.isnan(h) for h in one[2])  # one seed: no interval


def test_html_to_stdout_and_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store(tmp_path / "empty.db", cells=[])
    assert main(["report", str(store), "--format", "html"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!DOCTYPE html>") and "no cells" in out and "<img" not in out
    assert main(["report", str(tmp_path / "missing.db"), "--format", "html"]) == 2


def test_matplotlib_not_imported_by_reporting_and_sweep_modules() -> None:
    code = (
        "import sys, robustfl.reporting, robustfl.reporting.page, robustfl.reporting.compare,"
        " robustfl.sweep.driver; "
        "print('matplotlib' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- a real browser ---------------------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


# On load, write into the DOM which images failed to decode (naturalWidth 0) and how many there are.
CHECK_SCRIPT = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images), broken = [];
  imgs.forEach(function (img, i) { if (!(img.complete && img.naturalWidth > 0)) broken.push(i); });
  document.body.dataset.imagesCount = String(imgs.length);
  document.body.dataset.imagesBroken = broken.join(",");
  document.body.dataset.imagesOk = (imgs.length > 0 && broken.length === 0) ? "true" : "false";
});
</script>"""
BROKEN_IMG = '<img id="control" src="data:image/png;base64,AAAAAAAA" alt="negative control">'


def _browser(exe: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp / 'profile'}",
    ]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_page_renders_in_headless_chromium(report_page: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium found (install it: apt-get install -y chromium); browser check not run")
    text = report_page.read_text(encoding="utf-8")
    n_img = text.count("<img")

    # 1. Every image decodes in the browser. The checking script and a deliberately broken image
    #    (a negative control: the check must catch it) go into a copy of the page.
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", BROKEN_IMG + CHECK_SCRIPT + "</body>"), encoding="utf-8")
    res = _browser(exe, tmp_path, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    body = re.search(r"<body[^>]*>", res.stdout)
    assert body is not None, res.stdout[:2000]
    attrs = dict(re.findall(r'(data-[\w-]+)="([^"]*)"', body.group(0)))
    assert attrs.get("data-images-count") == str(n_img + 1), attrs
    assert attrs.get("data-images-broken") == str(n_img), attrs  # only the control is broken
    assert attrs.get("data-images-ok") == "false"

    # 2. The page itself, as shipped, in a screenshot.
    shot = tmp_path / "shot.png"
    res = _browser(
        exe,
        tmp_path,
        "--window-size=1280,2000",
        f"--screenshot={shot}",
        "--hide-scrollbars",
        report_page.as_uri(),
    )
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2000)
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # rendered figures, not a blank page
    target = os.environ.get("ROBUSTFL_SCREENSHOT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
