// The run page's "Evaluations" card (and a catalog model's, whose form has no checkpoints and whose
// one column is the model, named by `labels`): starts an evaluation (POST to the API with the page's
// CSRF token) and stops one, draws the newest finished one as a curve (mean@k, pass@k, maj@k by step;
// the base model at step 0) and a table, and fills the prompts x columns matrix with its better / worse
// filter; opening a cell loads its k transcripts from the API. Prompts, responses and model names are
// model and user text: they go into the page as textContent only, never as markup.
// Both cards are kept current from their own fragment (the card's data-url, the server's template,
// escaped there: /runs/<id>/evaluations/card/, /models/<id>/evaluations/card/) by the shared loop of
// fragment_poller.js: every 5 s while an evaluation is queued or running (a row's data-active), on the
// run page also every 10 s while the run is live (the controls card's data-live: it may save a
// checkpoint) and on a status event (run_live.js's "rlstudio:status"), and at once after an evaluation
// is asked for or stopped; polling stops when none of these holds. The list, the checkpoints offered
// (a run's; ticks kept) and, when a newer evaluation finished, its curve, figures and matrix are
// taken from it.
(function () {
  "use strict";
  function fmt(v) { return (v === null || v === undefined) ? "–" : Number(v).toFixed(3); }
  function keyOf(f) { return (f.key === undefined || f.key === null) ? String(f.step) : String(f.key); }
  let labels = {};
  function label(key) {
    if (Object.prototype.hasOwnProperty.call(labels, key)) return String(labels[key]);
    return key === "base" ? "base model" : "step " + key;
  }
  function csrf() {
    const input = document.querySelector("#evaluations-card input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function cell(row, text, tag) {
    const td = document.createElement(tag || "td");
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function drawCurve(latest) {
    const div = document.getElementById("eval-curve");
    if (!div || typeof Plotly === "undefined") return;
    const x = latest.figures.map((f) => f.step);
    const text = latest.figures.map((f) => label(keyOf(f)));
    const traces = ["mean_at_k", "pass_at_k", "maj_at_k"].map((key) => ({
      x: x, y: latest.figures.map((f) => f[key]), mode: "lines+markers", text: text,
      name: key.replace("_at_k", "@" + latest.k),
    }));
    // the legend under the plot: at its default place it sat under Plotly's toolbar
    Plotly.newPlot(div, traces, { height: 300, margin: { t: 20, r: 10, b: 70, l: 50 },
      legend: { orientation: "h", x: 0, y: -0.3 },
      template: window.rlstudioChartTemplate ? window.rlstudioChartTemplate() : undefined,  // the colour scheme's (chart_theme.js)
      xaxis: { title: { text: "step" } }, yaxis: { range: [0, 1.05] } }, { displaylogo: false, responsive: true });
  }

  function fillFigures(latest) {
    const body = document.querySelector("#eval-figures tbody");
    if (!body) return;
    latest.figures.forEach((f) => {
      const tr = document.createElement("tr");
      [label(keyOf(f)), fmt(f.mean_at_k), fmt(f.pass_at_k), fmt(f.maj_at_k), f.samples, fmt(f.samples_per_s)]
        .forEach((v) => cell(tr, String(v)));
      body.appendChild(tr);
    });
  }

  function showSamples(box, url) {
    box.replaceChildren();
    const wait = document.createElement("p");
    wait.className = "muted";
    wait.textContent = "loading the transcripts…";
    box.appendChild(wait);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => r.ok ? r.json() : Promise.reject(new Error(r.statusText)))
      .then((samples) => {
        box.replaceChildren();
        if (!samples.length) {
          wait.textContent = "no transcripts stored for this cell";
          box.appendChild(wait);
        }
        samples.forEach((s) => {
          const div = document.createElement("div");
          div.className = "eval-sample";
          const head = document.createElement("p");
          head.className = s.correct ? "ok" : "muted";
          head.textContent = "sample " + (s.sample + 1) + ": score " + fmt(s.score) + (s.correct ? " (correct)" : "") +
            ", answer " + JSON.stringify(s.answer) + ", ended by " + s.finish_reason;
          div.appendChild(head);
          s.turns.forEach((t) => {
            const pre = document.createElement("pre");
            pre.className = "sample-text turn-" + String(t.role).replace(/[^a-z]/g, "");
            pre.textContent = t.role + ": " + t.content;
            div.appendChild(pre);
            (Array.isArray(t.tool_calls) ? t.tool_calls : []).filter((c) => c && typeof c === "object").forEach((c) => {
              const call = document.createElement("div");
              call.className = "toolcall";
              const head = document.createElement("p");
              head.append("tool call ");
              const name = document.createElement("code");
              name.textContent = String(c.name);
              head.appendChild(name);
              const args = document.createElement("pre");
              let text = String(c.arguments);
              try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* shown as it came */ }
              args.textContent = text;
              call.append(head, args);
              div.appendChild(call);
            });
          });
          box.appendChild(div);
        });
      })
      .catch((err) => { wait.textContent = "could not load the transcripts: " + err.message; });
  }

  function fillMatrix(data, change) {
    const latest = data.latest;
    const table = document.getElementById("eval-matrix");
    if (!table) return;
    const head = table.querySelector("thead");
    const body = table.querySelector("tbody");
    head.replaceChildren();
    body.replaceChildren();
    const hr = document.createElement("tr");
    cell(hr, "prompt", "th");
    cell(hr, "answer", "th");
    latest.columns.forEach((key) => cell(hr, label(key) + " (pass@k · mean@k)", "th"));
    const compared = latest.columns.length > 1;
    if (compared) cell(hr, "change", "th");
    head.appendChild(hr);
    latest.prompts.filter((p) => !change || p.change === change).forEach((p) => {
      const tr = document.createElement("tr");
      cell(tr, p.prompt);
      cell(tr, p.ground_truth);
      latest.columns.forEach((key) => {
        const c = p.cells[key];
        const td = document.createElement("td");
        if (c) {
          const details = document.createElement("details");
          details.className = "eval-cell";
          const summary = document.createElement("summary");
          summary.textContent = fmt(c.pass_at_k) + " · " + fmt(c.mean_at_k) + " (" + c.correct + "/" + c.n + ")";
          const box = document.createElement("div");
          details.append(summary, box);
          const url = data.api + latest.id + "/samples/?prompt=" + encodeURIComponent(p.position) +
            "&column=" + encodeURIComponent(key);
          details.addEventListener("toggle", () => { if (details.open && !box.childElementCount) showSamples(box, url); });
          td.appendChild(details);
        }
        tr.appendChild(td);
      });
      if (compared) cell(tr, p.change);
      body.appendChild(tr);
    });
  }

  // The evaluation the form last started: its line beside the button follows its row in the list.
  let pending = null;
  function followPending() {
    const msg = document.getElementById("eval-form-msg");
    if (pending === null || !msg) return;
    const row = document.querySelector("#eval-list tr[data-id='" + pending + "'], #eval-list tr[data-evaluation-id='" +
      pending + "']");
    if (!row || row.getAttribute("data-active") === "1") return;
    msg.textContent = "evaluation #" + pending + " has ended: see the list below";
    pending = null;
  }

  function wireForm(data) {
    const form = document.getElementById("eval-form");
    if (!form) return;
    const msg = document.getElementById("eval-form-msg");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      // An empty box is left out of the request (the server's default applies, or it names the missing
      // field): Number("") is 0, which would evaluate greedily (temperature 0) without saying so.
      const num = (name) => {
        const text = form.elements[name].value.trim();
        return text === "" ? undefined : Number(text);
      };
      const body = {
        gpus: num("gpus"), dataset: num("dataset"), k: num("k"), max_prompts: num("max_prompts"),
        sampling: { temperature: num("temperature"), max_new_tokens: num("max_new_tokens") },
      };
      if (form.elements.reward) body.reward = form.elements.reward.value;  // a model's form: the reward's name
      if (form.elements.include_base) {  // a run's form: the chosen checkpoints and the base model
        body.checkpoints = Array.from(form.querySelectorAll("input[name=checkpoints]:checked")).map((i) => Number(i.value));
        body.include_base = form.elements.include_base.checked;
      }
      msg.textContent = "sending…";
      const resp = await fetch(data.api, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", Accept: "application/json",
                   "X-CSRFToken": form.querySelector("input[name=csrfmiddlewaretoken]").value },
      });
      const answer = await resp.json().catch(() => ({}));
      if (resp.ok) {
        msg.textContent = "evaluation #" + answer.id + " " + answer.status +
          (answer.queue_reason ? " (" + answer.queue_reason + ")" : "") +
          (live() ? "; the list below follows it" : "; reload the page to see it finish");
        pending = String(answer.id);
        refresh();
      } else {
        const err = answer.error || {};
        msg.textContent = (err.field ? err.field + ": " : "") + (err.message || resp.statusText);
      }
    });
  }

  // Delegated: the list is replaced while the page is open, its buttons with it.
  function wireStops(data) {
    document.addEventListener("click", async (ev) => {
      const btn = ev.target.closest && ev.target.closest("#eval-list button.eval-stop, #eval-list button.eval-delete");
      if (!btn || btn.disabled) return;
      if (btn.classList.contains("eval-stop")) {
        btn.disabled = true;
        const resp = await fetch(data.api + btn.dataset.id + "/stop/", {
          method: "POST", credentials: "same-origin",
          headers: { Accept: "application/json", "X-CSRFToken": csrf() },
        });
        const answer = await resp.json().catch(() => ({}));
        btn.textContent = resp.ok ? (answer.status === "stopped" ? "stopped" : "stopping…")
          : ((answer.error || {}).message || resp.statusText);
        if (resp.ok) refresh();
        return;
      }
      if (!window.confirm("Delete evaluation #" + btn.dataset.id + " with its transcripts?")) return;
      btn.disabled = true;
      const resp = await fetch(data.api + btn.dataset.id + "/", {
        method: "DELETE", credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrf() },
      });
      if (resp.ok) {
        // The card's figures and matrix are the deleted one's: the page shows the next newest instead.
        if (data.latest && String(data.latest.id) === btn.dataset.id) { window.location.reload(); return; }
        btn.closest("tr").remove();
        return;
      }
      const answer = await resp.json().catch(() => ({}));
      btn.textContent = (answer.error || {}).message || resp.statusText;
    });
  }

  function showLatest(data) {
    if (!data.latest) return;
    drawCurve(data.latest);
    fillFigures(data.latest);
    fillMatrix(data, "");
    const pick = document.getElementById("eval-change");
    if (pick) pick.addEventListener("change", () => fillMatrix(data, pick.value));
  }

  // The live refresh: the card's data-url (the run page's and a model page's card), fetched by the
  // shared loop (fragment_poller.js, loaded before this file).
  let poller = null;
  function card() { return document.getElementById("evaluations-card"); }
  function live() { const c = card(); return !!(c && c.getAttribute("data-url")); }
  function every() {
    if (document.querySelector("#eval-list tr[data-active='1']")) return 5000;
    const controls = document.getElementById("run-controls");  // the run page's only
    return controls && controls.getAttribute("data-live") === "1" ? 10000 : 0;
  }
  function swapSteps(fresh) {
    const now = document.getElementById("eval-steps");
    if (!now || !fresh) return;
    const values = (el) => Array.from(el.querySelectorAll("input[name=checkpoints]")).map((i) => i.value).join(",");
    if (values(now) === values(fresh)) return;
    now.querySelectorAll("input:checked").forEach((box) => {  // the user's ticks stay
      const same = fresh.querySelector("input[name='" + box.name + "'][value='" + box.value + "']");
      if (same) same.checked = true;
    });
    now.replaceWith(fresh);
  }
  function apply(data, holder) {
    const list = holder.querySelector("#eval-list-box"), nowList = document.getElementById("eval-list-box");
    if (list && nowList && list.textContent.trim() !== nowList.textContent.trim()) nowList.replaceWith(list);
    followPending();
    swapSteps(holder.querySelector("#eval-steps"));
    const latest = holder.querySelector("#eval-latest"), nowLatest = document.getElementById("eval-latest");
    const freshData = holder.querySelector("#eval-data");
    if (latest && nowLatest && freshData && latest.getAttribute("data-id") !== nowLatest.getAttribute("data-id")) {
      nowLatest.replaceWith(latest);
      data.latest = JSON.parse(freshData.textContent).latest;
      showLatest(data);
    }
  }
  function refresh() { if (poller) poller.refresh(); }

  function start() {
    const el = document.getElementById("eval-data");
    if (!el) return;
    const data = JSON.parse(el.textContent);
    labels = data.labels || {};
    wireForm(data);
    wireStops(data);
    showLatest(data);
    poller = window.rlstudioFragmentPoller({
      url: () => { const c = card(); return c ? c.getAttribute("data-url") : null; },
      every: every, apply: (holder) => apply(data, holder),
    });
    document.addEventListener("rlstudio:status", refresh);
    poller.schedule();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
