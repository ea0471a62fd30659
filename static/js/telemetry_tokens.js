// The transcript page: switch between the chat and the token view, and colour each token by its
// log-prob, reference log-prob, advantage, rollout log-prob or the rollout − actor log-prob gap
// (values come from data- attributes, text is never parsed). The server renders the tab and the
// colouring the address names (?view=tokens&colour=adv; an unknown value is the default); each switch
// is written back to the address (history.replaceState, the page's other parameters kept), the
// default as no parameter, so a copied link opens the page as it was seen; at load, an unknown value in
// the address is replaced by what is shown.
(function () {
  "use strict";
  function keep(key, value) {  // value null: the parameter goes
    const url = new URL(window.location.href);
    if (value === null) url.searchParams.delete(key); else url.searchParams.set(key, value);
    if (url.href !== window.location.href) history.replaceState(null, "", url);
  }
  for (const btn of document.querySelectorAll(".tabs button[data-tab]")) {
    btn.addEventListener("click", () => {
      for (const b of document.querySelectorAll(".tabs button")) {
        b.classList.toggle("active", b === btn);
        b.setAttribute("aria-selected", String(b === btn));
      }
      for (const t of ["chat", "tokens"]) document.getElementById("tab-" + t).hidden = t !== btn.dataset.tab;
      keep("view", btn.dataset.tab === "chat" ? null : btn.dataset.tab);
    });
  }
  const shownTab = document.querySelector(".tabs button.active");
  keep("view", shownTab && shownTab.dataset.tab !== "chat" ? shownTab.dataset.tab : null);
  const select = document.getElementById("token-colour");
  if (!select) return;
  keep("colour", select.value === select.dataset.default ? null : select.value);
  const tokens = [...document.querySelectorAll("#tokens .tok")];
  const legend = document.getElementById("token-legend");
  function colour() {
    const key = select.value;
    const picked = select.options[select.selectedIndex];
    if (legend && picked) legend.textContent = picked.dataset.legend || "";  // the colouring's key
    const values = tokens.map((t) => (t.dataset[key] === "" ? null : Number(t.dataset[key])));
    const finite = values.filter((v) => v !== null && isFinite(v));
    const lo = Math.min(...finite), hi = Math.max(...finite);
    const span = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    tokens.forEach((t, i) => {
      const v = values[i];
      if (v === null) { t.style.backgroundColor = ""; return; }
      if (key === "adv") {
        // advantage: green above zero, red below
        const a = Math.min(Math.abs(v) / span, 1) * 0.6;
        t.style.backgroundColor = v >= 0 ? `rgba(40,160,60,${a})` : `rgba(220,50,50,${a})`;
      } else if (key === "gap") {
        // training-inference mismatch: 0 transparent; the engine more sure than the actor blue, less purple
        const a = Math.min(Math.abs(v) / span, 1) * 0.7;
        t.style.backgroundColor = v >= 0 ? `rgba(40,90,220,${a})` : `rgba(170,40,170,${a})`;
      } else {
        // log-probs: the highest in view transparent, the lowest the deepest orange
        const a = hi === lo ? 0 : Math.min((hi - v) / (hi - lo), 1) * 0.7;
        t.style.backgroundColor = `rgba(230,120,30,${a})`;
      }
    });
  }
  select.addEventListener("change", () => {
    colour();
    keep("colour", select.value === select.dataset.default ? null : select.value);
  });
  colour();
})();
