"""The web UI in headless Chromium, driven by Playwright (PyPI) with Debian's chromium: sign-in
refused with a wrong token, a ticket started from the form and watched as it advances without a
reload, a node's output and the diff of the workspace it saved opened, another ticket cancelled, one rerun from a node, every view shot,
and no console error anywhere. Run by crates/afe-cli/tests/browser.rs, which starts afe serve
--ui and a worker whose node n2 waits for the file AFE_GATE."""

import os
import pathlib
import sys

from playwright.sync_api import expect, sync_playwright

URL = os.environ["AFE_URL"]
TOKEN = os.environ["AFE_TOKEN"]
GATE = pathlib.Path(os.environ["AFE_GATE"])
SHOTS = pathlib.Path(os.environ["AFE_SCREENSHOTS"])
SHOTS.mkdir(parents=True, exist_ok=True)

problems = []


def watch(page):
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def start(page, n):
    page.goto(f"{URL}/ui/start?flow=work")
    page.get_by_label("n (required)").fill(str(n))
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#ticket-state")).to_be_visible()
    return page.url.rsplit("/", 1)[1]


def section(page, node, title):
    """The text of a node's section (Definition, Input, Output, ...)."""
    return page.locator(f"#node-{node} details", has=page.locator("summary", has_text=title)).locator("pre")


def state_of(page, node):
    return page.locator(f"#node-{node} .state")


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=os.environ.get("AFE_CHROMIUM", "/usr/bin/chromium"),
                                args=["--no-sandbox"])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    watch(page)

    # A wrong token is refused, and nothing is kept.
    page.goto(f"{URL}/ui")
    expect(page).to_have_url(f"{URL}/ui/login")
    page.get_by_label("API token").fill("not-the-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("AFE-API-001")
    shot(page, "login-refused")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{URL}/ui")

    # Start from the form; the ticket stops at n2 until the gate opens.
    page.goto(f"{URL}/ui/start?flow=work")
    shot(page, "start")
    watched = start(page, 5)
    expect(state_of(page, "n1")).to_have_text("completed", timeout=60_000)
    expect(state_of(page, "n2")).to_have_text("started", timeout=60_000)
    expect(page.locator("#graph-n2 .state")).to_have_text("started")

    # Another ticket, also held at n2, is cancelled from its page.
    other = context.new_page()
    watch(other)
    cancelled = start(other, 6)
    expect(state_of(other, "n2")).to_have_text("started", timeout=60_000)
    other.get_by_role("button", name="Cancel").click()
    expect(other.locator("#ticket-state .state")).to_have_text("cancelled", timeout=60_000)
    other.close()

    # The watched page advances live: no reload (the marker survives).
    page.evaluate("window.__notReloaded = true")
    GATE.write_text("open")
    expect(state_of(page, "n3")).to_have_text("completed", timeout=60_000)
    expect(page.locator("#graph-n3 .state")).to_have_text("completed")
    expect(page.locator("#ticket-state .state")).to_have_text("done", timeout=60_000)
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"
    expect(page.locator("#timeline li").last).to_contain_text("ticket.done")

    # A node's detail, arrived live: its output, and the link to the workspace it saved.
    page.locator("#node-n1 summary", has_text="Output").click()
    expect(section(page, "n1", "Output")).to_contain_text('"node": "n1"')
    # What n2 was given: the ticket's input and n1's output.
    page.locator("#node-n2 summary", has_text="Input").click()
    expect(section(page, "n2", "Input")).to_contain_text('"n": 5')
    expect(section(page, "n2", "Input")).to_contain_text('"n1": {')
    diff_link = page.locator("#node-n3").get_by_role("link", name="Workspace diff")
    expect(diff_link).to_be_visible()
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"
    shot(page, "ticket")

    # n3's diff: what it changed since n1's checkpoint (n2 saved nothing).
    diff_link.click()
    expect(page.locator("#diff")).to_contain_text("notes.txt")
    expect(page.locator("#diff ins")).to_have_text("+third")
    shot(page, "diff")
    page.get_by_role("link", name="Back to the ticket").click()
    expect(page.locator("#ticket-state .state")).to_have_text("done")

    # Rerun from n2: a new ticket, n1 kept, the rest run again.
    page.get_by_label("Rerun from").select_option("n2")
    page.get_by_label("I understand this starts a new ticket, whose model calls are paid again").check()
    page.get_by_role("button", name="Rerun").click()
    expect(page.locator("#ticket-state .state")).to_have_text("done", timeout=60_000)
    assert watched not in page.url, "the rerun is a new ticket"
    expect(state_of(page, "n1")).to_have_text("completed")

    for name, path in [("tickets", "/ui"), ("revisions", "/ui/revisions"), ("queue", "/ui/queue")]:
        page.goto(f"{URL}{path}")
        shot(page, name)
    page.goto(f"{URL}/ui")
    expect(page.locator(f"#ticket-{cancelled} .state")).to_have_text("cancelled")

    # A narrow screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{URL}/ui")
    shot(page, "tickets-narrow")
    browser.close()

if problems:
    print("\n".join(problems))
    sys.exit(1)
print("browser: every step passed, no console error")
