"""The run report in a real browser: headless Chromium (tests/chromium.py) over the DevTools
protocol. The check itself is checked first: a page with a broken image and a console error
fails it. (The default run's report: tests/e2e/test_tracking_e2e.py.)"""

from __future__ import annotations

from components.tracking.report import write_report
from tests.chromium import Chromium
from tests.run_summaries import fake_summary


def test_the_browser_check_sees_a_broken_image_and_a_console_error(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                    '<img src="data:image/png;base64,AAAA" data-file="broken.png">'
                    '<script>console.error("boom"); undefinedFunction();</script></body></html>')
    with Chromium(tmp_path) as browser:
        loaded = browser.load(page)
    [image] = loaded.images
    assert image["file"] == "broken.png" and image["width"] == 0
    assert any("boom" in error for error in loaded.errors)
    assert any("undefinedFunction" in error for error in loaded.errors)


def test_a_report_opens_from_disk_with_every_image_and_no_error(tmp_path):
    summary = fake_summary(tmp_path)
    report = write_report(summary, {"history": {"loss": [2.0, 1.0], "accuracy": [0.3, 0.6]}})
    with Chromium(tmp_path) as browser:
        loaded = browser.load(report.path)
        shot = browser.screenshot(tmp_path / "report.png")
    assert loaded.errors == []
    assert sorted(image["file"] for image in loaded.images) == sorted(report.figures)
    assert all(image["complete"] and image["width"] > 0 for image in loaded.images)
    assert shot.read_bytes().startswith(b"\x89PNG")
