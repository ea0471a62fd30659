// The run page's "Evaluations" card: starts an evaluation (POST to the API with the page's CSRF
// token), draws the newest finished one as a curve (mean@k, pass@k, maj@k by step) and a table, and
// fills the prompts x checkpoints matrix with its better / worse filter. Prompts and responses are
// model and user text: they go into the page as textContent only, never as markup.
(function () {
  "use strict";
  function fmt(v) { return (v === null || v === undefined) ? "–" : Number(v).toFixed(3); }

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
    const traces = ["mean_at_k", "pass_at_k", "maj_at_k"].map((key) => ({
      x: x, y: latest.figures.map((f) => f[key]), mode: "lines+markers",
      name: key.replace("_at_k", "@" + latest.k),
    }));
    Plotly.newPlot(div, traces, { height: 280, margin: { t: 20, r: 10, b: 40, l: 50 },
      xaxis: { title: { text: "step" } }, yaxis: { range: [0, 1.05] } }, { displaylogo: false, responsive: true });
  }

  function fillFigures(latest) {
    const body = document.querySelector("#eval-figures tbody");
    if (!body) return;
    latest.figures.forEach((f) => {
      const tr = document.createElement("tr");
      [f.step, fmt(f.mean_at_k), fmt(f.pass_at_k), fmt(f.maj_at_k), f.samples, fmt(f.samples_per_s)]
        .forEach((v) => cell(tr, String(v)));
      body.appendChild(tr);
    });
  }

  function fillMatrix(latest, change) {
    const table = document.getElementById("eval-matrix");
    if (!table) return;
    const head = table.querySelector("thead");
    const body = table.querySelector("tbody");
    head.replaceChildren();
    body.replaceChildren();
    const hr = document.createElement("tr");
    cell(hr, "prompt", "th");
    cell(hr, "answer", "th");
    latest.checkpoints.forEach((s) => cell(hr, "step " + s + " (pass@k · mean@k)", "th"));
    cell(hr, "change", "th");
    head.appendChild(hr);
    latest.prompts.filter((p) => !change || p.change === change).forEach((p) => {
      const tr = document.createElement("tr");
      cell(tr, p.prompt);
      cell(tr, p.ground_truth);
      latest.checkpoints.forEach((s) => {
        const c = p.cells[String(s)];
        const td = document.createElement("td");
        if (c) {
          const details = document.createElement("details");
          const summary = document.createElement("summary");
          summary.textContent = fmt(c.pass_at_k) + " · " + fmt(c.mean_at_k) + " (" + c.correct + "/" + c.n + ")";
          const pre = document.createElement("pre");
          pre.className = "sample-text";
          pre.textContent = c.sample;
          details.append(summary, pre);
          td.appendChild(details);
        }
        tr.appendChild(td);
      });
      cell(tr, p.change);
      body.appendChild(tr);
    });
  }

  function wireForm(data) {
    const form = document.getElementById("eval-form");
    if (!form) return;
    const msg = document.getElementById("eval-form-msg");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const num = (name) => Number(form.elements[name].value);
      const body = {
        checkpoints: Array.from(form.querySelectorAll("input[name=checkpoints]:checked")).map((i) => Number(i.value)),
        dataset: num("dataset"), k: num("k"), max_prompts: num("max_prompts"),
        sampling: { temperature: num("temperature"), max_new_tokens: num("max_new_tokens") },
      };
      msg.textContent = "sending…";
      const resp = await fetch(data.api, {
        method: "POST", credentials: "same-origin", body: JSON.stringify(body),
        headers: { "Content-Type": "application/json", Accept: "application/json",
                   "X-CSRFToken": form.querySelector("input[name=csrfmiddlewaretoken]").value },
      });
      const answer = await resp.json().catch(() => ({}));
      if (resp.ok) {
        msg.textContent = "evaluation #" + answer.id + " queued; reload the page to see it finish";
      } else {
        const err = answer.error || {};
        msg.textContent = (err.field ? err.field + ": " : "") + (err.message || resp.statusText);
      }
    });
  }

  function start() {
    const el = document.getElementById("eval-data");
    if (!el) return;
    const data = JSON.parse(el.textContent);
    wireForm(data);
    if (!data.latest) return;
    drawCurve(data.latest);
    fillFigures(data.latest);
    fillMatrix(data.latest, "");
    const pick = document.getElementById("eval-change");
    if (pick) pick.addEventListener("change", () => fillMatrix(data.latest, pick.value));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
