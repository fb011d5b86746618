"""The built-in chat page in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by python3-selenium) loads /, sends a message, sees the reply stream in
(text appears while the request is still running), and saves a screenshot."""

import os
import time

import pytest

from conftest import API_KEY, MODEL_NAME

# Not skipped when missing: tools/setup.sh installs python3-selenium, chromium and chromium-driver.
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def browser():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1200,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    yield driver
    driver.quit()


def test_chat_page_streams_a_reply(server, browser, artifacts):
    browser.get(server.url + "/")
    assert browser.title == "deepinfer chat"
    key = browser.find_element(By.ID, "api-key")
    key.send_keys(API_KEY)
    key.send_keys(Keys.TAB)  # "change": the page reloads the model list with the key
    WebDriverWait(browser, 30).until(lambda d: MODEL_NAME in d.find_element(By.ID, "model").text)
    browser.find_element(By.ID, "max-tokens").clear()
    browser.find_element(By.ID, "max-tokens").send_keys("48")
    box = browser.find_element(By.ID, "input")
    box.send_keys("Hello from the browser test")
    box.send_keys(Keys.ENTER)

    # Streamed: some text shows while the bubble is still marked as streaming.
    seen_while_streaming = []

    def streamed_text(driver):
        bubble = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant")
        if not bubble:
            return False
        text = bubble[-1].find_element(By.CSS_SELECTOR, ".content").text
        if bubble[-1].get_attribute("data-state") == "streaming" and text:
            seen_while_streaming.append(len(text))
        return bubble[-1].get_attribute("data-state") == "done"

    WebDriverWait(browser, 120, poll_frequency=0.02).until(streamed_text)
    bubble = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]
    assert not bubble.find_elements(By.CSS_SELECTOR, ".error"), bubble.text
    assert bubble.find_element(By.CSS_SELECTOR, ".content").text
    assert seen_while_streaming, "no text appeared before the reply finished"
    assert "48 tokens" in bubble.find_element(By.CSS_SELECTOR, ".meta").text
    assert browser.find_element(By.CSS_SELECTOR, ".msg.user").text == "Hello from the browser test"
    path = os.path.join(artifacts, "chat_page.png")
    browser.save_screenshot(path)
    assert os.path.getsize(path) > 10000
    print("screenshot:", path)
