// Progressive enhancement only: every page works without this file.
// Buttons with data-copy="TEXT" copy TEXT to the clipboard.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  });
});
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-copy]").forEach(function (b) { b.hidden = !navigator.clipboard; });
});
// An element with data-poll="URL" data-state="S" reloads the page once URL answers {"state": other than S}
// (a lead whose delivery is queued, a conformance run in progress). Bounded: about four minutes.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-poll]").forEach(function (element) {
    var url = element.getAttribute("data-poll"), state = element.getAttribute("data-state"), tries = 0;
    var timer = setInterval(function () {
      if (++tries > 240) { clearInterval(timer); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (answer) { return answer.ok ? answer.json() : null; })
        .then(function (body) {
          if (body && body.state !== state) { clearInterval(timer); window.location.reload(); }
        })
        .catch(function () {});
    }, 1000);
  });
});
// Filter panels (details[data-open-wide]) start folded, so that on a phone the results come first;
// on a wider screen they are opened. Without this script they stay one click away.
document.addEventListener("DOMContentLoaded", function () {
  if (!window.matchMedia || !window.matchMedia("(min-width: 48rem)").matches) return;
  document.querySelectorAll("details[data-open-wide]").forEach(function (d) { d.open = true; });
});
