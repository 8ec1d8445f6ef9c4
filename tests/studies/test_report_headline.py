"""The report's headline paragraph (attnum.studies.paper.report.headline): every number and every verdict word from the cells."""

from attnum.studies.paper.report.findings import Cell, ClaimMap
from attnum.studies.paper.report.headline import paper_headline


def _cell(policy, variant, n, bc, ratio, site=None, bias=None, baseline=None):
    numbers = {"ratio": ratio, "Tc": n // bc, "dominant_site": site, "bias_flash": bias}
    return Cell(coords={"policy": policy, "baseline_policy": baseline, "variant": variant, "seq_len": n, "Bc": bc},
                verdict="holds" if ratio >= 3.16 else "does not hold", value=ratio, text="", numbers=numbers)


def _maps(cells):
    return [ClaimMap(claim_id="ten_x", figure="Fig. 4", claim="x", value_label="ratio", cells=tuple(cells))]


GRID = [
    _cell("uniform", "fa2", 1024, 64, 1.4), _cell("uniform", "fa2", 4096, 32, 3.5),
    _cell("uniform", "fa2", 8192, 16, 22.0, site="row_sum (alone 1.00 of flash's error, seed 0)", bias=0.99),
    _cell("fa2", "fa2", 1024, 64, 0.88), _cell("fa2", "fa2", 8192, 16, 0.85),
    _cell("fa2", "fa2", 8192, 16, 0.29, baseline="torch-eager"),
]


def test_headline_says_where_how_large_which_site_and_what_real_kernels_show():
    text = " ".join(paper_headline(_maps(GRID)))
    assert "reaches 22x the baseline's" in text and "N = 8192, Bc = 16" in text and "Tc = 512" in text
    assert "2 of 6 configurations" in text and "policy / variant uniform / fa2" in text
    assert ">= 3.2x in every one with Tc = S/Bc >= 128 and below it in every one with Tc <= 16" in text
    assert "the running sum l (site row_sum, in bf16)" in text and "alone gives 1.00" in text
    assert "magnitude bias +0.99 (|O| comes out too large)" in text
    assert "0.85..0.88x over 2 configurations" in text and "0.29..0.29x over 1" in text
    assert "do not show the excess" in text


def test_headline_follows_the_data_when_nothing_reaches_the_band_or_fa2_does():
    flat = [_cell("uniform", "fa2", 1024, 64, 1.4), _cell("fa2", "fa2", 1024, 64, 0.9)]
    text = " ".join(paper_headline(_maps(flat)))
    assert text.startswith("Nowhere in this grid") and "largest ratio is 1.4x" in text and "not reproduced" in text
    hot_fa2 = [*GRID, _cell("fa2", "fa2", 8192, 8, 5.0)]
    assert "is not only a property of bf16 statistics (1 cells reach it)" in " ".join(paper_headline(_maps(hot_fa2)))
    assert paper_headline([]) == [] and paper_headline(_maps([])) == []


def test_in_short_is_one_plain_sentence_from_the_same_cells():
    from attnum.studies.paper.report.headline import paper_in_short

    text = paper_in_short(_maps(GRID))
    assert text.startswith("In short: at bf16, flash attention's error is up to 22x that of standard attention")
    assert "keeps its softmax statistics in bf16 (policy uniform)" in text and "variant fa1" not in text
    assert "(Tc = S/Bc >= 128)" in text and "stay at standard attention's error (0.85..0.88x)" in text
    assert text.endswith(".") and ". " not in text  # one sentence
    fa1 = [*GRID, _cell("fa2", "fa1", 8192, 16, 19.0)]
    assert "(policy uniform) or rounds its output at every tile (variant fa1)" in paper_in_short(_maps(fa1))
    flat = [_cell("uniform", "fa2", 1024, 64, 1.4), _cell("fa2", "fa2", 1024, 64, 0.9)]
    assert "not reproduced here" in paper_in_short(_maps(flat)) and "1.4x" in paper_in_short(_maps(flat))
    assert paper_in_short([]) == ""


def test_the_report_lead_defines_its_terms():
    from attnum.studies.paper.report.headline import GLOSSARY, paper_in_short
    from attnum.studies.paper.report.section import lead_html

    page = lead_html(paper_in_short(_maps(GRID)), paper_headline(_maps(GRID)))
    assert page.startswith("<p class='lead'>In short:")
    for term in ("Tc", "Bc", "policy", "variant", "site"):
        assert f"<b>{term}</b>: " in page, term  # the glossary line
        assert f"'>{term}</abbr>" in page, term  # and a hover on its first use
    assert page.count("<abbr") == len([t for t in GLOSSARY if f">{t}</abbr>" in page])
    assert "reaches 22x the <abbr" in page and "alone gives 1.00" in page and "Tc = 512" in page  # numbers stay
