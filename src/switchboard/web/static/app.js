// Switchboard web UI behaviour. Everything works without it; this only adds polish:
// times in the viewer's zone, confirmations for destructive actions, copy buttons, and the
// consent screen's new/existing endpoint toggle.
"use strict";

(function () {
  function localTimes(root) {
    var fmt;
    try {
      fmt = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
    } catch (e) {
      return; // keep the UTC text
    }
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when.getTime())) return;
      el.title = el.getAttribute("datetime") + " (UTC)";
      el.textContent = fmt.format(when);
    });
    var zone = document.getElementById("viewer-zone");
    if (zone) {
      try {
        zone.textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || "your time zone";
      } catch (e) { /* keep the default text */ }
    }
  }

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
      });
    });
  }

  function copyButtons() {
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var source = document.getElementById(button.getAttribute("data-copy"));
        if (!source || !navigator.clipboard) return;
        navigator.clipboard.writeText(source.textContent.trim()).then(function () {
          var label = button.textContent;
          button.textContent = "Copied";
          setTimeout(function () { button.textContent = label; }, 1500);
        });
      });
    });
  }

  function consentToggle() {
    var radios = document.querySelectorAll("input[name=target]");
    if (!radios.length) return;
    function sync() {
      radios.forEach(function (radio) {
        var inner = document.getElementById("target-" + radio.value);
        if (inner) inner.hidden = !radio.checked;
      });
    }
    radios.forEach(function (radio) { radio.addEventListener("change", sync); });
    sync();
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    confirmations();
    copyButtons();
    consentToggle();
  });
})();
