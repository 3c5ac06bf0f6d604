"""The survey report, opened as a person would: in headless Chromium, from disk.

Checks that pages load with no console errors, that the call graphs are drawn,
that split points and gaps are visible, that links between pages work, and
saves a screenshot of each page (next to the report, in screenshots/).
"""

from __future__ import annotations

import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tracer.contract import PRIMITIVES

CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium, driver_exe = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_exe, "chromium and chromedriver are installed by the set-up (make test)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_exe), options=opts)
    yield driver
    driver.quit()


def open_page(browser, path):
    browser.get(path.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    shots = path.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(max(height, 800), 6000))
    assert browser.save_screenshot(str(shots / f"{path.stem}.png"))


def test_index_lists_every_framework_and_links_work(browser, survey_report):
    open_page(browser, survey_report)
    rows = browser.find_elements(By.CSS_SELECTOR, "#framework-table tr")[1:]
    assert [r.find_element(By.TAG_NAME, "a").text for r in rows] == ["chainer", "jax", "mxnet", "tensorflow", "torch"]
    assert all(r.is_displayed() for r in rows)
    prims = [r.find_element(By.TAG_NAME, "td").text
             for r in browser.find_elements(By.CSS_SELECTOR, "#primitive-table tr")
             if r.find_elements(By.TAG_NAME, "td")]
    assert prims == list(PRIMITIVES)  # the contract's order: the CNN nine, then the transformer six
    for name in ["chainer", "jax", "mxnet", "tensorflow", "torch"]:
        browser.find_element(By.LINK_TEXT, name).click()
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith(name)
        assert browser.find_element(By.CSS_SELECTOR, "#audit-table").is_displayed()
        browser.back()


@pytest.mark.parametrize("framework", ["jax", "torch", "tensorflow", "mxnet"])
def test_split_points_and_graphs_are_visible(browser, survey_report, framework):
    page = survey_report.parent / f"{framework}.html"
    open_page(browser, page)
    splits = [s for s in browser.find_elements(By.CSS_SELECTOR, ".split") if s.is_displayed()]
    assert splits, f"no split point visible on {framework}'s page"
    assert "split at" in splits[0].text
    svgs = browser.find_elements(By.CSS_SELECTOR, ".graph svg")
    assert svgs and svgs[0].is_displayed()
    # the graph is really drawn: Graphviz nodes with a size, a split node outlined in red
    box = svgs[0].rect
    assert box["width"] > 100 and box["height"] > 50
    assert browser.find_elements(By.CSS_SELECTOR, ".graph svg g.node")
    assert browser.find_elements(By.CSS_SELECTOR, '.graph svg g.node path[stroke="#d62728"], '
                                                  '.graph svg g.node polygon[stroke="#d62728"]')
    # the full graph is a page of its own
    full = browser.find_elements(By.LINK_TEXT, "full graph")
    if full:
        full[0].click()
        assert browser.find_element(By.TAG_NAME, "svg").is_displayed()
        browser.back()


def test_chainer_shows_its_device_branch(browser, survey_report):
    open_page(browser, survey_report.parent / "chainer.html")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "device branch(es) in the Python path" in body
    conv = browser.find_element(By.ID, "conv2d-functional")
    summary = conv.find_element(By.XPATH, ".//summary[contains(., 'device branch')]")
    summary.click()
    # chainer's FunctionNode.forward: isinstance(inputs[0], cuda.ndarray) -> forward_gpu, else forward_cpu
    cell = conv.find_element(By.XPATH, ".//td[contains(., 'forward_gpu')]")
    assert cell.is_displayed() and "forward_cpu" in cell.text


def test_gpu_cells_show_their_evidence_class_and_fit_the_page(browser, survey_report):
    """torch's page sets each primitive and pass's CPU op and kernel against the GPU's,
    every GPU entry with its evidence class and source; a cell with none says so; the
    index counts each framework's cells with evidence; tables stay within the page."""
    open_page(browser, survey_report.parent / "torch.html")
    rows = browser.find_elements(By.CSS_SELECTOR, "#gpu-table tr.gpu-cell")
    cells = sum(len(p.passes) for p in PRIMITIVES.values())  # every primitive and its passes (adam: forward)
    assert len(rows) == cells
    conv = browser.find_element(By.CSS_SELECTOR, '#gpu-table tr[data-primitive="conv2d"][data-pass="forward"]')
    assert "aten::mkldnn_convolution" in conv.text and "oneDNN" in conv.text
    # the strongest: dltrace's own run on a GPU machine (tracer/reference/recorded), with
    # what cuDNN logged it ran; the profiles of others are listed after it
    entry = conv.find_element(By.CSS_SELECTOR, ".gpu-evidence")
    assert entry.get_attribute("data-evidence") == "recorded"
    assert entry.find_element(By.CSS_SELECTOR, ".tag.ev").text == "recorded"
    assert "dltrace on NVIDIA H100" in entry.text and "cudnn_convolution" in entry.text
    assert "cudnnBackendExecute convolution_forward" in entry.find_element(By.CSS_SELECTOR, ".reported").text
    kernels = entry.find_elements(By.CSS_SELECTOR, "code.kernel")
    assert kernels and all(k.get_attribute("title") for k in kernels)  # the full name on hover
    others = {e.get_attribute("data-evidence") for e in conv.find_elements(By.CSS_SELECTOR, ".gpu-evidence")[1:]}
    assert {"imported", "registered"} <= others
    for row in rows:
        if row.get_attribute("data-evidence") == "none":
            assert "no GPU evidence" in row.text
        else:
            assert row.find_element(By.CSS_SELECTOR, ".gpu-evidence .tag.ev").text in (
                "recorded", "imported", "compiled", "lowered", "registered", "source")
    width = browser.execute_script("return document.documentElement.clientWidth")
    table = browser.find_element(By.ID, "gpu-table")
    assert table.rect["x"] + table.rect["width"] <= width + 1
    # no model context row in the dispatch points
    dispatch = browser.find_element(By.ID, "dispatch-table").text
    assert "model context" not in dispatch and "version difference" not in dispatch
    open_page(browser, survey_report)
    torch = browser.find_element(By.XPATH, "//table[@id='framework-table']//tr[td/a[normalize-space(.)='torch']]")
    covered = torch.find_element(By.CSS_SELECTOR, "td.gpu-coverage")
    assert int(covered.get_attribute("data-covered")) == cells and "recorded" in covered.text
    column = browser.find_element(By.CSS_SELECTOR, '#primitive-table td.gpu-column[data-framework="torch"]')
    assert column.find_element(By.CSS_SELECTOR, ".tag.ev").text == "recorded"
    table = browser.find_element(By.ID, "primitive-table")
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert table.rect["x"] + table.rect["width"] <= width + 1
