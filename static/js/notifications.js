// The page header's notification centre: the bell's unread count and its panel, kept live over
// /ws/notifications/ (the signed-in user's own group). The list comes from the API on load and after
// every reconnect (the socket replays nothing). Each live notification is also dispatched as a
// `rlstudio:notification` event, which the run page turns into a chart marker.
// Text only ever goes through textContent.
(function () {
  "use strict";
  const root = document.getElementById("notify-centre");
  if (!root) return;
  const bell = document.getElementById("notify-bell");
  const panel = document.getElementById("notify-panel");
  const list = document.getElementById("notify-list");
  const count = document.getElementById("notify-count");
  const readForm = document.getElementById("notify-read-all");
  const received = [];

  function setCount(n) {
    count.textContent = String(n);
    count.classList.toggle("zero", !n);
  }

  function item(n) {
    const li = document.createElement("li");
    li.className = "notify-item level-" + n.level + (n.read ? "" : " unread");
    li.dataset.id = n.id;
    const title = document.createElement(n.run ? "a" : "strong");
    if (n.run) title.href = "/runs/" + n.run + "/";
    title.textContent = n.title;
    const when = document.createElement("span");
    when.className = "muted small";
    when.textContent = " " + new Date(n.created).toLocaleString();
    li.append(title, when);
    if (n.body) {
      const body = document.createElement("div");
      body.className = "small notify-body";
      body.textContent = n.body;
      li.append(body);
    }
    return li;
  }

  async function load() {
    try {
      const resp = await fetch(root.dataset.api + "?limit=20", { credentials: "same-origin" });
      if (!resp.ok) return;
      const page = await resp.json();
      list.replaceChildren(...page.results.map(item));
      if (!page.results.length) {
        const li = document.createElement("li");
        li.className = "muted";
        li.textContent = "Nothing yet.";
        list.append(li);
      }
      setCount(page.unread);
    } catch (e) { console.error(e); }
  }

  function receive(frame) {
    if (frame.type !== "notification" || !frame.notification) return;
    const n = frame.notification;
    received.push(n);
    const empty = list.querySelector("li.muted");
    if (empty) empty.remove();
    list.insertBefore(item(n), list.firstChild);
    while (list.children.length > 50) list.lastChild.remove();
    if (!n.read) setCount(Number(count.textContent || 0) + 1);
    bell.classList.add("ring");
    setTimeout(() => bell.classList.remove("ring"), 2000);
    document.dispatchEvent(new CustomEvent("rlstudio:notification", { detail: n }));
  }

  bell.addEventListener("click", () => {
    panel.hidden = !panel.hidden;
    bell.setAttribute("aria-expanded", String(!panel.hidden));
  });
  document.addEventListener("click", (ev) => {
    if (!panel.hidden && !root.contains(ev.target)) { panel.hidden = true; bell.setAttribute("aria-expanded", "false"); }
  });
  readForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const resp = await fetch(root.dataset.readApi, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json",
                   "X-CSRFToken": readForm.querySelector("input[name=csrfmiddlewaretoken]").value },
        body: "{}",
      });
      if (resp.ok) { setCount((await resp.json()).unread); list.querySelectorAll(".unread").forEach((el) => el.classList.remove("unread")); }
    } catch (e) { console.error(e); }
  });

  let retry = 1000;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws/notifications/`);
    ws.onopen = () => { retry = 1000; load(); };
    ws.onmessage = (msg) => { try { receive(JSON.parse(msg.data)); } catch (e) { console.error(e); } };
    ws.onclose = (ev) => {
      if (ev.code === 4401) return;  // signed out
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 30000);
    };
  }
  connect();
  window.rlstudioNotifications = { received: () => received.slice(), unread: () => Number(count.textContent || 0) };
})();
