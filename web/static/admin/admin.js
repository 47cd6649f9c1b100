// CloudBrowser admin dashboard: live cluster status from /api/v1/events
// (server-sent events, every 2 s), load history for the sparklines, and the
// drain / undrain / close / end-session actions. No build step, no library;
// data goes into the page as text (textContent, attributes), never as HTML.
(function () {
  "use strict";
  var history = {};
  var live = document.getElementById("live");

  function mib(b) { return (b / 1048576).toFixed(1) + " MiB"; }
  function span(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 120) { return s + " s"; }
    if (s < 7200) { return Math.round(s / 60) + " min"; }
    return Math.round(s / 3600) + " h";
  }
  function age(t) { return span(Date.now() - new Date(t).getTime()); }
  function until(t) { return span(new Date(t).getTime() - Date.now()); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function row(cells) {
    var tr = el("tr");
    cells.forEach(function (c) {
      if (c instanceof Node) { var td = el("td"); td.appendChild(c); tr.appendChild(td); }
      else if (typeof c === "object" && c !== null) { tr.appendChild(el("td", c.attrs || {}, c.text)); }
      else { tr.appendChild(el("td", {}, String(c))); }
    });
    return tr;
  }
  function fill(id, rows) {
    var tb = document.querySelector("#" + id + " tbody");
    tb.textContent = "";
    rows.forEach(function (r) { tb.appendChild(r); });
  }
  function num(v) { return {text: String(v), attrs: {"class": "num"}}; }

  function api(method, path) {
    return fetch(path, {method: method, headers: {"X-CloudBrowser-Dashboard": "1"}, credentials: "same-origin"})
      .then(function (r) {
        if (!r.ok) { return r.json().then(function (e) { throw new Error(e.error || r.statusText); }); }
        return r.status === 204 ? null : r.json();
      });
  }
  function button(label, cls, onClick) {
    var b = el("button", {"class": cls}, label);
    b.addEventListener("click", function () {
      b.disabled = true;
      onClick().catch(function (e) { alert(e.message); }).then(function () { b.disabled = false; });
    });
    return b;
  }

  // A sparkline of total (blue) and projected (orange) load.
  function spark(points) {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 160 28");
    if (!points || points.length < 2) { return svg; }
    var t0 = points[0][0], t1 = points[points.length - 1][0], maxv = 1;
    points.forEach(function (p) { maxv = Math.max(maxv, p[1], p[4]); });
    [[1, "#2563eb"], [4, "#f59e0b"]].forEach(function (s) {
      var pl = document.createElementNS(ns, "polyline");
      pl.setAttribute("stroke", s[1]);
      pl.setAttribute("points", points.map(function (p) {
        return ((p[0] - t0) / Math.max(1, t1 - t0) * 158 + 1).toFixed(1) + "," + (27 - p[s[0]] / maxv * 25).toFixed(1);
      }).join(" "));
      svg.appendChild(pl);
    });
    return svg;
  }

  var opened = {};
  // showBrowsers lists an instance's browsers with read-only "view" links.
  function showBrowsers(span, bs) {
    span.textContent = "";
    bs.forEach(function (b) {
      var a = el("a", {href: b.url, target: "_blank", "class": "view"}, "view " + b.id);
      span.appendChild(a);
      span.appendChild(document.createTextNode(" (" + b.owner + ", " + b.clients + " clients) "));
    });
    if (!bs.length) { span.textContent = "no browsers"; }
  }

  // frameSize: the worker's screencast frames now, as a share of the page's
  // width: graded down while it is short of CPU, drawn small with
  // --render-scale.
  function frameSize(w) {
    var drawn = w.renderScale || 1, graded = w.load.frameScale || 1;
    var s = Math.round(drawn * graded * 100) + "%";
    return drawn < 1 ? s + " (drawn at " + Math.round(drawn * 100) + "%)" : s;
  }

  function render(st) {
    document.getElementById("master").textContent = "master " + st.masterId + " · balancer " + st.strategy;
    var now = Date.now();
    fill("workers", st.workers.map(function (w) {
      var h = history[w.id] = (history[w.id] || []);
      h.push([now, w.load.total, w.load.goHeap, w.load.browserPSS, w.projected]);
      while (h.length && h[0][0] < now - 15 * 60 * 1000) { h.shift(); }
      // reach: whether the master reached the worker at the address it
      // advertises, the one the proxies dial ("": not checked yet).
      var unreachable = w.reach === "unreachable";
      var state = el("span", {"class": "state-" + w.state + (w.draining ? " draining" : "") + (unreachable ? " state-unreachable" : ""),
        title: unreachable ? "unreachable at " + w.httpAddr + ": " + (w.reachError || "?") + (w.reachChecked ? " (checked " + new Date(w.reachChecked).toLocaleTimeString() + ")" : "") : ""},
        w.state + (w.draining ? ", draining" : "") + (unreachable ? ", unreachable" : ""));
      var act = w.draining
        ? button("Undrain", "undrain", function () { return api("POST", "/api/v1/workers/" + w.id + "/undrain"); })
        : button("Drain", "drain", function () { return api("POST", "/api/v1/workers/" + w.id + "/drain"); });
      var tr = row([w.id, w.httpAddr, state, num(mib(w.load.total)), num(mib(w.load.goHeap)), num(mib(w.load.browserPSS)),
        num(mib(w.projected)), num(w.load.instances), num(w.load.browsers), num(w.load.clients), frameSize(w), spark(h), act]);
      tr.id = "worker-" + w.id;
      tr.dataset.draining = String(w.draining);
      tr.dataset.reach = w.reach || "";
      tr.dataset.frameSize = frameSize(w);
      return tr;
    }));
    var pools = [];
    st.workers.forEach(function (w) {
      ((w.pools && w.pools.pools) || []).forEach(function (p) { pools.push([w.id, p]); });
    });
    function kv(m) { return Object.keys(m || {}).sort().map(function (k) { return k + "=" + m[k]; }).join(", ") || "-"; }
    fill("pools", pools.map(function (x) {
      var w = x[0], p = x[1];
      var tr = row([p.general ? "(general)" : "/" + p.app, w, num(p.minSize), num(p.maxSize), num(p.size), num(p.free), num(p.locked),
        num(p.created), num(p.destroyed), num(p.shiftedIn), num(p.leases), kv(p.leaseFailures), kv(p.sequenceFailures),
        num(p.avgLeaseWaitMs.toFixed(1) + " ms")]);
      tr.dataset.pool = p.general ? "general" : p.app;
      return tr;
    }));
    var per = {};
    st.instances.forEach(function (i) { per[i.app] = per[i.app] || {}; per[i.app][i.worker] = (per[i.app][i.worker] || 0) + 1; });
    var blocked = {};
    st.workers.forEach(function (w) {
      var eb = (w.load && w.load.egressBlocked) || {};
      Object.keys(eb).forEach(function (app) { blocked[app] = (blocked[app] || 0) + eb[app]; });
    });
    fill("apps", st.apps.map(function (a) {
      var dist = Object.keys(per[a.mountPoint] || {}).sort().map(function (w) { return w + ": " + per[a.mountPoint][w]; }).join(", ");
      return row(["/" + a.mountPoint, a.name, a.strategy, num(a.version), a.disabled ? "disabled" : "enabled", dist || "-", num(blocked[a.mountPoint] || 0)]);
    }));
    fill("instances", st.instances.map(function (i) {
      var views = el("span", {"class": "views"});
      if (opened[i.id]) { showBrowsers(views, opened[i.id]); }
      var actions = el("span");
      actions.appendChild(button("Browsers", "browsers", function () {
        return api("GET", "/api/v1/instances/" + i.id + "/browsers").then(function (bs) { opened[i.id] = bs; showBrowsers(views, bs); });
      }));
      actions.appendChild(document.createTextNode(" "));
      actions.appendChild(button("Close", "close", function () { return api("POST", "/api/v1/instances/" + i.id + "/close"); }));
      var tr = row([i.id, "/" + i.app, num(i.version), i.owner, i.worker, age(i.created), actions, views]);
      tr.dataset.worker = i.worker;
      tr.dataset.instance = i.id;
      return tr;
    }));
    renderSessions(st.sessions);
    renderJobs(st.jobs);
    fill("proxies", (st.proxies || []).map(function (p) {
      return row([p.name, p.addr, num(p.requests), num(p.requestsPerSec.toFixed(1)), num(p.websocketsOpen)]);
    }));
    fill("members", (st.members || []).map(function (m) { return row([m.name, m.role, m.addr, m.state]); }));
    document.body.dataset.updated = String(now);
    document.body.dataset.workers = String(st.workers.length);
  }

  // Session states (wire.Session*), as the worker hosting the session's
  // browser reports its automation client: label and explanation.
  var sessionStates = {
    "connected": ["connected", "Its automation client is connected."],
    "keep-alive": ["in keep-alive",
      "Its client left less than its keep-alive ago and may reconnect with the same cdpUrl."],
    "no-client": ["no client yet", "No automation client has connected on its worker yet (after a failover: reconnected)."],
    "worker-down": ["worker unreachable", "The worker of its instance is not connected to the master."]
  };

  // renderSessions fills the automation sessions panel: every principal's
  // open sessions, each with its live view (the admin's dashboard session
  // watches any browser) and an End button, then the wait queue and the
  // limits.
  function renderSessions(ss) {
    ss = ss || {sessions: []};
    var sessions = ss.sessions || [];
    document.body.dataset.sessions = String(sessions.length);
    fill("session-limits", [
      ["Open sessions", num(sessions.length), "open"],
      ["Waiting for a browser", num(ss.waiting || 0), "waiting"],
      ["Queue max (requests waiting at once)", num(ss.queueMax || 0), "queue-max"],
      ["Queue wait", !ss.queueWait || ss.queueWait === "0s" ? "none: answered at once" : "at most " + ss.queueWait, "queue-wait"],
      ["Open sessions per principal", num(ss.maxPerPrincipal || 0), "max-per-principal"]
    ].map(function (f) {
      var tr = row([f[0], f[1]]);
      tr.dataset.figure = f[2];
      return tr;
    }));
    if (!sessions.length) {
      fill("sessions", [row([{text: "No automation sessions are open.", attrs: {"class": "muted empty", colspan: "11"}}])]);
      return;
    }
    fill("sessions", sessions.map(function (s) {
      var st = sessionStates[s.state] || [s.state, ""];
      var state = el("span", {"class": "session-" + s.state, title: st[1]}, st[0]);
      // Only an http(s) URL becomes a link (never javascript: or data:).
      var live = /^https?:\/\//.test(s.liveUrl || "")
        ? el("a", {href: s.liveUrl, target: "_blank", rel: "noopener", "class": "live-view"}, "watch") : "-";
      var tr;
      var end = button("End", "end", function () {
        return api("DELETE", "/api/v1/sessions/" + encodeURIComponent(s.id)).then(function () { tr.remove(); });
      });
      // The id shortened (the whole one in its title and data-session).
      tr = row([{text: s.id.length > 12 ? s.id.slice(0, 12) + "…" : s.id, attrs: {"class": "id", title: s.id}}, "/" + s.app, s.owner, s.worker, {text: age(s.createdAt) + " ago", attrs: {title: s.createdAt}},
        {text: "in " + until(s.expiresAt), attrs: {title: s.expiresAt}}, s.idleTimeout, s.keepAlive, state, live, end]);
      tr.dataset.session = s.id;
      tr.dataset.state = s.state;
      tr.dataset.app = s.app;
      return tr;
    }));
  }

  // renderJobs fills the Jobs panel (shown only when the master runs jobs).
  function renderJobs(j) {
    var panel = document.getElementById("jobs-panel");
    panel.hidden = !j;
    document.body.dataset.jobs = j ? "1" : "0";
    if (!j) { return; }
    // hist summarises a cumulative histogram: count, mean, p50 and p95
    // as the upper bound of the bucket holding them.
    function hist(h) {
      if (!h || !h.count) { return "-"; }
      function q(p) {
        var rank = p * h.count;
        for (var i = 0; i < (h.buckets || []).length; i++) {
          if (h.buckets[i].count >= rank) { return "≤ " + h.buckets[i].le + " s"; }
        }
        return "> " + (h.buckets.length ? h.buckets[h.buckets.length - 1].le : 0) + " s";
      }
      return h.count + " jobs, mean " + (h.sum / h.count).toFixed(2) + " s, p50 " + q(0.5) + ", p95 " + q(0.95);
    }
    function kv(m) { return Object.keys(m || {}).sort().map(function (k) { return (k || "unchecked") + "=" + m[k]; }).join(", ") || "-"; }
    fill("job-slots", (j.workers || []).map(function (w) {
      var tr = row([w.worker, num(w.slots), num(w.used), num(w.free)]);
      tr.dataset.worker = w.worker;
      return tr;
    }));
    var queued = j.queued || {};
    var qrows = Object.keys(queued).sort().map(function (k) {
      var tr = row([k, num(queued[k])]);
      tr.dataset.class = k;
      return tr;
    });
    qrows.push(row([{text: "(working)", attrs: {"class": "muted"}}, num(j.working || 0)]));
    fill("job-queues", qrows);
    var c = j.cache || {};
    var lookups = (c.hits || 0) + (c.misses || 0);
    var figures = [
      ["Outcomes", kv(j.outcomes)],
      ["Monitors", kv(j.monitors)],
      ["Job wait", hist(j.wait)],
      ["Job run time", hist(j.run)],
      ["Render cache entries", num(c.entries || 0)],
      ["Render cache size", num(mib(c.bytes || 0))],
      ["Render cache hits", num(c.hits || 0)],
      ["Render cache misses", num(c.misses || 0)],
      ["Render cache hit ratio", num(lookups ? Math.round(c.hits * 100 / lookups) + " %" : "-")],
      ["Render cache evictions", num(c.evictions || 0)]
    ];
    fill("job-figures", figures.map(function (f) {
      var tr = row(f);
      tr.dataset.figure = f[0];
      return tr;
    }));
    // Sites that asked for fewer requests: a 429/503 back-off, a
    // robots.txt Crawl-delay.
    var polite = (j.polite || []).map(function (p) {
      var tr = row([p.budget, p.pausedUntil ? new Date(p.pausedUntil).toLocaleTimeString() : "-", p.reason || "-",
        p.crawlDelayMs ? (p.crawlDelayMs / 1000) + " s" : "-"]);
      tr.dataset.budget = p.budget;
      return tr;
    });
    if (!polite.length) { polite = [row([{text: "No site is holding jobs back.", attrs: {"class": "muted", colspan: "4"}}])]; }
    fill("job-polite", polite);
    fill("monitor-changes", (j.changes || []).map(function (ch) {
      return row([age(ch.at) + " ago", ch.monitor, ch.url, {text: ch.from || "-", attrs: {"class": "check-" + ch.from}},
        {text: ch.to, attrs: {"class": "check-" + ch.to}}, ch.reason || "-"]);
    }));
  }

  api("GET", "/api/v1/history").then(function (h) {
    for (var id in h) { history[id] = h[id].map(function (p) { return [p[0], p[1], p[2], p[3], p[4]]; }); }
  }).catch(function () {}).then(function () {
    var es = new EventSource("/api/v1/events");
    es.addEventListener("status", function (e) {
      live.textContent = "live";
      live.className = "pill live";
      render(JSON.parse(e.data));
    });
    es.onerror = function () { live.textContent = "reconnecting"; live.className = "pill"; };
  });
})();
