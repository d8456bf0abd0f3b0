"""The operator's live view (/shop/live) in headless Chromium, against the application
under Spin, while buyers buy from Python at the same time.

Run by scripts/test-browser.sh after sale_page.py, with the same environment. The page is
opened from the storefront's origin, so that GET /metrics is called through CORS. Saves
live-view.png into SCREENSHOT_DIR, as sale_page.py does. Prints "N passed, N failed"
last; exits non-zero on any failure.
"""

import os
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

# The sale page's test already has the set-up: a browser, tokens, vouchers, waiting.
from sale_page import (
    ADMIN_TOKEN, API, SCREENSHOT_DIR, STOREFRONT, buyer_token, create_voucher, run, text,
    wait_for,
)

SCREENSHOT = os.path.join(SCREENSHOT_DIR, "live-view.png")
# Colours as live.js draws them: two outcomes' bars, and the two lines.
ADMITTED, SOLD_OUT = (21, 128, 61), (185, 28, 28)
UNITS_LEFT, ORDERS = (194, 65, 12), (29, 78, 216)


def purchase(voucher, token, route="orders"):
    """Buys as the token's buyer (or joins the sale's line, route "line"), waiting out 429s
    as a browser would; returns the status."""
    for _ in range(30):
        request = urllib.request.Request(
            f"{API}/vouchers/{voucher}/{route}", method="POST",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request) as response:
                return response.status
        except urllib.error.HTTPError as e:
            if e.code != 429:
                return e.code
            time.sleep(float(e.headers.get("Retry-After") or 1))
    raise AssertionError("still throttled after 30 tries")


def open_live_view(driver, token, voucher):
    driver.get(f"{STOREFRONT}/shop/live")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#connect button").click()
    wait_for(driver, "status", r"^Watching\. Updated ")
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#voucher option[value="{voucher}"]'))
    Select(driver.find_element(By.ID, "voucher")).select_by_value(str(voucher))


def rows_of(driver, canvas, color, last_columns=None):
    """The row of each pixel of exactly this colour on the canvas, or only in its last
    columns (the chart's latest end) when given."""
    return driver.execute_script("""
        const [id, [r, g, b], columns] = arguments, canvas = document.getElementById(id);
        const width = columns || canvas.width;
        const data = canvas.getContext("2d")
          .getImageData(canvas.width - width, 0, width, canvas.height).data;
        const rows = [];
        for (let i = 0; i < data.length; i += 4) {
          const [pr, pg, pb] = data.subarray(i, i + 3);
          if (pr === r && pg === g && pb === b) rows.push(Math.floor(i / 4 / width));
        }
        return rows;
    """, canvas, list(color), last_columns)


def line_height(driver, color):
    """The mean row of this colour's line in the levels chart's last 30 columns (the latest
    end): small near the top, large near the bottom."""
    rows = rows_of(driver, "levels", color, 30)
    assert rows, f"no line of colour {color} at the latest end"
    return sum(rows) / len(rows)


def test_the_live_view_follows_a_sale(driver):
    """60 buyers in six waves, 2.5 s apart, for 40 units: the numbers step down and up
    while it runs, end at exactly what was sold, and the charts draw it."""
    voucher = create_voucher("Live view sale", 40, -60, 3600)
    tokens = [buyer_token(8000 + n) for n in range(60)]
    open_live_view(driver, ADMIN_TOKEN, voucher)
    wait_for(driver, "left", r"^40$")
    wait_for(driver, "initial", r"^of 40$")
    wait_for(driver, "orders", r"^0$")
    wait_for(driver, "queue", r"^0$")
    time.sleep(4)  # a few polls with nothing sold: bars of height zero, flat lines
    assert not rows_of(driver, "rates", ADMITTED), "admitted bars before any purchase"
    left_before, orders_before = line_height(driver, UNITS_LEFT), line_height(driver, ORDERS)
    assert left_before < orders_before, "40 units left should be drawn above 0 orders"

    statuses = []
    seen_left = set()
    done = threading.Event()

    def buy_in_waves():
        with ThreadPoolExecutor(10) as pool:
            for wave in range(6):
                wave_tokens = tokens[wave * 10:(wave + 1) * 10]
                statuses.extend(pool.map(lambda token: purchase(voucher, token), wave_tokens))
                time.sleep(2.5)
        done.set()

    buyers = threading.Thread(target=buy_in_waves)
    buyers.start()
    while not done.is_set():  # what the page shows while the sale runs
        seen_left.add(int(text(driver, "left")))
        time.sleep(0.1)
    buyers.join()

    sold = statuses.count(201)
    assert sold == 40 and statuses.count(409) == 20, sorted(statuses)
    assert any(0 < left < 40 for left in seen_left), f"units left never moved mid-sale: {seen_left}"
    wait_for(driver, "orders", rf"^{sold}$")
    wait_for(driver, "sold", rf"^{sold}$")  # one unit an order
    wait_for(driver, "left", r"^0$")
    wait_for(driver, "queue", r"^0$")
    time.sleep(1.5)  # one more poll, so that the last wave's bar is drawn
    assert rows_of(driver, "rates", ADMITTED), "no admitted bars"
    assert rows_of(driver, "rates", SOLD_OUT), "no sold_out bars"
    # The lines have crossed: units left went down to 0, orders up to 40.
    left_after, orders_after = line_height(driver, UNITS_LEFT), line_height(driver, ORDERS)
    assert left_after > orders_after, (left_before, orders_before, left_after, orders_after)
    assert abs(left_after - orders_before) < 3 and abs(orders_after - left_before) < 3, \
        (left_before, orders_before, left_after, orders_after)
    # Three of those told sold out wait in the sale's line.
    assert [purchase(voucher, token, "line") for token in tokens[40:43]] == [202] * 3
    wait_for(driver, "line", r"^3$")
    wait_for(driver, "handed", r"^0$")
    driver.save_screenshot(SCREENSHOT)


def test_a_wrong_token_is_refused_clearly(driver):
    """A token the API does not know (401) and a buyer's (403) each get a plain message,
    the token stays out of the URL, and the admin's token then works."""
    voucher = create_voucher("Wrong token", 5, -60, 3600)
    driver.get(f"{STOREFRONT}/shop/live")
    for token, message in [
        ("not-the-admin-token", r"^The API refused this token \(401\)\. Paste the admin token\.$"),
        (buyer_token(8100), r"^This token is not the admin's \(403\): a buyer's token cannot "
                            r"watch a sale\.$"),
    ]:
        field = driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#connect button").click()
        wait_for(driver, "status", message)
        assert "bad" in driver.find_element(By.ID, "status").get_attribute("class")
    assert text(driver, "left") == "–"
    assert driver.current_url == f"{STOREFRONT}/shop/live", "the token went into the URL"
    open_live_view(driver, ADMIN_TOKEN, voucher)
    wait_for(driver, "left", r"^5$")


def test_a_counter_reset_is_taken_in_stride(driver):
    """Redis losing the counters (simulated: the page's fetch answers them as 0) shows as
    0 orders and a notice, with no negative rate; real answers afterwards count on."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": r"""
        const realFetch = window.fetch;
        window.fetch = async (...args) => {
          const response = await realFetch(...args);
          if (!window.zeroCountersOf) return response;
          const ofVoucher = `voucher_id="${window.zeroCountersOf}"`;
          const zeroed = (await response.text()).split("\n").map((line) =>
            /^seckill_\w+_total\{/.test(line) && line.includes(ofVoucher)
              ? line.replace(/\S+$/, "0") : line);
          return new Response(zeroed.join("\n"), { status: response.status });
        };
    """})
    voucher = create_voucher("Counter reset", 10, -60, 3600)
    for n in range(3):
        assert purchase(voucher, buyer_token(8200 + n)) == 201
    open_live_view(driver, ADMIN_TOKEN, voucher)
    wait_for(driver, "orders", r"^3$")
    time.sleep(1.5)
    driver.execute_script("window.zeroCountersOf = arguments[0]", str(voucher))
    wait_for(driver, "orders", r"^0$")
    wait_for(driver, "notice", r"^The counters went back \d+ s ago \(Redis lost its data\?\)")
    time.sleep(1.5)
    rates = [item.text for item in driver.find_elements(By.CSS_SELECTOR, "#rates-key li")]
    assert len(rates) == 10 and all(r.endswith(" 0.0/s") for r in rates), rates
    driver.execute_script("window.zeroCountersOf = null")
    wait_for(driver, "orders", r"^3$")
    errors = [e for e in driver.get_log("browser") if e["source"] == "javascript"]
    assert not errors, errors


def main():
    tests = [value for name, value in globals().items() if name.startswith("test_")]
    # The whole page in the screenshot.
    return run(tests, "live view", window=(1000, 1200))


if __name__ == "__main__":
    sys.exit(main())
