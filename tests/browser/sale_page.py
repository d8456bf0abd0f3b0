"""The sale page in headless Chromium over WebDriver, against the application under Spin.

Run by scripts/test-browser.sh, which serves the application and passes its address,
secrets and SCREENSHOT_DIR in the environment. The page is opened from a second origin
(localhost, while the API is reached at 127.0.0.1: every call is cross-origin and needs
CORS) and from the API's own origin. Saves sale-page.png into SCREENSHOT_DIR. Prints
"N passed, N failed" last; exits non-zero on any failure.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from datetime import datetime, timedelta, timezone

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.environ["PORT"]
API = f"http://127.0.0.1:{PORT}"
STOREFRONT = f"http://localhost:{PORT}"
ADMIN_TOKEN = os.environ["SPIN_VARIABLE_ADMIN_TOKEN"]
# An ignored folder unless the run was asked to refresh the pictures in docs/, so that a
# test run leaves the tree as it found it.
SCREENSHOT_DIR = (os.environ.get("SCREENSHOT_DIR")
                  or os.path.join(ROOT, "target", "e2e", "screenshots"))
os.makedirs(SCREENSHOT_DIR, exist_ok=True)
SCREENSHOT = os.path.join(SCREENSHOT_DIR, "sale-page.png")


def create_voucher(title, stock, begin_in, end_in, draw_ms=0, per_buyer=1):
    """Creates a voucher through the API as the admin; returns its id."""
    now = datetime.now(timezone.utc)
    body = json.dumps({
        "title": title,
        "description": "One per customer, while stocks last.",
        "stock": stock,
        "begin_time": (now + timedelta(seconds=begin_in)).isoformat(),
        "end_time": (now + timedelta(seconds=end_in)).isoformat(),
        "draw_ms": draw_ms,
        "per_buyer": per_buyer,
    }).encode()
    request = urllib.request.Request(
        f"{API}/vouchers", data=body, method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.status == 201, response.status
        return json.load(response)["id"]


def buyer_token(user):
    return subprocess.run(
        [os.path.join(ROOT, "scripts", "token.sh"), str(user)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


def as_buyer(user, path, method="GET"):
    """Buyer `user`'s request to the API (no body); its JSON answer, raising on an error."""
    request = urllib.request.Request(
        f"{API}{path}", method=method, headers={"Authorization": f"Bearer {buyer_token(user)}"})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def browser(downloads=None):
    """Headless Chromium; a download goes to the folder `downloads` without a question."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # The network is closed here: without these Chromium waits on services it cannot reach.
    for flag in [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}", "--window-size=560,760",
    ]:
        options.add_argument(flag)
    if downloads:
        options.add_experimental_option("prefs", {
            "download.default_directory": downloads, "download.prompt_for_download": False,
        })
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(30)
    return driver


def text(driver, element_id, by=By.ID):
    return driver.find_element(by, element_id).text


def wait_for(driver, element_id, pattern, timeout=15, by=By.ID):
    """Waits until the element's text matches `pattern`; returns the match. The element is
    found by its id, or `by` another locator (By.CSS_SELECTOR), again at each look: a page
    that draws it anew meanwhile leaves the one found before stale."""
    found = []

    def matches(_):
        match = re.search(pattern, text(driver, element_id, by))
        if match:
            found.append(match)
        return bool(match)

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.1,
                      ignored_exceptions=[StaleElementReferenceException]).until(matches)
    except Exception:
        where = f"#{element_id}" if by == By.ID else element_id
        raise AssertionError(f"{where} never matched {pattern!r}: {text(driver, element_id, by)!r}")
    return found[-1]


def buy_as(driver, token):
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    # A new outcome replaces the old one: clear it so that a wait sees only the new one.
    driver.execute_script("document.getElementById('outcome').textContent = ''")
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "buy").is_enabled())
    driver.find_element(By.ID, "buy").click()


def one_unit_sale(driver, page_origin, screenshot=None):
    """A live voucher with one unit: A buys it, A again is told it is theirs, B is told
    it is sold out."""
    voucher = create_voucher("¥50 voucher", 1, -60, 3600)
    driver.get(f"{page_origin}/shop/vouchers/{voucher}")
    wait_for(driver, "title", r"^¥50 voucher$")
    wait_for(driver, "left", r"^1 of 1 left$")
    wait_for(driver, "countdown", r"^On sale now, ends in 00:59:\d\d$")
    # One unit a buyer: nothing to choose.
    assert not driver.find_element(By.ID, "quantity").is_displayed()

    buy_as(driver, buyer_token(7001))
    order_id = wait_for(driver, "outcome", r"^It's yours! Order ([1-9][0-9]*)\.$").group(1)
    # The voucher's 900 s to pay, counting down by the server's clock.
    wait_for(driver, "payment", r"^Pay within 00:1[45]:[0-5][0-9]$")
    wait_for(driver, "left", r"^None left$")
    if screenshot:
        driver.save_screenshot(screenshot)

    buy_as(driver, buyer_token(7001))
    wait_for(driver, "outcome", rf"^Already yours: order {order_id}\.$")

    buy_as(driver, buyer_token(7002))
    wait_for(driver, "outcome", r"^Sold out\. Every unit has gone\.$")

    # The order the page showed is the buyer's, as the API says.
    order = as_buyer(7001, f"/orders/{order_id}")
    assert (order["voucher_id"], order["user_id"]) == (voucher, "7001"), order


def test_a_storefront_on_another_origin_sells_through_cors(driver):
    one_unit_sale(driver, STOREFRONT, screenshot=SCREENSHOT)
    origin, api = driver.execute_script(
        "return [location.origin, document.querySelector('meta[name=seckill-api]').content]")
    assert (origin, api) == (STOREFRONT, API), (origin, api)


def test_the_page_on_the_api_origin_sells_too(driver):
    one_unit_sale(driver, API)


def before_each_page(driver, source):
    """Runs the script `source` in every page the driver opens, before the page's own."""
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source})


def make_the_browsers_clock_an_hour_fast(driver):
    # In a block: scripts run this way share one global scope.
    before_each_page(driver, """{
        const RealDate = Date, fast = 3600 * 1000;
        window.Date = class extends RealDate {
          constructor(...args) { super(...(args.length ? args : [RealDate.now() + fast])); }
          static now() { return RealDate.now() + fast; }
        };
    }""")


def rewrite_voucher_answers(driver, statement):
    """Makes the page's fetch of a voucher hand it the API's answer with `statement` (JS on
    `body`, the answer's JSON) applied, the status and headers (`Date`) left as they are."""
    before_each_page(driver, """{
        const realFetch = window.fetch;
        window.fetch = async (url, init) => {
          const response = await realFetch(url, init);
          if ((init && init.method) || !/\\/vouchers\\/[0-9]+$/.test(url) || !response.ok) {
            return response;
          }
          const body = await response.json();
          %s;
          return new Response(JSON.stringify(body), {
            status: response.status, statusText: response.statusText, headers: response.headers,
          });
        };
    }""" % statement)


def counts_down(driver, pattern):
    """Opens an upcoming sale (starting in an hour, by this machine's clock) and checks that
    its countdown matches `pattern` (one group: the time left) and goes down, and that Buy
    is off."""
    voucher = create_voucher("Upcoming sale", 5, 3600, 7200)
    driver.get(f"{STOREFRONT}/shop/vouchers/{voucher}")
    first = wait_for(driver, "countdown", pattern).group(1)
    time.sleep(2.2)
    second = wait_for(driver, "countdown", pattern).group(1)
    assert second < first, (first, second)
    wait_for(driver, "left", r"^5 of 5 left$")
    assert not driver.find_element(By.ID, "buy").is_enabled(), "Buy before the start"
    return voucher


def test_an_upcoming_sale_counts_down_by_the_servers_clock(driver):
    # The visitor's clock is an hour fast: the countdown must not believe it.
    make_the_browsers_clock_an_hour_fast(driver)
    voucher = counts_down(driver, r"^Starts in (00:59:\d\d|01:00:00)$")
    # By the answer's server_time, which the API gives, not by `Date` alone.
    with urllib.request.urlopen(f"{API}/vouchers/{voucher}") as response:
        server_time = datetime.fromisoformat(json.load(response)["server_time"])
    assert abs(server_time - datetime.now(timezone.utc)) < timedelta(seconds=5), server_time


def test_the_countdown_follows_server_time_not_the_date_header(driver):
    # The answers' server_time ten minutes ahead, their `Date` as it was, the visitor's
    # clock an hour fast: only by server_time does the sale start in 50 minutes.
    make_the_browsers_clock_an_hour_fast(driver)
    rewrite_voucher_answers(driver, """body.server_time = new Date(
        Date.parse(body.server_time) + 600 * 1000).toISOString()""")
    counts_down(driver, r"^Starts in (00:49:\d\d|00:50:00)$")


def test_without_server_time_the_countdown_goes_by_the_date_header(driver):
    # An older API: no server_time in the answers, and `Date` is the server's clock left.
    make_the_browsers_clock_an_hour_fast(driver)
    rewrite_voucher_answers(driver, "delete body.server_time")
    counts_down(driver, r"^Starts in (00:59:\d\d|01:00:00)$")


def test_a_draw_shows_its_time_then_its_result(driver):
    """A sale that opens with a draw: a press in its window shows when the draw is and
    counts down to it, then the page asks again by itself and shows the result."""
    voucher = create_voucher("Drawn voucher", 1, 0, 3600, draw_ms=6000)
    driver.get(f"{STOREFRONT}/shop/vouchers/{voucher}")
    wait_for(driver, "title", r"^Drawn voucher$")
    buy_as(driver, buyer_token(7101))
    wait_for(driver, "outcome", r"^You're in the draw: results at .+ \(in 00:00:0[1-6]\)\.$")
    # The one entrant is drawn: the page presses again after Retry-After by itself, and
    # hears her order (committed by that press, or by another's drain just before).
    order_id = wait_for(driver, "outcome",
                        r"^(?:It's yours! Order|Already yours: order) ([1-9][0-9]*)\.$",
                        timeout=20).group(1)
    buy_as(driver, buyer_token(7102))
    wait_for(driver, "outcome", r"^Sold out\. Every unit has gone\.$")
    assert order_id


def choose_units(driver, units):
    Select(driver.find_element(By.ID, "quantity")).select_by_value(str(units))


def test_a_buyer_chooses_how_many_units_and_gets_them_in_one_order(driver):
    """A sale that lets a buyer hold up to 3: the page offers 1 to 3, sells 2 in one
    order, and tells a buyer asking for more than is left how many are."""
    voucher = create_voucher("Family pack", 3, -60, 3600, per_buyer=3)
    driver.get(f"{STOREFRONT}/shop/vouchers/{voucher}")
    wait_for(driver, "title", r"^Family pack$")
    wait_for(driver, "left", r"^3 of 3 left$")
    offered = [option.get_attribute("value")
               for option in Select(driver.find_element(By.ID, "quantity")).options]
    assert offered == ["1", "2", "3"], offered

    choose_units(driver, 2)
    buy_as(driver, buyer_token(7201))
    order_id = wait_for(driver, "outcome", r"^It's yours! 2 units, order ([1-9][0-9]*)\.$").group(1)
    wait_for(driver, "left", r"^1 of 3 left$")

    choose_units(driver, 3)
    buy_as(driver, buyer_token(7202))
    wait_for(driver, "outcome", r"^Only 1 left\. Press Buy again to take 1, or join the line\.$")
    assert driver.find_element(By.ID, "join").is_displayed()
    assert Select(driver.find_element(By.ID, "quantity")).first_selected_option.text == "1"
    buy_as(driver, buyer_token(7202))
    wait_for(driver, "outcome", r"^It's yours! Order ([1-9][0-9]*)\.$")
    wait_for(driver, "left", r"^None left$")

    order = as_buyer(7201, f"/orders/{order_id}")
    assert (order["user_id"], order["quantity"]) == ("7201", 2), order


def shown(driver, element_id):
    return driver.find_element(By.ID, element_id).is_displayed()


def test_a_buyer_told_sold_out_waits_in_line_for_a_unit_given_back(driver):
    """A sold-out sale: a buyer told so joins the line from the keyboard, sees her place,
    may leave it and join again, and once another buyer cancels, the page shows her the
    order the line handed her, as a purchase's."""
    voucher = create_voucher("Second chance", 1, -60, 3600)
    taken = as_buyer(7301, f"/vouchers/{voucher}/orders", "POST")
    driver.get(f"{STOREFRONT}/shop/vouchers/{voucher}")
    wait_for(driver, "left", r"^None left$")
    buy_as(driver, buyer_token(7302))
    wait_for(driver, "outcome", r"^Sold out\. Every unit has gone\.$")
    assert shown(driver, "join") and not shown(driver, "leave")

    # A button, so Enter presses it. Nobody gave a unit back yet: no estimate.
    driver.find_element(By.ID, "join").send_keys(Keys.ENTER)
    wait_for(driver, "outcome", r"^You are number 1 in line \(0 ahead\)\.$")
    assert shown(driver, "leave") and not shown(driver, "join")
    assert not driver.find_element(By.ID, "buy").is_enabled(), "Buy while in line"
    driver.find_element(By.ID, "leave").click()
    wait_for(driver, "outcome", r"^You left the line\.$")
    assert shown(driver, "join") and not shown(driver, "leave")
    driver.find_element(By.ID, "join").click()
    wait_for(driver, "outcome", r"^You are number 1 in line \(0 ahead\)\.$")

    # The unit given back goes to her; the page's next look (every 3 s) shows her order.
    cancelled = as_buyer(7301, f"/orders/{taken['order_id']}/cancel", "POST")
    assert cancelled["status"] == "cancelled", cancelled
    order_id = wait_for(driver, "outcome", r"^It's yours! Order ([1-9][0-9]*)\.$",
                        timeout=10).group(1)
    wait_for(driver, "payment", r"^Pay within 00:1[45]:[0-5][0-9]$")
    assert not shown(driver, "join") and not shown(driver, "leave")
    mine = as_buyer(7302, f"/vouchers/{voucher}/orders/mine")
    assert (mine["order_id"], mine["user_id"]) == (order_id, "7302"), mine


def run(tests, label, window=None, downloads=None):
    """Runs each test in a fresh browser (of `window` (width, height) when given, saving
    downloads into the folder `downloads`); prints "<label>: N passed, N failed" last and
    returns the exit status."""
    passed = failed = 0
    for test in tests:
        driver = browser(downloads)
        if window:
            driver.set_window_size(*window)
        try:
            test(driver)
            passed += 1
            print(f"ok    {test.__name__}")
        except Exception:
            failed += 1
            print(f"FAIL  {test.__name__}")
            traceback.print_exc()
            for entry in driver.get_log("browser"):
                print(f"      console: {entry['message']}")
        finally:
            driver.quit()
    print(f"{label}: {passed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    tests = [value for name, value in globals().items() if name.startswith("test_")]
    return run(tests, "browser")


if __name__ == "__main__":
    sys.exit(main())
