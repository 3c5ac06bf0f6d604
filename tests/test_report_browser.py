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
    prims = [r.find_element(By.TAG_NAME, "td").text for r in browser.find_elements(By.CSS_SELECTOR, "#primitive-table tr")[1:]]
    assert prims == ["dense", "conv2d", "relu", "sigmoid", "tanh", "softmax", "maxpool2d", "avgpool2d", "batchnorm"]
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
    assert browser.find_elements(By.CSS_SELECTOR, '.graph svg g.node path[stroke="#d62728"], .graph svg g.node polygon[stroke="#d62728"]')
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
