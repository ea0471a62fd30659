// The new-run form's preview (RUNS): as the user edits, the form's fields are posted to
// /runs/new/preview/ (data-preview-url) and the answer is shown beside the form: every error at
// once (also under its field), the trainer's warnings (the run still launches: e.g. GRPO with rollout.n=1
// has no baseline), what was adapted to the GPUs or CPU, the memory estimate per device
// and the effective config as YAML with the keys that differ from the preset highlighted.
// Everything from the server is put in with textContent (never as HTML): config values are user text.
(function () {
  "use strict";
  var form = document.getElementById("run-form");
  var panel = document.getElementById("run-preview");
  if (!form || !panel || !window.fetch || !window.FormData) { return; }
  var url = form.getAttribute("data-preview-url");
  var timer = null, inflight = null, seq = 0;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function show(node, on) { if (on) { node.removeAttribute("hidden"); } else { node.setAttribute("hidden", ""); } }
  function value(v) { return v === null || v === undefined ? "null" : (typeof v === "object" ? JSON.stringify(v) : String(v)); }
  function gib(x) { return (x < 0.01 && x > 0 ? "< 0.01" : x.toFixed(2)) + " GiB"; }

  function renderErrors(errors) {
    var list = document.getElementById("preview-errors");
    clear(list);
    document.querySelectorAll("[data-live-for]").forEach(function (span) { clear(span); });
    errors.forEach(function (e) {
      var text = e.field + ": " + e.message;
      list.appendChild(el("li", "", text));
      var span = e.form_field && document.querySelector("[data-live-for='" + e.form_field + "']");
      // the error the server rendered after a refused Launch says it already (until the field is edited)
      var said = span && Array.prototype.some.call(span.parentNode.querySelectorAll(".field-error:not(.live)"),
        function (s) { return s.textContent.trim() === text; });
      if (span && !said) { span.appendChild(el("span", "live-item", text)); }
    });
    show(list, errors.length > 0);
  }

  function renderWarnings(warnings) {
    var list = document.getElementById("preview-warnings");
    clear(list);
    warnings.forEach(function (w) { list.appendChild(el("li", "", "\u26a0 " + w.field + ": " + w.message)); });
    show(list, warnings.length > 0);
  }

  function renderAdapted(body) {
    var node = document.getElementById("preview-adapted");
    clear(node);
    if (!body.adapted || !body.adapted.length) { show(node, false); return; }
    node.appendChild(el("strong", "", "adapted for " + body.resources + ": "));
    body.adapted.forEach(function (a, i) {
      var item = el("span", "adapted-item", a.key + " " + value(a.before) + " \u2192 " + value(a.after));
      item.title = a.reason;
      node.appendChild(item);
      if (i < body.adapted.length - 1) { node.appendChild(document.createTextNode(", ")); }
    });
    show(node, true);
  }

  function renderMemory(mem) {
    var box = document.getElementById("preview-memory");
    clear(box);
    if (!mem) { box.appendChild(el("p", "muted small", "Pick a model to see it.")); return; }
    if (mem.error) { box.appendChild(el("p", "muted small", mem.error)); return; }
    var table = el("table", "memory-table");
    table.id = "memory-table";
    var head = el("tr");
    ["", "per device", ""].forEach(function (h) { head.appendChild(el("th", "", h)); });
    table.appendChild(head);
    mem.lines.forEach(function (line) {
      var tr = el("tr");
      tr.appendChild(el("td", "", line.name));
      // From the exact bytes where given: the rounded gib of a line under 0.5 MiB is 0, which read "0.00 GiB"
      // for a size that is not zero (the run page's estimate says "< 0.01 GiB" for it).
      tr.appendChild(el("td", "num", gib(typeof line.bytes === "number" ? line.bytes / 1073741824 : line.gib)));
      tr.appendChild(el("td", "muted small", line.note));
      table.appendChild(tr);
    });
    var peak = el("tr", "peak");
    peak.appendChild(el("td", "", "peak (" + mem.peak_phase + " phase)"));
    peak.appendChild(el("td", "num", gib(mem.peak_gib)));
    peak.appendChild(el("td", "muted small", "of " + gib(mem.capacity_gib) + (mem.device === "cpu" ? " (this machine's memory)" : " per GPU") +
                         ", " + mem.workers + " worker" + (mem.workers > 1 ? "s" : "") + ", rollout engine " + mem.engine));
    table.appendChild(peak);
    var full = mem.full_fine_tuning;  // with LoRA: the same config with LoRA off
    if (full) {
      var row = el("tr");
      row.id = "lora-saving";
      row.appendChild(el("td", "", "full fine-tuning (LoRA off)"));
      row.appendChild(el("td", "num", gib(full.peak_gib)));
      row.appendChild(el("td", "muted small", "peak (" + full.peak_phase + " phase): LoRA rank " + full.lora_rank +
                         (full.saving_gib < 0 ? " needs " + gib(-full.saving_gib) + " more" : " saves " + gib(full.saving_gib)) +
                         " per device"));
      table.appendChild(row);
    }
    box.appendChild(table);
    var disk = mem.checkpoint;  // one checkpoint's disk (not per device), against the operator's budget per run
    if (disk) {
      var line = el("p", disk.fits ? "muted small" : "memory-warning",
                    (disk.fits ? "" : "\u26a0 ") + "One checkpoint: about " + gib(disk.gib) + " on disk (" +
                    (disk.lora ? "the LoRA adapter and its AdamW moments" : "float32 weights and AdamW's two moments") +
                    (disk.critic_gib > 0 ? ", with the critic's " + gib(disk.critic_gib) : "") + ")" +
                    (disk.budget_gib === null ? "; no disk budget per run" : ", of this deployment's " + gib(disk.budget_gib) +
                     " per run" + (disk.fits ? "" : ": over it, the run is refused")) +
                    (disk.export_gib > 0 ? "; the final Hugging Face export adds " + gib(disk.export_gib) : "") + ".");
      line.id = "checkpoint-size";
      box.appendChild(line);
    }
    if (mem.warning) {
      var warn = el("p", "memory-warning", "\u26a0 " + mem.warning);
      warn.id = "memory-warning";
      box.appendChild(warn);
    }
  }

  function renderYaml(body) {
    var pre = document.getElementById("preview-yaml");
    clear(pre);
    document.getElementById("preview-reference").textContent = body.reference || "the preset";
    (body.lines || []).forEach(function (line) {
      var span = el("span", line.mark ? "line mark-" + line.mark : "line", line.text);
      span.setAttribute("data-key", line.key);
      if (line.mark) { span.title = line.mark + "; was " + value(line.before); }
      pre.appendChild(span);
      pre.appendChild(document.createTextNode("\n"));
    });
  }

  function refresh() {
    var mine = ++seq;
    var state = document.getElementById("preview-state");
    state.textContent = "updating\u2026";
    if (inflight && inflight.abort) { inflight.abort(); }
    inflight = window.AbortController ? new AbortController() : null;
    fetch(url, { method: "POST", body: new FormData(form), credentials: "same-origin",
                 headers: { "Accept": "application/json" }, signal: inflight ? inflight.signal : undefined })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (body) {
        if (mine !== seq) { return; }
        renderErrors(body.errors || []);
        renderWarnings(body.warnings || []);
        renderAdapted(body);
        renderMemory(body.memory);
        renderYaml(body);
        state.textContent = (body.errors || []).length ? (body.errors.length + " error" + (body.errors.length > 1 ? "s" : "")) : "";
        panel.setAttribute("data-ready", String(mine));
      })
      .catch(function (err) {
        if (mine === seq && err.name !== "AbortError") { state.textContent = "preview unavailable (" + err.message + ")"; }
      });
  }
  function later() { clearTimeout(timer); timer = setTimeout(refresh, 350); }
  // The errors the server rendered after a refused Launch are about the values sent then: once the
  // user edits a field, its own are stale and go (the live ones above keep saying what is wrong now).
  function dropServerErrors(ev) {
    var holder = ev.target && ev.target.closest && ev.target.closest("p[data-field]");
    if (!holder) { return; }
    holder.querySelectorAll(".field-error:not(.live)").forEach(function (span) { span.remove(); });
    if (ev.target.getAttribute("aria-invalid") === "true") { ev.target.removeAttribute("aria-invalid"); }
  }
  form.addEventListener("input", dropServerErrors);
  form.addEventListener("change", dropServerErrors);
  form.addEventListener("input", later);
  form.addEventListener("change", later);
  refresh();
}());
