"""The bias profile's index.html in headless Chromium (the harness of test_report_chromium): every
figure decodes, the console stays silent, and a broken figure is caught."""

from __future__ import annotations

import re

import pytest
from test_report_chromium import BROWSER, figures_marker, render

from attnum.studies.training.bias.study import BiasConfig, run_bias

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless browser found; apt-get install -y chromium")


@pytest.fixture(scope="module")
def bias_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("bias_report")
    run_bias(BiasConfig(profile="bias-tiny", steps=4, out=out), log=lambda *_: None, progress=False)
    return out / "index.html"


def test_bias_report_renders(bias_page, tmp_path):
    dom, console = render(bias_page, tmp_path / "profile")
    assert figures_marker(dom) == (3, 3)  # loss, spectral norms, signed errors
    assert console == []
    assert "Headline" in dom and "Magnitude bias per rounding site" in dom


def test_bias_report_check_catches_a_broken_figure(bias_page, tmp_path):
    page = bias_page.read_text()
    broken = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]{40}", "data:image/png;base64,AAAA", page, count=1)
    bad = tmp_path / "broken.html"
    bad.write_text(broken)
    dom, _ = render(bad, tmp_path / "profile")
    assert figures_marker(dom) == (2, 3)
