// afe's UI, live: the ticket page and the tickets list subscribe to the API's WebSocket (the
// session cookie authenticates it) and patch the page by id as events arrive. Without this
// script every view still reads whole; with it nothing needs a reload.
"use strict";

(function () {
  const STATE_OF = {
    "node.started": "started", "node.completed": "completed", "node.failed": "failed",
    "node.skipped": "skipped", "ticket.claimed": "running", "ticket.done": "done",
    "ticket.failed": "failed", "ticket.cancelled": "cancelled", "ticket.paused": "paused",
    "ticket.resumed": "queued",
  };

  function setState(container, state) {
    if (!container) return;
    const badge = container.querySelector(".state");
    if (!badge) return;
    // setAttribute, not className: the graph's badges are SVG, whose className is read-only.
    badge.setAttribute("class", "state state-" + state);
    badge.textContent = state;
  }

  function utc(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  // Connects, and reconnects after a drop from the last event seen: the server replays what
  // came in between, and drops what this page already has.
  function follow(path, last, onEvent) {
    let after = last;
    let wait = 500;
    function open() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const query = after === null ? "" : (path.includes("?") ? "&" : "?") + "after=" + after;
      const socket = new WebSocket(scheme + "//" + location.host + path + query);
      socket.onmessage = function (message) {
        let event;
        try { event = JSON.parse(message.data); } catch (_) { return; }
        if (after !== null && typeof event.seq === "number") {
          if (event.seq <= after) return;
          after = event.seq;
        }
        wait = 500;
        onEvent(event);
      };
      socket.onclose = function () {
        setTimeout(open, wait);
        wait = Math.min(wait * 2, 10000);
      };
    }
    open();
  }

  // Replaces the fragments with these ids by the same fragments of the page as the server
  // renders it now, from one fetch: what a person may do changes with the ticket's state, and a
  // node that has ended gains its output or error, its calls and the link to its workspace diff.
  // Sections the person had opened stay open.
  function refresh(ids) {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (html) {
        if (!html) return;
        const page = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          const fresh = page.getElementById(id);
          const stale = document.getElementById(id);
          if (!fresh || !stale) return;
          const opened = Array.from(stale.querySelectorAll("details"), function (d) { return d.open; });
          const node = document.importNode(fresh, true);
          node.querySelectorAll("details").forEach(function (d, i) { if (opened[i]) d.open = true; });
          stale.replaceWith(node);
        });
      })
      .catch(function () { /* the page keeps what it shows; a reload brings the rest */ });
  }

  function ticketPage(body) {
    const ticket = body.dataset.ticket;
    const timeline = document.getElementById("timeline");
    follow("/v1/tickets/" + encodeURIComponent(ticket) + "/events/ws",
      Number(body.dataset.after || "0"), function (event) {
        if (timeline && !document.getElementById("event-" + event.seq)) {
          const item = document.createElement("li");
          item.id = "event-" + event.seq;
          const seq = document.createElement("span");
          seq.className = "seq";
          seq.textContent = "#" + event.seq + " ";
          const kind = document.createElement("code");
          kind.textContent = event.kind;
          const at = document.createElement("span");
          at.className = "meta";
          at.textContent = " " + utc(event.at);
          item.append(seq, kind, at);
          timeline.append(item);
        }
        const state = STATE_OF[event.kind];
        if (!state) return;
        const stale = [];
        if (event.kind.startsWith("node.") && event.payload && event.payload.node) {
          setState(document.getElementById("node-" + event.payload.node), state);
          setState(document.getElementById("graph-" + event.payload.node), state);
          if (state === "completed" || state === "failed") stale.push("node-" + event.payload.node);
        } else if (event.kind.startsWith("ticket.")) {
          setState(document.getElementById("ticket-state"), state);
        }
        if (event.kind.startsWith("ticket.") || event.kind === "node.completed") stale.push("actions");
        if (stale.length > 0) refresh(stale);
      });
  }

  function ticketsPage() {
    follow("/v1/events/ws", null, function (event) {
      const state = STATE_OF[event.kind];
      if (state && event.kind.startsWith("ticket.")) {
        setState(document.getElementById("ticket-" + event.ticket), state);
      }
      if (event.kind === "ticket.created" && !document.getElementById("ticket-" + event.ticket)) {
        const note = document.getElementById("new-tickets");
        if (note) note.hidden = false;
      }
    });
  }

  const body = document.body;
  if (body.dataset.ticket) ticketPage(body);
  else if (body.dataset.live === "tickets") ticketsPage();
})();
