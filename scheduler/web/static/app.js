// duetime web console: local times, the overview's charts and refresh, the events' live
// tail, and "select all". Plain JavaScript, no network access beyond this console's own
// JSON endpoints; every value from the server is inserted as text (never as HTML).
(function () {
  "use strict";
  var ns = document.body.dataset.ns, page = document.body.dataset.page;
  var api = "/api/ns/" + encodeURIComponent(ns) + "/";

  function localTimes(root) {
    (root || document).querySelectorAll("time[data-ts]").forEach(function (el) {
      var d = new Date(parseFloat(el.dataset.ts) * 1000);
      var local = el.querySelector(".local");
      if (local) local.textContent = "(" + d.toLocaleString() + " local)";
    });
  }

  function utc(t) {
    return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  // Poll with back-off: `every` seconds while something changes, doubling up to `max`
  // while nothing does, and slower while the tab is hidden.
  function poll(url, every, max, onData) {
    var delay = every, last = null, timer = null;
    function tick() {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (data) {
          var text = JSON.stringify(data.events || data.minutes || data.queued);
          var changed = onData(data);
          delay = changed || text !== last ? every : Math.min(max, delay * 2);
          last = text;
        })
        .catch(function () { delay = Math.min(max, delay * 2); })
        .then(function () {
          timer = setTimeout(tick, (document.hidden ? 4 : 1) * delay * 1000);
        });
    }
    timer = setTimeout(tick, delay * 1000);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) { clearTimeout(timer); delay = every; tick(); }
    });
  }

  var charts = [];
  function drawCharts(minutes) {
    if (!window.uPlot) return;
    var xs = minutes.map(function (m) { return m.minute * 60; });
    var pick = function (k) { return minutes.map(function (m) { return m[k]; }); };
    var width = Math.max(300, document.querySelector("main").clientWidth - 40);
    var specs = [
      ["chart-throughput", "jobs per minute", [
        ["succeeded", "#067647"], ["failed", "#b42318"], ["retried", "#b54708"], ["claims", "#2454c5"]]],
      ["chart-lag", "dispatch lag, ms (worst replica)", [["lag_p50", "#2454c5"], ["lag_p99", "#b42318"]]],
    ];
    specs.forEach(function (spec, i) {
      var el = document.getElementById(spec[0]);
      if (!el) return;
      var data = [xs].concat(spec[2].map(function (s) { return pick(s[0]); }));
      if (charts[i]) { charts[i].setData(data); return; }
      charts[i] = new uPlot({
        title: spec[1], width: width, height: 200,
        series: [{}].concat(spec[2].map(function (s) {
          return { label: s[0], stroke: s[1], width: 1.5, spanGaps: false };
        })),
        axes: [{}, { size: 60 }],
      }, data, el);
    });
  }

  function setText(id, value) {
    var el = document.getElementById(id);
    if (el) el.textContent = String(value);
  }

  if (page === "overview") {
    var source = document.getElementById("minutes");
    if (source) drawCharts(JSON.parse(source.textContent));
    poll(api + "overview", 10, 60, function (d) {
      setText("queued", d.queued); setText("due-now", d.due_now);
      setText("running", d.running); setText("replicas-alive", d.replicas_alive);
      drawCharts(d.minutes);
      return false;
    });
  }

  if (page === "events") {
    var table = document.getElementById("events-table");
    var kinds = (table.dataset.kinds || "").split(",").filter(Boolean);
    var url = api + "events" + (kinds.length ? "?" + kinds.map(function (k) {
      return "kind=" + encodeURIComponent(k);
    }).join("&") : "");
    var body = table.querySelector("tbody");
    var seen = {};
    body.querySelectorAll("tr[data-id]").forEach(function (tr) { seen[tr.dataset.id] = 1; });
    var state = document.getElementById("tail-state");
    poll(url, 2, 30, function (d) {
      var fresh = d.events.filter(function (e) { return !seen[e.id]; });
      fresh.reverse().forEach(function (e) {
        seen[e.id] = 1;
        var tr = document.createElement("tr");
        tr.className = "new"; tr.dataset.id = e.id;
        [utc(e.at), e.kind, e.job_id || "", e.scheduled ? utc(e.scheduled) : "",
          e.attempt == null ? "" : e.attempt, e.detail].forEach(function (v, i) {
          var td = document.createElement("td");
          if (i === 2 && v) {
            var a = document.createElement("a");
            a.href = "/ns/" + encodeURIComponent(ns) + "/job/" + encodeURIComponent(v);
            a.textContent = v; td.appendChild(a);
          } else { td.textContent = String(v); }
          if (i === 4) td.className = "n";
          tr.appendChild(td);
        });
        body.insertBefore(tr, body.firstChild);
      });
      while (body.children.length > 500) body.removeChild(body.lastChild);
      if (state) state.textContent = "live · updated " + new Date().toLocaleTimeString();
      return fresh.length > 0;
    });
  }

  var sw = document.getElementById("ns-switch");
  if (sw) sw.addEventListener("change", function () {
    location.href = "/ns/" + encodeURIComponent(sw.value) + "/";
  });

  var all = document.getElementById("select-all");
  if (all) all.addEventListener("change", function () {
    document.querySelectorAll("#failed input[name=job]").forEach(function (c) { c.checked = all.checked; });
  });
  localTimes();
})();
