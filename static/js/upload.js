/* Dataset upload page: drag and drop, a size check before sending, a progress bar (XHR upload
   events), then a redirect to the dataset page. Server text is shown with textContent only. */
(function () {
  "use strict";
  var form = document.getElementById("upload-form");
  if (!form) return;
  var input = document.getElementById("id_file");
  var zone = document.getElementById("dropzone");
  var nameOut = document.getElementById("file-name");
  var bar = document.getElementById("upload-progress");
  var status = document.getElementById("upload-status");
  var maxBytes = parseInt(form.dataset.maxBytes, 10);

  function show(text) { status.textContent = text; }
  function picked() { nameOut.textContent = input.files.length ? input.files[0].name : ""; }

  input.addEventListener("change", picked);
  ["dragenter", "dragover"].forEach(function (ev) {
    zone.addEventListener(ev, function (e) { e.preventDefault(); zone.classList.add("over"); });
  });
  ["dragleave", "drop"].forEach(function (ev) {
    zone.addEventListener(ev, function (e) { e.preventDefault(); zone.classList.remove("over"); });
  });
  zone.addEventListener("drop", function (e) {
    if (e.dataTransfer && e.dataTransfer.files.length) { input.files = e.dataTransfer.files; picked(); }
  });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (!input.files.length) { show("Choose a file first."); return; }
    var file = input.files[0];
    if (file.size > maxBytes) { show("The file is " + file.size + " bytes, over the limit of " + maxBytes + " bytes."); return; }
    var data = new FormData(form);
    if (!data.get("stats_model")) data.delete("stats_model");
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-CSRFToken", form.querySelector("input[name=csrfmiddlewaretoken]").value);
    bar.hidden = false; bar.value = 0;
    xhr.upload.addEventListener("progress", function (ev) {
      if (ev.lengthComputable) { bar.value = Math.round(100 * ev.loaded / ev.total); show("Uploading… " + bar.value + "%"); }
    });
    xhr.addEventListener("load", function () {
      var body = null;
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = null; }
      if (xhr.status === 200 || xhr.status === 201) {
        show(body.duplicate ? "This file was uploaded before; opening it." : "Uploaded; validating…");
        window.location.href = "/datasets/" + encodeURIComponent(body.id) + "/";
      } else {
        var err = body && body.error ? body.error : { message: "upload failed (HTTP " + xhr.status + ")" };
        show("Refused: " + err.message + (err.line ? " (line " + err.line + ")" : ""));
      }
    });
    xhr.addEventListener("error", function () { show("The upload failed: network error."); });
    xhr.send(data);
  });
})();
