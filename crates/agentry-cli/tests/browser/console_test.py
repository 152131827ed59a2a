"""The console in a real Chromium (Selenium + chromium-driver from Debian), against a real
`agentry serve`. Run by crates/agentry-cli/tests/console.rs:

    python console_test.py URL KEY HOSTILE_SESSION FOREIGN_SESSION OUT_DIR REPORT_HTML REMOTE_SESSION

Signs in with the keyboard, creates a session, runs a turn on the recorded model and watches
the answer and the tool calls appear, approves the pending call, opens the timeline and the
usage charts, reloads and sees the same state; checks a hostile session's text stays text
and another tenant's session is not listed; opens the `agentry run --report` page from
the file and checks it draws the same views without running the hostile text. Screenshots go to OUT_DIR. Exits non-zero with
the reason on the first failure.
"""

import os
import sys
import time
import urllib.parse

os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download anything

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

URL, KEY, HOSTILE, FOREIGN, OUT, REPORT, REMOTE = sys.argv[1:8]
# The path prefix a reverse proxy serves the console under ("" when URL is the server's own).
PREFIX = urllib.parse.urlparse(URL).path.rstrip("/")
CHROMIUM = os.environ.get("AGENTRY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("AGENTRY_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
ANSWER = "Lisbon is 15 °C warmer"

options = webdriver.ChromeOptions()
options.binary_location = CHROMIUM
for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--window-size=1280,1000", "--force-device-scale-factor=1"]:
    options.add_argument(flag)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
wait = WebDriverWait(driver, 30)
step = "start"


def say(what):
    global step
    step = what
    print("console_test:", what, flush=True)


def shot(name):
    driver.save_screenshot(os.path.join(OUT, name))


def full_shot(name):
    """The whole page, not only the window."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(height + 40, 800), 4000))
    shot(name)
    driver.set_window_size(1280, 1000)


def text_of(css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def scheme(dark):
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


try:
    say("sign in with the keyboard")
    driver.get(URL + "/console")
    field = wait.until(EC.presence_of_element_located((By.ID, "key")))
    label = driver.find_element(By.CSS_SELECTOR, "label[for=key]").text
    assert label == "API key", label
    assert driver.switch_to.active_element == field, "the key field has the focus"
    field.send_keys(KEY, Keys.ENTER)
    wait.until(EC.presence_of_element_located((By.ID, "sessions-h")))
    wait.until(EC.presence_of_element_located((By.ID, "new-model")))
    assert KEY not in driver.current_url
    listed = driver.find_element(By.TAG_NAME, "table").text
    assert HOSTILE in listed, "the tenant's own session is listed"
    assert FOREIGN not in listed, "another tenant's session is not listed"

    say("the hostile session's text stays text")
    driver.get(URL + "/console#/sessions/" + HOSTILE)
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "ol.msgs")))
    conversation = text_of("ol.msgs")
    assert "<img src=x onerror=" in conversation, conversation
    assert "</script><script>" in conversation, conversation
    injected = driver.execute_script(
        "return [document.querySelectorAll('#app img, #app script, #app iframe').length, window.__pwned === undefined]")
    assert injected == [0, True], injected

    say("create a session and run a turn")
    driver.get(URL + "/console#/sessions")
    tools = wait.until(EC.presence_of_element_located((By.ID, "new-tools")))
    tools.send_keys("calculator, clock")
    driver.find_element(By.CSS_SELECTOR, "form[aria-labelledby=new-h] button[type=submit]").click()
    message = wait.until(EC.element_to_be_clickable((By.ID, "message")))
    session_id = driver.current_url.split("#/sessions/")[1]
    message.send_keys("Weather in Lisbon and Oslo, and how much warmer is Lisbon?")
    # What the live list shows while the turn streams, recorded as it happens (the page
    # redraws from the stored session once the turn ends, however fast that is).
    driver.execute_script("""
        window.__live = {text: false, call: false, result: false};
        new MutationObserver(() => {
            const live = document.getElementById('live');
            if (!live) return;
            if (live.textContent.includes("I'll look up both cities")) window.__live.text = true;
            if (live.querySelector('[data-call-id]')) window.__live.call = true;
            if (live.querySelector('[data-result-of]')) window.__live.result = true;
        }).observe(document.body, {subtree: true, childList: true, characterData: true});""")
    message.send_keys(Keys.CONTROL, Keys.ENTER)
    approve = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[data-approval] button")))
    seen = driver.execute_script("return window.__live")
    assert seen == {"text": True, "call": True, "result": True}, seen
    page = text_of("#app")
    assert "Waiting for you" in page and "calculator" in page, page
    assert "awaiting_approval" in page, page
    assert "19 - 4" in text_of("[data-approval]")
    full_shot("console-approval.png")

    say("approve the pending call with the keyboard")
    approve.send_keys(Keys.ENTER)
    wait.until(EC.text_to_be_present_in_element((By.ID, "conv-h"), "Conversation"))
    wait.until(lambda d: ANSWER in d.find_element(By.CSS_SELECTOR, "ol.msgs").text)
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".summary"), "completed"))
    results = driver.find_elements(By.CSS_SELECTOR, "ol.msgs [data-result-of]")
    assert len(results) >= 3, len(results)  # two weather errors, the clock, the calculator
    calls = driver.find_elements(By.CSS_SELECTOR, "ol.msgs [data-call-id]")
    assert len(calls) >= 4, len(calls)

    say("the timeline has a round per model call, with bars")
    rounds = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".timeline .round"))
    assert len(rounds) == 3, len(rounds)
    assert driver.find_elements(By.CSS_SELECTOR, ".timeline rect.model")
    assert driver.find_elements(By.CSS_SELECTOR, ".timeline rect.tool")
    heading = rounds[0].find_element(By.TAG_NAME, "h4").text
    assert "tokens" in heading and "$" in heading, heading
    full_shot("console-session.png")

    say("reload: the same state, still signed in")
    driver.refresh()
    wait.until(lambda d: ANSWER in d.find_element(By.CSS_SELECTOR, "ol.msgs").text)
    assert "completed" in text_of(".summary")
    assert len(driver.find_elements(By.CSS_SELECTOR, ".timeline .round")) == 3

    say("send the results of pending remote calls")
    driver.get(URL + "/console#/sessions/" + REMOTE)
    fields = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[aria-labelledby=pending-h] textarea"))
    assert len(fields) == 2, len(fields)  # get_weather for Lisbon and for Oslo
    assert "awaiting_tool_execution" in text_of(".summary")
    truncated = driver.find_elements(By.CSS_SELECTOR, "ol.msgs [data-result-of] .badge.truncated")
    assert len(truncated) == 1, len(truncated)  # the clock's result, cut to the session's cap
    fields[0].send_keys('{"temp_c": 19}')
    fields[1].send_keys('{"temp_c": 4}')
    driver.find_element(By.CSS_SELECTOR, "[aria-labelledby=pending-h] button[type=submit]").click()
    # The run goes on to the calculator, which waits for approval: deny it this time.
    deny = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, "[data-approval] button.deny")))
    assert '{"temp_c": 19}' in text_of("ol.msgs")
    deny.click()
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, ".summary"), "completed"))
    assert "denied in the console" in text_of("ol.msgs")

    say("usage charts, in the dark scheme")
    scheme(True)
    driver.get(URL + "/console#/usage")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".charts figure svg rect")))
    figures = driver.find_elements(By.CSS_SELECTOR, ".charts figure")
    assert len(figures) == 4, len(figures)
    captions = [f.find_element(By.TAG_NAME, "figcaption").text for f in figures]
    assert "Cost per day (USD)" in captions and "Tokens per model" in captions, captions
    label = figures[3].find_element(By.TAG_NAME, "svg").get_attribute("aria-label")
    assert "demo" in label or "claude" in label, label
    background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 23, 27)", background
    full_shot("console-usage.png")
    scheme(False)

    say("back to the sessions list: the new session is there, with its tokens and cost")
    driver.execute_script("performance.clearResourceTimings()")
    driver.get(URL + "/console#/sessions")
    wait.until(lambda d: session_id in d.find_element(By.TAG_NAME, "table").text)
    row = driver.find_element(By.XPATH, "//tbody/tr[td/a[text()='%s']]" % session_id)
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "completed" and cells[2] == "demo", cells
    assert cells[4] not in ("0", "") and cells[5].startswith("$"), cells
    # One list request per page: no request for each listed session.
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)")
    assert PREFIX + "/v1/sessions" in fetched, fetched
    assert not [path for path in fetched if path.startswith(PREFIX + "/v1/sessions/")], fetched
    # Every request stayed under the prefix (a reverse proxy serves nothing else).
    assert all(path.startswith(PREFIX + "/") for path in fetched), fetched

    say("the filters run on the server: status, then part of an id, from the keyboard")
    status = Select(driver.find_element(By.ID, "filter-status"))
    status.select_by_value("completed")
    wait.until(lambda d: d.find_element(By.ID, "filter-status").get_attribute("value") == "completed"
               and HOSTILE not in d.find_element(By.TAG_NAME, "table").text
               and session_id in d.find_element(By.TAG_NAME, "table").text)
    status = Select(driver.find_element(By.ID, "filter-status"))
    status.select_by_value("")
    wait.until(lambda d: HOSTILE in d.find_element(By.TAG_NAME, "table").text)
    driver.find_element(By.ID, "filter-text").send_keys(session_id[-10:])
    wait.until(lambda d: HOSTILE not in d.find_element(By.TAG_NAME, "table").text
               and session_id in d.find_element(By.TAG_NAME, "table").text)
    assert driver.switch_to.active_element.get_attribute("id") == "filter-text"
    driver.find_element(By.ID, "filter-text").send_keys("-no-such-id")
    wait.until(lambda d: "No sessions match." in d.find_element(By.TAG_NAME, "table").text)
    field = driver.find_element(By.ID, "filter-text")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    wait.until(lambda d: HOSTILE in d.find_element(By.TAG_NAME, "table").text)

    say("sign out forgets the key")
    driver.find_element(By.ID, "sign-out").click()
    wait.until(EC.presence_of_element_located((By.ID, "key")))
    assert driver.execute_script("return sessionStorage.length") == 0

    say("the run report, from its file")
    driver.get("file://" + os.path.abspath(REPORT))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".timeline .round")))
    page = text_of("#app")
    assert "It is 15. <img src=x onerror=" in page and "</script><script>" in page, page
    assert "completed" in page and "calculator" in page, page
    assert len(driver.find_elements(By.CSS_SELECTOR, ".timeline .round")) == 2
    assert driver.find_elements(By.CSS_SELECTOR, "table[aria-label='Usage by model'] tbody tr")
    injected = driver.execute_script(
        "return [document.querySelectorAll('#app img, #app script').length, window.__pwned === undefined]")
    assert injected == [0, True], injected
    full_shot("report.png")

    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    # A 401 from a refused key would be logged; none is expected here.
    assert not errors, errors
    print("console_test: ok", flush=True)
except Exception as error:  # the reason, the page and a screenshot, then a failing exit
    try:
        shot("failure.png")
        print(driver.find_element(By.TAG_NAME, "body").text[:4000], file=sys.stderr)
        for entry in driver.get_log("browser"):
            print("browser:", entry, file=sys.stderr)
    except Exception:
        pass
    print(f"console_test: FAILED at {step!r}: {error!r}", file=sys.stderr, flush=True)
    driver.quit()
    sys.exit(1)
driver.quit()
