// The playground page: sends the conversation to POST /api/v1/playground/sessions/ and renders the
// answers streamed over the session's websocket. Model text is only ever set as text (textContent,
// text nodes), never as markup. Leaving the page closes the socket, which stops the answer server-side.
(function () {
  "use strict";
  const setup = document.getElementById("pg-form");
  if (!setup) return;
  const sendForm = document.getElementById("pg-send");
  const input = document.getElementById("pg-input");
  const sendBtn = document.getElementById("pg-send-button");
  const stopBtn = document.getElementById("pg-stop");
  const statusEl = document.getElementById("pg-status");
  const errorEl = document.getElementById("pg-error");
  const cols = ["a", "b"];
  let history = { a: [], b: [] };
  let session = null; // {id, ws}
  let bubbles = {}; // "a:0" -> the assistant turn's text node

  function csrf() { return setup.querySelector("input[name=csrfmiddlewaretoken]").value; }
  function chat(col) { return document.getElementById("pg-chat-" + col); }
  function select(col) { return document.getElementById("pg-target-" + col); }

  function activeColumns() {
    return cols.filter((c) => select(c).value);
  }

  function showColumns() {
    cols.forEach((c) => {
      const sel = select(c);
      const box = document.querySelector('.pg-column[data-column="' + c + '"]');
      box.hidden = !sel.value;
      document.getElementById("pg-title-" + c).textContent = sel.value ? sel.options[sel.selectedIndex].text : "";
    });
  }

  function message(col, role, text) {
    const div = document.createElement("div");
    div.className = "pg-msg pg-" + role;
    const label = document.createElement("span");
    label.className = "pg-role";
    label.textContent = role;
    const body = document.createTextNode(text || "");
    div.append(label, body);
    chat(col).append(div);
    chat(col).scrollTop = chat(col).scrollHeight;
    return { div, body };
  }

  function meta(col, text) {
    const p = document.createElement("div");
    p.className = "pg-meta";
    p.textContent = text;
    chat(col).append(p);
  }

  function target(value) {
    const parts = value.split(":");
    if (parts[0] === "model") return { model: Number(parts[1]) };
    return { run: Number(parts[1]), step: Number(parts[2]) };
  }

  function settings() {
    const f = setup.elements;
    // An empty box is left out (the server's default applies): Number("") is 0, which would answer
    // greedily (temperature 0) or be refused as 0 new tokens.
    const num = (name) => {
      const text = f[name].value.trim();
      return text === "" ? undefined : Number(text);
    };
    return { temperature: num("temperature"), top_p: num("top_p"), top_k: num("top_k"),
             max_new_tokens: num("max_new_tokens"), tools: f.tools.checked, max_turns: num("max_turns"),
             seed: num("seed") };
  }

  function bubble(col, turn) {
    const key = col + ":" + turn;
    if (!bubbles[key]) bubbles[key] = message(col, "assistant", "").body;
    return bubbles[key];
  }

  function onEvent(e) {
    const col = e.target;
    if (e.type === "delta") { bubble(col, e.turn).appendData(e.text); }
    else if (e.type === "reset") { bubble(col, e.turn).data = e.text; }
    else if (e.type === "tool") {
      message(col, "tool", e.name + "(" + e.arguments + ")\n→ " + e.result);
    } else if (e.type === "done") {
      const turns = (e.turns || []).filter((t) => t.role === "assistant");
      const last = turns.length ? turns[turns.length - 1].content : "";
      history[col].push({ role: "assistant", content: last });
      meta(col, e.finish_reason + " · " + e.tokens + (e.tokens === 1 ? " token · " : " tokens · ") + e.seconds + " s");
    } else if (e.type === "stopped") { meta(col, "stopped"); }
    else if (e.type === "error") { meta(col, "error: " + e.error); }
    else if (e.type === "end") {
      statusEl.textContent = e.status + (e.reason ? " (" + e.reason + ")" : "");
      if (e.error) errorEl.textContent = e.error;
      finish();
    }
    if (col) chat(col).scrollTop = chat(col).scrollHeight;
  }

  function finish() {
    if (session && session.ws) session.ws.close();
    session = null;
    sendBtn.disabled = false;
    stopBtn.disabled = true;
  }

  function listen(s) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(scheme + "://" + location.host + s.ws_url);
    session = { id: s.id, ws };
    ws.addEventListener("message", (msg) => {
      const frame = JSON.parse(msg.data);
      if (frame.type === "events") frame.events.forEach(onEvent);
    });
    ws.addEventListener("close", (ev) => {
      if (session && session.ws === ws) {
        statusEl.textContent = "connection closed (" + ev.code + ")";
        finish();
      }
    });
  }

  async function post(url, body) {
    const resp = await fetch(url, {
      method: "POST", credentials: "same-origin", body: body ? JSON.stringify(body) : undefined,
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrf() },
    });
    return { resp, answer: await resp.json().catch(() => ({})) };
  }

  async function stop() {
    if (!session) return;
    const id = session.id;
    finish();
    await post(setup.dataset.api + id + "/stop/");
  }

  sendForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    errorEl.textContent = "";
    const text = input.value;
    const columns = activeColumns();
    if (!text.trim() || !columns.length) return;
    await stop();
    const system = setup.elements.system.value;
    const targets = columns.map((c) => {
      history[c].push({ role: "user", content: text });
      message(c, "user", text);
      const messages = (system.trim() ? [{ role: "system", content: system }] : []).concat(history[c]);
      return Object.assign(target(select(c).value), { messages });
    });
    input.value = "";
    bubbles = {};
    sendBtn.disabled = true;
    statusEl.textContent = "starting…";
    const body = { targets, settings: settings() };
    for (let attempt = 0; attempt < 20; attempt++) {
      const { resp, answer } = await post(setup.dataset.api, body);
      if (resp.ok) {
        statusEl.textContent = "answering…";
        stopBtn.disabled = false;
        listen(answer);
        return;
      }
      if (resp.status !== 409 || attempt === 19) {
        const err = answer.error || {};
        errorEl.textContent = (err.field ? err.field + ": " : "") + (err.message || resp.statusText);
        statusEl.textContent = "";
        columns.forEach((c) => history[c].pop());
        sendBtn.disabled = false;
        return;
      }
      await new Promise((r) => setTimeout(r, 500)); // the previous answer is still ending
    }
  });

  stopBtn.addEventListener("click", stop);
  document.getElementById("pg-clear").addEventListener("click", async () => {
    await stop();
    history = { a: [], b: [] };
    cols.forEach((c) => { chat(c).textContent = ""; });
    statusEl.textContent = "";
  });
  cols.forEach((c) => select(c).addEventListener("change", async () => {
    await stop();
    history = { a: [], b: [] };
    cols.forEach((x) => { chat(x).textContent = ""; });
    showColumns();
  }));
  showColumns();
})();
