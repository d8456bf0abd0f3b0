"""The merchant's console (/shop/console) in headless Chromium, against the application
under Spin, while buyers buy from Python at the same time.

Run by scripts/test-browser.sh after live_view.py (alone with --console-only), with the
same environment. What the merchant does goes through the page; the API and MySQL are only
read, to check it. The page is opened from the storefront's origin (every call goes through
CORS) in Shanghai's time zone, so that the times it sends carry an offset. Saves
console.png into SCREENSHOT_DIR, as the others do. Prints "N passed, N failed" last; exits
non-zero on any failure.
"""

import base64
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from urllib.parse import urlparse

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from live_view import purchase
from sale_page import (
    ADMIN_TOKEN, API, SCREENSHOT_DIR, STOREFRONT, before_each_page, buyer_token, create_voucher,
    run, text, wait_for,
)

SCREENSHOT = os.path.join(SCREENSHOT_DIR, "console.png")
DOWNLOADS = tempfile.mkdtemp(prefix="console-downloads-")
# The browser's zone: UTC+8 all year, so a local time is this far ahead of UTC.
SHANGHAI = timezone(timedelta(hours=8))
# The run's database, where the orders are (scripts/e2e.sh's private_backends).
DATABASE = urlparse(os.environ["SPIN_VARIABLE_MYSQL_URL"]).path.lstrip("/")
# tb_voucher_order.status as the API names it (core/src/sql.rs, Status).
STATUSES = {1: "unpaid", 2: "paid", 3: "used", 4: "cancelled", 5: "refunding", 6: "refunded",
            7: "expired"}
# The console's calls, each of which must refuse anyone but the admin.
DATA_CALLS = [("GET", "/vouchers?limit=50"), ("GET", "/metrics"), ("POST", "/vouchers"),
              ("PATCH", "/vouchers/{id}"), ("POST", "/vouchers/{id}/end"),
              ("GET", "/vouchers/{id}/orders?limit=100"), ("GET", "/vouchers/{id}/orders.csv")]


def call(method, path, token=ADMIN_TOKEN, body=None):
    """The API's answer: (status, JSON body or None, headers)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(
        f"{API}{path}", method=method, headers=headers,
        data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request) as response:
            status, raw, answer_headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as e:
        status, raw, answer_headers = e.code, e.read(), e.headers
    try:
        return status, json.loads(raw), answer_headers
    except ValueError:
        return status, None, answer_headers


def sale(voucher):
    """The sale as the admin's list has it."""
    status, page, _ = call("GET", "/vouchers?limit=1000")
    assert status == 200, status
    return next(listed for listed in page["vouchers"] if listed["id"] == voucher)


def buy(voucher, token, units, start):
    """A buyer's presses from `start` (time.time()) until a final answer, as the sale page
    makes them: again when the sale has not started, and after Retry-After when entered in
    the draw (202) or busy (429). Returns (status, body) of the last."""
    time.sleep(max(0.0, start - time.time()))
    for _ in range(60):
        status, body, headers = call("POST", f"/vouchers/{voucher}/orders", token, {"quantity": units})
        if status in (202, 429):
            time.sleep(float(headers.get("Retry-After") or 1))
        elif status == 409 and body["error"] == "not_started":
            time.sleep(0.1)
        else:
            return status, body
    raise AssertionError(f"no final answer for a buyer of {units} units")


def crowd(voucher, buyers, start=0.0):
    """Buyers (token, units) pressing at once from `start`; their (status, body), in order."""
    results = [None] * len(buyers)

    def one(k, token, units):
        results[k] = buy(voucher, token, units, start)

    threads = [threading.Thread(target=one, args=(k, *buyer)) for k, buyer in enumerate(buyers)]
    for thread in threads:
        thread.start()
    return threads, results


def ordered(result):
    """The order id a buyer holds after her presses: a 201's, or an already_ordered's (the
    draw's batch committed it before her press)."""
    status, body = result
    assert status == 201 or (status == 409 and body["error"] == "already_ordered"), result
    return body["order_id"]


def mysql_orders(voucher):
    """The sale's orders in MySQL, in id order, as the CSV writes them."""
    mysql = shutil.which("mariadb") or shutil.which("mysql")
    out = subprocess.run(
        [mysql, "-h", "127.0.0.1", "-P", "3306", "-useckill", "-pseckill", "-N", "-B", DATABASE,
         "-e", "SELECT id, user_id, status, quantity, "
               "DATE_FORMAT(create_time, '%Y-%m-%dT%H:%i:%sZ') FROM tb_voucher_order "
               f"WHERE sale_id = {int(voucher)} ORDER BY id"],
        check=True, capture_output=True, text=True).stdout
    return [[order, user, STATUSES[int(status)], units, created]
            for order, user, status, units, created in
            (line.split("\t") for line in out.splitlines())]


def local(at):
    """A UTC time as the browser in Shanghai shows it in a datetime-local field."""
    return at.astimezone(SHANGHAI).strftime("%Y-%m-%dT%H:%M:%S")


def utc(at):
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def in_whole_seconds(seconds):
    return datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=seconds)


def open_console(driver):
    """The console in Shanghai's time zone, each call the page makes noted in window.sent."""
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Shanghai"})
    before_each_page(driver, """{
        const realFetch = window.fetch;
        window.sent = [];
        window.fetch = (url, init = {}) => {
          window.sent.push({ method: init.method || "GET", url: String(url), body: init.body });
          return realFetch(url, init);
        };
    }""")
    driver.get(f"{STOREFRONT}/shop/console")


def sign_in(driver, token):
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token, Keys.ENTER)  # the keyboard's way


def sent_bodies(driver, method):
    """The JSON bodies of the page's calls with this method, oldest first."""
    return [json.loads(call["body"]) for call in driver.execute_script("return window.sent")
            if call["method"] == method]


def fill(driver, values):
    for field, value in values.items():
        element = driver.find_element(By.ID, field)
        if element.get_attribute("type") == "datetime-local":
            # Typing one goes by the locale's segments; a value is set as the picker sets it.
            driver.execute_script("""
                arguments[0].value = arguments[1];
                arguments[0].dispatchEvent(new Event("input", { bubbles: true }));
            """, element, value)
        else:
            element.clear()
            element.send_keys(value)


def submit(driver, form="sale-form"):
    driver.execute_script("document.getElementById('status').textContent = ''")
    driver.find_element(By.CSS_SELECTOR, f"#{form} button:not([type=button])").click()


def row(sale_id):
    return f'#sales tr[data-id="{sale_id}"]'


def wait_cell(driver, sale_id, name, pattern, timeout=15):
    return wait_for(driver, f"{row(sale_id)} td.{name}", pattern, timeout, By.CSS_SELECTOR)


def press(driver, sale_id, action):
    """Presses the row's button (or link): found again when the table was drawn anew
    between finding it and pressing it."""
    WebDriverWait(driver, 5, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f'{row(sale_id)} [data-action="{action}"]')
        .click() or True)


def refresh(driver):
    driver.find_element(By.ID, "refresh").click()


def beside(driver, field, pattern):
    """The error shown beside `field` matches `pattern`, the field is marked invalid and
    names it."""
    wait_for(driver, f"{field}-error", pattern)
    element = driver.find_element(By.ID, field)
    assert element.get_attribute("aria-invalid") == "true", field
    assert f"{field}-error" in element.get_attribute("aria-describedby").split(), field


def save_whole_page(driver, path):
    """A screenshot of the whole page, below the window's height too."""
    width, height = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
    })
    with open(path, "wb") as file:
        file.write(base64.b64decode(shot["data"]))


def test_a_sale_from_its_creation_to_its_orders_csv(driver):
    """The merchant creates a sale with a draw, two units a buyer, opening in 20 s (the
    API's 400 beside its field on the way), retitles it in two scripts with markup and
    opens it earlier; once open the API refuses a new per_buyer beside it. A crowd buys it
    out, she adds stock and more buyers buy it, she ends it, and its orders and their CSV
    are MySQL's rows exactly."""
    open_console(driver)
    sign_in(driver, ADMIN_TOKEN)
    wait_for(driver, "updated", r"^Updated ")
    opens = in_whole_seconds(20)
    fill(driver, {
        "title": "Console sale", "description": "Two a buyer, drawn at the opening.",
        "stock": "0", "per_buyer": "2", "draw_ms": "3000",
        "begin_time": local(opens), "end_time": local(opens + timedelta(hours=1)),
    })
    submit(driver)
    beside(driver, "stock", r"^Units: a whole number from 1 to 10,000,000\.$")
    assert not sent_bodies(driver, "POST"), "sent despite the page's own check"
    # The page's check bypassed: the API's 400 shows beside the field it names.
    driver.execute_script("window.ownCheck = validate; window.validate = () => ({})")
    submit(driver)
    beside(driver, "stock", r"^stock must be between 1 and 10000000$")
    assert text(driver, "form-error") == ""
    driver.execute_script("window.validate = window.ownCheck")
    fill(driver, {"stock": "6"})
    submit(driver)
    voucher = int(wait_for(driver, "status", r"^Sale ([1-9][0-9]*) created\.$").group(1))
    # Times leave with the browser's offset, and the API keeps the instants.
    assert sent_bodies(driver, "POST")[-1]["begin_time"] == local(opens) + "+08:00"
    created = sale(voucher)
    assert (created["title"], created["stock"], created["per_buyer"], created["draw_ms"],
            created["begin_time"], created["end_time"]) == \
        ("Console sale", 6, 2, 3000, utc(opens), utc(opens + timedelta(hours=1))), created
    wait_cell(driver, voucher, "status", r"^upcoming$")
    wait_cell(driver, voucher, "left", r"^6 of 6$")

    # Before it opens: a title in two scripts with markup, and an earlier opening.
    press(driver, voucher, "edit")
    assert driver.find_element(By.ID, "title").get_attribute("value") == "Console sale"
    assert driver.find_element(By.ID, "begin_time").get_attribute("value") == local(opens)
    assert not driver.find_element(By.ID, "buckets").is_enabled(), "buckets never change"
    title = "限时抢购 <b>半价</b> تخفيض <img src=x onerror=alert(1)>"
    opens = in_whole_seconds(8)
    fill(driver, {"title": title, "begin_time": local(opens)})
    submit(driver)
    wait_for(driver, "status", rf"^Sale {voucher} saved\.$")
    assert sent_bodies(driver, "PATCH") == [{"title": title, "begin_time": local(opens) + "+08:00"}]
    edited = sale(voucher)
    assert (edited["title"], edited["begin_time"], edited["draw_at"]) == \
        (title, utc(opens), (opens + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")), edited
    wait_cell(driver, voucher, "title", f"^{re.escape(title)}$")
    markup = driver.find_elements(By.CSS_SELECTOR, f"{row(voucher)} b, {row(voucher)} img")
    assert not markup, "the title's markup became elements"

    # A crowd for its six units: four press in the draw's window, asking for six in all;
    # two more, after it, are told sold out.
    tokens = [buyer_token(9000 + n) for n in range(12)]
    opening = opens.timestamp()
    drawn, drawn_results = crowd(voucher, [(tokens[0], 2), (tokens[1], 2), (tokens[2], 1),
                                           (tokens[3], 1)], opening + 0.3)
    late, late_results = crowd(voucher, [(tokens[4], 1), (tokens[5], 2)], opening + 4.5)

    # Open now: the form filled before the opening still offers per_buyer; the API refuses
    # it beside the field, and the sale keeps its two.
    time.sleep(max(0.0, opening + 0.5 - time.time()))
    fill(driver, {"per_buyer": "3"})
    submit(driver)
    beside(driver, "per_buyer", r".")
    assert sent_bodies(driver, "PATCH")[-1] == {"per_buyer": 3}
    assert sale(voucher)["per_buyer"] == 2

    for thread in drawn + late:
        thread.join()
    orders = [ordered(result) for result in drawn_results]
    assert [(status, body["error"]) for status, body in late_results] == [(409, "sold_out")] * 2, \
        late_results
    # The table follows by itself (every 5 s).
    wait_cell(driver, voucher, "left", r"^0 of 6$", timeout=12)
    wait_cell(driver, voucher, "orders", r"^4$")
    wait_cell(driver, voucher, "status", r"^sold_out$")

    # Three more units while it is live: they show, and two more buyers take them.
    fill(driver, {"units": "3"})
    submit(driver, "add-stock")
    wait_for(driver, "status", rf"^Added 3 units to sale {voucher}: 9 in all\.$")
    assert sent_bodies(driver, "PATCH")[-1] == {"stock": 9}
    wait_cell(driver, voucher, "left", r"^3 of 9$")
    more, more_results = crowd(voucher, [(tokens[6], 2), (tokens[7], 1)])
    for thread in more:
        thread.join()
    orders += [ordered(result) for result in more_results]
    # Two told sold out wait in its line.
    assert [purchase(voucher, token) for token in tokens[8:10]] == [409, 409]
    assert [purchase(voucher, token, "line") for token in tokens[8:10]] == [202, 202]
    refresh(driver)
    wait_cell(driver, voucher, "left", r"^0 of 9$")
    wait_cell(driver, voucher, "orders", r"^6$")
    wait_cell(driver, voucher, "line", r"^2$")

    # Ended now, once confirmed.
    press(driver, voucher, "end")
    WebDriverWait(driver, 5).until(lambda d: d.switch_to.alert).accept()
    wait_for(driver, "status", rf"^Sale {voucher} has ended\.$")
    wait_cell(driver, voucher, "status", r"^ended$")
    assert not driver.find_elements(By.CSS_SELECTOR, f'{row(voucher)} [data-action="end"]')
    assert call("GET", f"/vouchers/{voucher}")[1]["status"] == "ended"
    assert purchase(voucher, tokens[10]) == 409

    # Its orders, on the page and in the CSV, are MySQL's rows.
    press(driver, voucher, "orders")
    rows = mysql_orders(voucher)
    assert sorted(order for order, *_ in rows) == sorted(orders), (rows, orders)
    assert sum(int(units) for *_, units, _ in rows) == 9, rows
    shown_rows = lambda: [[cell.text for cell in tr.find_elements(By.TAG_NAME, "td")]
                          for tr in driver.find_elements(By.CSS_SELECTOR, "#orders tbody tr")]
    WebDriverWait(driver, 10).until(lambda _: len(shown_rows()) == len(rows))
    assert shown_rows() == rows, (shown_rows(), rows)
    driver.find_element(By.ID, "download").click()
    wait_for(driver, "status", rf"^Saved voucher-{voucher}-orders\.csv\.$")
    saved = os.path.join(DOWNLOADS, f"voucher-{voucher}-orders.csv")
    WebDriverWait(driver, 10).until(lambda _: os.path.exists(saved))
    with open(saved, newline="", encoding="utf-8") as file:
        assert list(csv.reader(file)) == \
            [["order_id", "user_id", "status", "quantity", "created_at"]] + rows
    # Asked on after its last order, where the API holds none: every answer is in the file.
    export = f"{API}/vouchers/{voucher}/orders.csv"
    assert [call["url"] for call in driver.execute_script("return window.sent")
            if call["url"].startswith(export)] == [export, f"{export}?after={rows[-1][0]}"]
    save_whole_page(driver, SCREENSHOT)


def test_only_the_admin_token_opens_the_console(driver):
    """The data calls refuse no token and other tokens, the page's files hold no data, a
    wrong token is sent back to sign in, the admin's stays in this tab's sessionStorage
    only (and opens the live view on a sale), and signing out forgets it. On a phone."""
    driver.set_window_size(560, 900)
    voucher = create_voucher("Console fixture", 3, -60, 3600)
    for method, path in DATA_CALLS:
        path = path.format(id=voucher)
        body = {"stock": 10} if method in ("POST", "PATCH") else None
        for token, refused in [(None, 401), ("not-the-admin-token", 401),
                               (buyer_token(9100), 403)]:
            assert call(method, path, token, body)[0] == refused, (method, path, token)
    assert (sale(voucher)["stock"], sale(voucher)["status"]) == (3, "live")
    for asset in ["console", "console.js", "console.css", "metrics.js"]:
        with urllib.request.urlopen(f"{STOREFRONT}/shop/{asset}") as response:
            served = response.read().decode()
        assert "Console fixture" not in served and ADMIN_TOKEN not in served, asset

    open_console(driver)
    for token, message in [
        ("not-the-admin-token", r"^The API refused this token \(401\)\. Sign in with the admin token\.$"),
        (buyer_token(9101), r"^This token is not the admin's \(403\): a buyer's token cannot "
                            r"open the console\.$"),
    ]:
        sign_in(driver, token)
        wait_for(driver, "status", message)
        assert driver.find_element(By.ID, "token").is_displayed()
        assert not driver.find_element(By.ID, "office").is_displayed()
        assert driver.execute_script("return sessionStorage.length") == 0

    sign_in(driver, ADMIN_TOKEN)
    wait_cell(driver, voucher, "title", r"^Console fixture$")
    wait_cell(driver, voucher, "left", r"^3 of 3$")
    assert driver.current_url == f"{STOREFRONT}/shop/console", "the token went into the URL"
    assert driver.execute_script("return [localStorage.length, sessionStorage.getItem("
                                 "'seckill.admin_token')]") == [0, ADMIN_TOKEN]
    # One column: the form's fields one under another, a sale's cells one under another.
    lefts = driver.execute_script(
        "return [...document.querySelectorAll('#sale-form .field')].map(f => f.offsetLeft)")
    assert len(set(lefts)) == 1, lefts
    assert driver.execute_script(
        f"return getComputedStyle(document.querySelector('{row(voucher)} td')).display") == "block"

    driver.refresh()  # the tab's session keeps her signed in
    wait_cell(driver, voucher, "left", r"^3 of 3$")
    press(driver, voucher, "live")
    assert driver.current_url == f"{STOREFRONT}/shop/live#{voucher}"
    wait_for(driver, "status", r"^Watching\. Updated ")
    assert driver.find_element(By.ID, "voucher").get_attribute("value") == str(voucher)
    wait_for(driver, "left", r"^3$")

    driver.back()
    wait_cell(driver, voucher, "left", r"^3 of 3$")
    driver.find_element(By.ID, "sign-out").click()
    wait_for(driver, "status", r"^Signed out\.$")
    assert driver.execute_script("return sessionStorage.length") == 0
    assert not driver.find_elements(By.CSS_SELECTOR, "#sales tbody tr")
    assert driver.find_element(By.ID, "token").is_displayed()
    errors = [e for e in driver.get_log("browser") if e["source"] == "javascript"]
    assert not errors, errors


def main():
    tests = [value for name, value in globals().items() if name.startswith("test_")]
    return run(tests, "console", window=(1100, 1000), downloads=DOWNLOADS)


if __name__ == "__main__":
    sys.exit(main())
