// dagagent viewer: task panels, highlighting, live refresh, and (in a report) the task table's
// filter and pager. Served by the app and inlined into reports; it never builds HTML from
// run data: panels come as HTML the server escaped (or from a report's inert templates), and
// everything else is set as text or attributes.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var panel = document.getElementById("panel");
  var report = document.body.getAttribute("data-mode") === "report";
  var selected = null;

  function each(selector, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
  }
  function taskOf(el) {
    if (el && el.closest && el.closest("[data-no-panel]")) { return null; }
    while (el && el !== document) {
      if (el.getAttribute && el.hasAttribute("data-task") && !el.classList.contains("panel-inner")) {
        return el.getAttribute("data-task");
      }
      el = el.parentNode;
    }
    return null;
  }
  function mark(cls, id) {
    each("." + cls, function (el) { el.classList.remove(cls); });
    if (id === null) { return; }
    each("[data-task]", function (el) {
      if (el.getAttribute("data-task") === id && !el.classList.contains("panel-src")) { el.classList.add(cls); }
    });
  }
  function panelSource(id) {
    var found = null;
    each("template.panel-src", function (t) { if (t.getAttribute("data-task") === id) { found = t; } });
    return found;
  }
  function show(id) {
    if (!panel) { return; }
    var body = panel.querySelector(".panel-body");
    selected = id;
    mark("selected", id);
    if (report) {
      var src = panelSource(id);
      if (!src) {
        var run = live ? live.getAttribute("data-run") : "RUN";
        note(body, "Task \u201c" + id + "\u201d is not in this report. ",
          "dagagent show " + run + " --task " + id);
        return;
      }
      body.replaceChildren(src.content.cloneNode(true));
      panel.hidden = false;
      return;
    }
    var base = live && live.getAttribute("data-panel-url");
    if (!base) { return; }
    fetch(base + encodeURIComponent(id), { headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        if (selected !== id) { return; }
        // Server-rendered with every value escaped; parsed as inert HTML, never as script.
        var doc = new DOMParser().parseFromString(html, "text/html");
        body.replaceChildren.apply(body, Array.prototype.slice.call(doc.body.childNodes));
        panel.hidden = false;
      })
      .catch(function (status) {
        if (selected !== id) { return; }
        note(body, status === 404 ? "This run has no task \u201c" + id + "\u201d." : "The task could not be loaded (" + status + ").", "");
      });
  }
  // A message in the panel, as text (an id typed in the search box is never HTML).
  function note(body, text, command) {
    var p = document.createElement("p");
    p.className = "panel-note";
    p.textContent = text;
    if (command) {
      var code = document.createElement("code");
      code.textContent = command;
      p.append(code, document.createTextNode(" shows it."));
    }
    body.replaceChildren(p);
    panel.hidden = false;
  }
  function hide() {
    if (panel) { panel.hidden = true; }
    selected = null;
    mark("selected", null);
    if (location.hash.indexOf("#task=") === 0) { history.replaceState(null, "", location.pathname + location.search); }
  }
  function open(id) {
    history.replaceState(null, "", "#task=" + encodeURIComponent(id));
    show(id);
  }

  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (t.closest && t.closest(".panel .close")) { hide(); return; }
    if (t.closest && t.closest("a")) { return; }
    var id = taskOf(t);
    if (id !== null) { open(id); }
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { hide(); return; }
    if (ev.key !== "Enter") { return; }
    var find = ev.target.closest && ev.target.closest("input.find-task");
    if (find) {
      var wanted = find.value.trim();
      if (wanted) { ev.preventDefault(); open(wanted); }
      return;
    }
    var id = taskOf(ev.target);
    if (id !== null) { open(id); }
  });
  var hovered = null;
  document.addEventListener("mouseover", function (ev) {
    var id = taskOf(ev.target);
    if (id !== hovered) { hovered = id; mark("hl", id); }
  });

  // Live: while the run is running, fetch the part of the page that changes.
  function poll() {
    var url = live && live.getAttribute("data-live-url");
    if (!url || live.getAttribute("data-status") !== "running") { return; }
    fetch(url, { headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text().then(function (h) { return [h, r.headers.get("X-Run-Status")]; }) : Promise.reject(r.status); })
      .then(function (got) {
        var doc = new DOMParser().parseFromString(got[0], "text/html");
        live.replaceChildren.apply(live, Array.prototype.slice.call(doc.body.childNodes));
        live.setAttribute("data-status", got[1] || "running");
        if (selected !== null) { mark("selected", selected); if (got[1] !== "running") { show(selected); } }
        setTimeout(poll, 1000);
      })
      .catch(function () { setTimeout(poll, 3000); });
  }
  if (live && live.getAttribute("data-status") === "running") { setTimeout(poll, 1000); }

  // Report: filter and page the task table here (the app pages it on the server).
  var table = document.querySelector("table.tasks[data-page-size]");
  if (table) {
    var size = parseInt(table.getAttribute("data-page-size"), 10) || 100;
    var rows = Array.prototype.slice.call(table.querySelectorAll("tr.task-row"));
    var pager = document.querySelector(".pager[data-js-pager]");
    var filter = "";
    var pageNo = 0;
    var prev = document.createElement("button");
    var info = document.createElement("span");
    var next = document.createElement("button");
    prev.type = next.type = "button";
    prev.textContent = "\u2190 previous";
    next.textContent = "next \u2192";
    pager.append(prev, info, next);
    var render = function () {
      var match = rows.filter(function (r) { return !filter || r.getAttribute("data-status") === filter; });
      var pages = Math.max(1, Math.ceil(match.length / size));
      pageNo = Math.min(Math.max(0, pageNo), pages - 1);
      rows.forEach(function (r) { r.hidden = true; });
      match.slice(pageNo * size, (pageNo + 1) * size).forEach(function (r) { r.hidden = false; });
      info.textContent = match.length + " tasks" + (pages > 1 ? " \u00b7 page " + (pageNo + 1) + " of " + pages : "");
      prev.hidden = pageNo === 0;
      next.hidden = pageNo >= pages - 1;
    };
    prev.addEventListener("click", function () { pageNo -= 1; render(); });
    next.addEventListener("click", function () { pageNo += 1; render(); });
    each("#tasks .filters [data-filter]", function (b) {
      b.addEventListener("click", function () {
        filter = b.getAttribute("data-filter");
        pageNo = 0;
        each("#tasks .filters [data-filter]", function (o) { o.classList.toggle("on", o === b); });
        render();
      });
    });
    render();
  }

  if (location.hash.indexOf("#task=") === 0) {
    try { show(decodeURIComponent(location.hash.slice(6))); } catch (e) { /* a bad hash */ }
  }
})();
