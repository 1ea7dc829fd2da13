"""The web page at / in a real browser: Debian's chromium, headless, driven by selenium through chromedriver,
against the real server on the tiny LongLLaMA fixture (memory layers, sessions, fine-tuning in about a second).

Each view is used as a person would: a streamed chat answer and Stop, a document read into a session with its
prefill progress and memory gauge and then answered, a session saved and restored, a fine-tuning job followed to
`succeeded` with its loss curve drawn and its model answering in the chat, the metrics view, the API key asked for.
The browser resolves no host but 127.0.0.1, and its network log must show no request leaving the server's origin.
Labels and keyboard-only use are checked. Screenshots of each view go to <build>/webui-screenshots/.

Needs chromium and chromium-driver (scripts/install-deps.sh) and selenium (make_venv.sh): missing, the tests fail.
"""
import gzip
import json
import os
import shutil
import tempfile
import time

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import BIN, FIXTURES, Server

LONGLLAMA = os.path.join(FIXTURES, "longllama", "basic")
SHOTS = os.path.join(os.path.dirname(os.path.abspath(BIN)), "webui-screenshots")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
os.environ.setdefault("SE_OFFLINE", "true")  # selenium never downloads a driver: Debian's are named above
EXAMPLES = [{"prompt": f"Question {i}: what is the colour of the sky?", "completion": " Blue, always blue."}
            for i in range(16)]


class Browser:
    """One headless chromium. Its network log (CDP events) is kept across reads, since reading drains it."""

    def __init__(self):
        o = webdriver.ChromeOptions()
        o.binary_location = CHROMIUM
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1280,1000", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", "--disable-extensions", "--disable-sync",
                  # the network cut off from everything but the server: no other host resolves
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]:
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
        self.events = []

    def network(self):
        """[(method, params)] of every CDP Network event so far."""
        for entry in self.d.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"].startswith("Network."):
                self.events.append((msg["method"], msg["params"]))
        return self.events

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def by_id(self, id_):
        return self.d.find_element(By.ID, id_)

    def wait(self, cond, timeout=30, what="condition"):
        return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda d: cond(), message=what)

    def text(self, id_):
        return self.js("return document.getElementById(arguments[0]).textContent", id_)

    def show(self, view):
        self.d.find_element(By.CSS_SELECTOR, f'nav button[data-view="{view}"]').click()
        self.wait(lambda: self.by_id("view-" + view).is_displayed(), what=f"the {view} view")

    def shot(self, name):
        os.makedirs(SHOTS, exist_ok=True)
        self.d.save_screenshot(os.path.join(SHOTS, name + ".png"))


@pytest.fixture(scope="module")
def server():
    tmp = tempfile.mkdtemp()
    s = Server("--parallel", "2", "--jobs-dir", os.path.join(tmp, "jobs"), "--session-dir",
               os.path.join(tmp, "sessions"), "--train-threads", "1", model=LONGLLAMA)
    yield s
    assert s.stop() == 0, "".join(s.log)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.d.quit()


@pytest.fixture
def page(server, browser):
    """The page freshly loaded, the model list filled."""
    browser.d.get(server.base + "/")
    browser.wait(lambda: browser.by_id("view-chat").is_displayed() and
                 browser.js("return document.getElementById('chat-model').options.length") > 0, what="the page ready")
    return browser


def test_page_served_compressed_with_cache_headers(server):
    status, h, gz = server.request("GET", "/", headers={"Accept-Encoding": "gzip, deflate, br"})
    assert status == 200 and h["content-encoding"] == "gzip" and h["content-type"].startswith("text/html")
    assert h["cache-control"] == "no-cache" and h["vary"] == "Accept-Encoding" and h["etag"].endswith('-gz"')
    status, plain_h, plain = server.request("GET", "/", headers={"Accept-Encoding": "identity"})
    assert status == 200 and "content-encoding" not in plain_h and gzip.decompress(gz) == plain
    assert b"<title>mnemo</title>" in plain and plain_h["etag"] != h["etag"]
    assert len(gz) < len(plain)
    status, h304, body = server.request("GET", "/", headers={"Accept-Encoding": "gzip",
                                                             "If-None-Match": 'W/"other", ' + h["etag"]})
    assert status == 304 and body == b"" and h304["etag"] == h["etag"]
    status, _, _ = server.request("GET", "/", headers={"Accept-Encoding": "gzip;q=0", "If-None-Match": h["etag"]})
    assert status == 200  # the identity representation has its own tag
    status, h, _ = server.request("GET", "/webui/app.js")
    assert status == 200 and h["content-type"].startswith("text/javascript")
    assert server.request("GET", "/webui/missing.js")[0] == 404
    # the API is unchanged: JSON where it was, POST / not a page
    status, models = server.get_json("/v1/models")
    assert status == 200 and models["object"] == "list"
    assert server.request("POST", "/", body={})[0] == 405


def test_no_webui_turns_it_off():
    s = Server("--no-webui", "--api-key", "k1", model=LONGLLAMA)
    try:
        status, _, body = s.request("GET", "/")
        assert status == 401  # nothing public at / any more: the key comes first, as for any route
        status, _, body = s.request("GET", "/", headers={"Authorization": "Bearer k1"})
        assert status == 404 and b"--no-webui" in body
        assert s.request("GET", "/webui/app.js", headers={"Authorization": "Bearer k1"})[0] == 404
    finally:
        assert s.stop() == 0


def test_page_loads_with_nothing_from_elsewhere(server, page):
    page.shot("chat-empty")
    sent = [p["request"]["url"] for m, p in page.network() if m == "Network.requestWillBeSent"]
    assert any(u == server.base + "/" for u in sent) and any(u.endswith("/webui/app.js") for u in sent)
    outside = [u for u in sent if not (u.startswith(server.base + "/") or u.startswith("data:"))]
    assert not outside, outside
    failed = [p for m, p in page.network() if m == "Network.loadingFailed" and not p.get("canceled")]
    assert not failed, failed
    errors = [e for e in page.d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    assert "basic" in page.text("server-info")


def test_chat_streams_stops_and_keeps_the_conversation(server, page):
    page.show("chat")
    page.js("localStorage.removeItem('mnemo.chat')")
    page.by_id("chat-clear").click()
    for id_, v in [("chat-max-tokens", "24"), ("chat-seed", "3"), ("chat-temperature", "0")]:
        page.by_id(id_).clear()
        page.by_id(id_).send_keys(v)
    page.by_id("chat-input").send_keys("Hello there", Keys.ENTER)
    page.wait(lambda: "tokens/s" in page.text("chat-log"), what="an answer with its speed")
    answer = page.js("return document.querySelector('#chat-log li.assistant .text').textContent")
    meta = page.js("return document.querySelector('#chat-log li.assistant .meta').textContent")
    assert answer and "answer tokens" in meta, meta
    streamed = [p for m, p in page.network()
                if m == "Network.responseReceived" and p["response"]["url"].endswith("/v1/chat/completions")]
    assert streamed and streamed[-1]["response"]["mimeType"] == "text/event-stream"
    page.shot("chat")

    # Stop cuts a long answer short; Send is back
    page.by_id("chat-max-tokens").clear()
    page.by_id("chat-max-tokens").send_keys("100000")
    page.by_id("chat-ignore-eos").click()
    page.by_id("chat-input").send_keys("Go on for a long time", Keys.ENTER)
    page.wait(lambda: page.js("return document.querySelectorAll('#chat-log li.assistant')[1]"
                              ".querySelector('.text').textContent.length") > 0, what="streamed text")
    page.by_id("chat-stop").send_keys(Keys.ENTER)  # by keyboard: the streaming text moves the button under a mouse
    page.wait(lambda: "stopped" in page.js("return document.querySelectorAll('#chat-log li.assistant')[1]"
                                           ".querySelector('.meta').textContent"),
              what="the stopped mark: " + page.text("chat-log")[-300:] + page.text("chat-error"))
    assert page.by_id("chat-send").is_enabled() and not page.by_id("chat-stop").is_enabled()

    # the conversation survives a reload (it lives in the browser)
    page.d.refresh()
    page.wait(lambda: page.js("return document.querySelectorAll('#chat-log li').length") == 4, what="4 messages")
    assert page.js("return document.querySelector('#chat-log li.user .text').textContent") == "Hello there"


def test_document_read_with_progress_memory_and_answered(server, page, tmp_path):
    doc = tmp_path / "report.txt"
    doc.write_text("The treaty was signed in Vienna by the two envoys; the archive keeps both copies.\n" * 60)
    page.show("document")
    page.js("""window.progressSeen = [];
               new MutationObserver(() => window.progressSeen.push(
                   document.getElementById('doc-progress-text').textContent))
                 .observe(document.getElementById('doc-progress-text'), {childList: true, characterData: true,
                                                                          subtree: true});""")
    page.by_id("doc-file").send_keys(str(doc))
    assert "report.txt" in page.text("doc-drop")
    page.by_id("doc-session").clear()
    page.by_id("doc-session").send_keys("report")
    page.by_id("doc-read").click()
    page.wait(lambda: page.text("doc-progress-text").startswith("Read "), timeout=60, what="the document read")
    seen = page.js("return window.progressSeen")
    assert any(t.startswith("Prefill: ") for t in seen), seen  # the server's progress chunks were drawn
    page.wait(lambda: "Rows in each memory layer" in page.text("mem-stats"), what="the memory gauge")
    status, sess = server.get_json("/v1/sessions/report")
    assert status == 200 and sess["memory"]["memory_tokens"] > 0
    assert f"{sess['memory']['memory_tokens']:,}" in page.text("mem-stats")
    assert page.js("return document.getElementById('mem-meter').value") > 0
    page.by_id("doc-question").send_keys("Where was the treaty signed?", Keys.ENTER)
    page.wait(lambda: page.text("doc-answer").strip() != "" and page.by_id("doc-ask").is_enabled(),
              what="an answer")
    assert page.text("doc-error") == ""
    page.shot("document")


def test_sessions_saved_restored_and_errors_shown(server, page):
    assert server.post("/v1/sessions", {"id": "s1"})[0] == 201
    status, _ = server.post("/v1/completions", {"prompt": "To be or not to be, " * 20, "max_tokens": 0,
                                                "session": "s1"})
    assert status == 200
    tokens = server.get_json("/v1/sessions/s1")[1]["tokens"]
    page.show("sessions")
    row = lambda id_: f'#sessions-table tr[data-session="{id_}"]'
    page.wait(lambda: page.js(f"return !!document.querySelector('{row('s1')}')"), what="session s1 listed")
    page.by_id("snapshot-name").send_keys("s1.v1")
    page.d.find_element(By.CSS_SELECTOR, row("s1") + " button[aria-label='Save session s1']").click()
    page.wait(lambda: "Saved session s1 as snapshot s1.v1" in page.text("sessions-status"), what="saved")
    page.wait(lambda: page.js("return !!document.querySelector('#snapshots-table tr[data-snapshot=\"s1.v1\"]')"),
              what="the snapshot listed")
    page.d.find_element(By.CSS_SELECTOR, row("s1") + " button[aria-label^='Restore']").click()
    page.wait(lambda: f"Restored session s1: {tokens:,} tokens" in page.text("sessions-status"), what="restored")
    # a fresh session from the snapshot holds the same tokens
    page.by_id("session-new-id").send_keys("s2")
    page.d.find_element(By.CSS_SELECTOR, '#snapshots-table tr[data-snapshot="s1.v1"] button').click()
    page.wait(lambda: page.js(f"return !!document.querySelector('{row('s2')}')"), what="session s2")
    assert server.get_json("/v1/sessions/s2")[1]["tokens"] == tokens
    page.shot("sessions")
    # the API's error, as it gives it
    page.by_id("snapshot-name").clear()
    page.by_id("snapshot-name").send_keys("no-such-snapshot")
    page.d.find_element(By.CSS_SELECTOR, row("s1") + " button[aria-label^='Restore']").click()
    page.wait(lambda: page.text("sessions-error").startswith("HTTP 404"), what="the 404 shown")
    page.d.find_element(By.CSS_SELECTOR, row("s2") + " button[aria-label='Delete session s2']").click()
    page.wait(lambda: not page.js(f"return !!document.querySelector('{row('s2')}')"), what="s2 deleted")
    assert server.request("GET", "/v1/sessions/s2")[0] == 404


def test_finetune_job_curve_cancel_and_chat(server, page, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(EXAMPLES[0]) + "\n" + '{"prompt": "no completion"}\n')
    good = tmp_path / "train.jsonl"
    good.write_text("".join(json.dumps(e) + "\n" for e in EXAMPLES))
    page.show("finetune")
    page.wait(lambda: page.js("return document.getElementById('ft-model').options.length") > 0, what="models")
    page.by_id("ft-file").send_keys(str(bad))
    page.d.find_element(By.CSS_SELECTOR, "#ft-upload-form button[type=submit]").click()
    page.wait(lambda: "line 2" in page.text("ft-upload-error"), what="the refused line")
    assert page.text("ft-upload-error").startswith("HTTP 400")
    assert page.by_id("ft-upload-line").is_displayed() and "no completion" in page.text("ft-upload-line")

    page.by_id("ft-file").send_keys(str(good))
    page.d.find_element(By.CSS_SELECTOR, "#ft-upload-form button[type=submit]").click()
    page.wait(lambda: "train.jsonl" in Select(page.by_id("ft-training-file")).first_selected_option.text,
              what="the uploaded file selected")
    for id_, v in [("ft-steps", "12"), ("ft-seq-len", "48"), ("ft-batch", "2"), ("ft-lr", "10"), ("ft-epochs", "1")]:
        page.by_id(id_).clear()
        page.by_id(id_).send_keys(v)
    page.d.find_element(By.CSS_SELECTOR, "#ft-job-form button[type=submit]").click()
    page.wait(lambda: page.text("ft-status") == "succeeded", timeout=180, what="the job succeeded")
    # every step's loss arrives through the event stream, which the status (read from the job) may precede
    points = lambda: int(page.js("return document.getElementById('ft-loss').dataset.points"))
    page.wait(lambda: points() == 12, what="12 points on the curve")
    drawn = page.js("""const c = document.getElementById('ft-loss'), d = c.getContext('2d')
                           .getImageData(0, 0, c.width, c.height).data;
                       let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] && d[i + 2] > d[i] + 40) n++;
                       return n;""")  # the curve's blue pixels
    assert drawn > 100, drawn
    assert "12 points" in page.by_id("ft-loss").get_attribute("aria-label")
    page.shot("finetune")

    # one click: the chat on the fine-tuned model, which answers
    page.by_id("ft-chat").click()
    page.wait(lambda: page.by_id("view-chat").is_displayed(), what="the chat view")
    model = Select(page.by_id("chat-model")).first_selected_option.get_attribute("value")
    assert model.startswith("ft:basic:web:"), model
    page.by_id("chat-max-tokens").clear()
    page.by_id("chat-max-tokens").send_keys("8")
    if not page.by_id("chat-ignore-eos").is_selected():
        page.by_id("chat-ignore-eos").click()
    page.by_id("chat-input").send_keys("Question 1: what is the colour of the sky?", Keys.ENTER)
    page.wait(lambda: "tokens/s" in page.text("chat-log"), what="the fine-tuned model's answer")
    meta = page.js("return document.querySelector('#chat-log li.assistant .meta').textContent")
    assert " 8 answer tokens" in meta, meta  # it answered through its adapter (ignore EOS: all 8 tokens)

    # a long job cancelled from the page
    page.show("finetune")
    page.by_id("ft-steps").clear()
    page.by_id("ft-steps").send_keys("100000")
    page.d.find_element(By.CSS_SELECTOR, "#ft-job-form button[type=submit]").click()
    page.wait(lambda: page.text("ft-status") == "running" and page.by_id("ft-cancel").is_enabled(), timeout=60,
              what="the long job running")
    page.by_id("ft-cancel").click()
    page.wait(lambda: page.text("ft-status") == "cancelled", what="the job cancelled")


def test_metrics_view(server, page):
    server.post("/v1/completions", {"prompt": "To be", "max_tokens": 4})
    page.show("metrics")
    card = "#metrics-cards div[data-metric='Requests'] dd"
    page.wait(lambda: page.js(f"return document.querySelector(\"{card}\")?.textContent || '0'") != "0",
              what="the request count")
    assert "Jobs succeeded" in page.text("metrics-cards") and "Memory (slots)" in page.text("metrics-cards")
    page.shot("metrics")


def test_labels_and_keyboard_only(server, page):
    unlabeled = page.js("""return [...document.querySelectorAll('input, select, textarea, meter, progress')]
        .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.id);""")
    assert not unlabeled, unlabeled
    nameless = page.js("""return [...document.querySelectorAll('button')]
        .filter(b => !(b.textContent.trim() || b.getAttribute('aria-label'))).map(b => b.outerHTML);""")
    assert not nameless, nameless
    assert page.by_id("ft-loss").get_attribute("role") == "img" and page.by_id("ft-loss").get_attribute("aria-label")
    assert page.js("return [...document.querySelectorAll('section.view')].every(s => s.getAttribute('aria-labelledby'))")

    # keyboard only: Tab to the nav, Enter opens a view with focus on its heading, Tab reaches its controls
    page.d.get(server.base + "/#chat")
    page.wait(lambda: page.by_id("view-chat").is_displayed(), what="loaded")
    page.js("document.activeElement.blur()")
    focused = []
    active = page.d.switch_to.active_element
    for _ in range(40):
        active.send_keys(Keys.TAB)
        active = page.d.switch_to.active_element
        focused.append(active.get_attribute("id") or active.get_attribute("data-view") or active.tag_name)
        if focused[-1] == "sessions":
            break
    assert focused[-1] == "sessions", focused
    active.send_keys(Keys.ENTER)
    page.wait(lambda: page.by_id("view-sessions").is_displayed(), what="the sessions view by keyboard")
    assert page.d.switch_to.active_element.get_attribute("id") == "sessions-title"
    page.d.switch_to.active_element.send_keys(Keys.TAB)
    assert page.d.switch_to.active_element.get_attribute("id") == "session-new-id"
    # the chat by keyboard alone: Shift+Tab back to the nav, Enter, Tab through to the message, Enter sends
    page.d.get(server.base + "/#chat")
    page.wait(lambda: page.by_id("view-chat").is_displayed(), what="loaded")
    page.by_id("chat-clear").send_keys(Keys.ENTER)
    active = page.d.switch_to.active_element
    assert active.get_attribute("id") == "chat-input"  # "New conversation" hands focus to the message box
    active.send_keys("Hi", Keys.ENTER)
    page.wait(lambda: "tokens/s" in page.text("chat-log"), what="an answer sent by keyboard")


def test_api_key_asked_for_and_sent_as_header(browser):
    s = Server("--api-key", "s3cret-key", model=LONGLLAMA)
    try:
        b = browser
        b.d.get(s.base + "/")
        b.wait(lambda: b.by_id("view-key").is_displayed(), what="the key form")
        assert not b.by_id("nav").is_displayed() and not b.by_id("view-chat").is_displayed()
        b.shot("apikey")
        b.by_id("key-input").send_keys("wrong", Keys.ENTER)
        b.wait(lambda: b.text("key-error").startswith("HTTP 401"), what="the refusal shown")
        b.by_id("key-input").clear()
        b.by_id("key-input").send_keys("s3cret-key", Keys.ENTER)
        b.wait(lambda: b.by_id("view-chat").is_displayed(), what="the chat after the key")
        assert b.js("return document.getElementById('chat-model').options.length") > 0
        assert b.js("return localStorage.getItem('mnemo.apiKey')") is None  # not remembered unless ticked
        sent = [p["request"] for m, p in b.network() if m == "Network.requestWillBeSent"
                and p["request"]["url"].startswith(s.base + "/v1/models")]
        assert sent and all("s3cret-key" not in r["url"] for r in sent)
        assert sent[-1]["headers"].get("Authorization") == "Bearer s3cret-key"
        b.d.refresh()  # memory only: a reload asks again
        b.wait(lambda: b.by_id("view-key").is_displayed(), what="the key form after a reload")
    finally:
        assert s.stop() == 0
