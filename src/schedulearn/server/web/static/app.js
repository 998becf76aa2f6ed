/* Schedulearn dashboard: small behaviours on top of server-rendered pages.
 * - forms with data-confirm ask before they act (cancel a job, switch the
 *   policy); "{spec}" in the question is the form's spec field as typed;
 * - the job page's log follows the server-sent event stream of its output. */
(function () {
  "use strict";

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (!question) return;
    var spec = form.querySelector("[name=spec]");
    if (spec) question = question.replace("{spec}", spec.value.trim() || "(nothing)");
    if (!window.confirm(question)) ev.preventDefault();
  });

  var MAX_LINES = 5000; // older lines leave the page (the full log stays on the server)

  function followLog(pre) {
    var status = document.getElementById("log-status");
    var count = document.getElementById("log-count");
    var follow = document.getElementById("log-follow");
    var placeholder = pre.querySelector(".placeholder");
    // A job that had already ended when the page was drawn is never "live":
    // its stream only replays the stored lines, then says "ended".
    var finished = pre.getAttribute("data-final") === "true";
    var shown = 0;
    var trimmed = false;
    var buffer = [];
    var flushing = false;

    function setStatus(text, live) {
      status.textContent = text;
      status.classList.toggle("on", !!live);
    }

    function line(text, cls) {
      var span = document.createElement("span");
      span.className = "ln" + (cls ? " " + cls : "");
      span.textContent = text;
      return span;
    }

    function flush() {
      flushing = false;
      if (!buffer.length) return;
      if (placeholder) { placeholder.remove(); placeholder = null; }
      var frag = document.createDocumentFragment();
      buffer.forEach(function (el) { frag.appendChild(el); });
      buffer = [];
      pre.appendChild(frag);
      while (pre.childElementCount > MAX_LINES) {
        pre.removeChild(pre.firstElementChild);
        trimmed = true;
      }
      count.textContent = shown + (shown === 1 ? " line" : " lines") + (trimmed ? " (earliest hidden)" : "");
      if (follow.checked) pre.scrollTop = pre.scrollHeight;
    }

    function queue(el) {
      buffer.push(el);
      if (!flushing) { flushing = true; setTimeout(flush, 30); }
    }

    // Scrolling up to read stops following; scrolling back to the end resumes it.
    pre.addEventListener("scroll", function () {
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      if (!atEnd && follow.checked && !flushing) follow.checked = false;
      else if (atEnd && !follow.checked) follow.checked = true;
    });

    var source = new EventSource(pre.getAttribute("data-src"));
    source.addEventListener("open", function () {
      setStatus(finished ? "loading…" : "live", !finished);
    });
    source.addEventListener("line", function (ev) {
      var data = JSON.parse(ev.data);
      shown += 1;
      queue(line(data.text, data.stream === "stderr" ? "stderr" : ""));
    });
    source.addEventListener("state", function () {
      document.body.dispatchEvent(new CustomEvent("job-changed"));
    });
    source.addEventListener("end", function (ev) {
      source.close();
      var data = JSON.parse(ev.data);
      var tail = "— job " + data.state + (data.exit_code === null ? "" : ", exit code " + data.exit_code) + " —";
      // Lines wait in `buffer` up to 30 ms before they are drawn: only a job
      // that printed nothing at all (no stdout, no stderr) has "No output.".
      if (placeholder && shown === 0) { placeholder.textContent = "No output."; placeholder = null; }
      queue(line(tail, "sys"));
      finished = true;
      setStatus("ended", false);
      document.body.dispatchEvent(new CustomEvent("job-changed"));
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CONNECTING) setStatus("reconnecting…", false);
      else if (source.readyState === EventSource.CLOSED) setStatus("disconnected; reload to retry", false);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("log");
    if (pre && window.EventSource) followLog(pre);
  });
})();
