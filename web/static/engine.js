// CloudBrowser client engine: connects to the virtual browser over a
// WebSocket (through any proxy; the path carries the instance id), shows its
// state and reconnects with backoff.
(function () {
  "use strict";
  var body = document.body;
  var statusEl = document.getElementById("status");
  var urlEl = document.getElementById("url");
  var notice = document.getElementById("notice");
  var noticeText = document.getElementById("notice-text");
  var noticeAction = document.getElementById("notice-action");
  var socketPath = body.dataset.socket;
  var ws = null, backoff = 250, closedForGood = false, seq = 0;
  var pending = {};

  function setStatus(s) {
    statusEl.textContent = s;
    statusEl.className = "status " + s.split(" ")[0];
    body.dataset.status = s;
  }
  function show(msg, action) {
    noticeText.textContent = msg;
    notice.hidden = false;
    noticeAction.hidden = !action;
  }
  noticeAction.addEventListener("click", function () { location.reload(); });

  function send(msg) {
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(msg)); return true; }
    return false;
  }

  function onMessage(ev) {
    if (typeof ev.data !== "string") { return; } // frames arrive as binary
    var m;
    try { m = JSON.parse(ev.data); } catch (e) { return; }
    switch (m.t) {
      case "hello":
        backoff = 250;
        setStatus(m.readOnly ? "live (read-only)" : "live");
        if (m.page) { page(m.page); }
        body.dataset.worker = m.worker || "";
        break;
      case "page":
        page(m);
        break;
      case "pong":
        if (pending[m.seq]) { pending[m.seq](m); delete pending[m.seq]; }
        break;
      case "closed":
        closedForGood = true;
        setStatus("closed");
        show(m.reason || "This browser was closed.", m.reload);
        break;
      case "error":
        console.warn("cloudbrowser:", m.message);
        break;
    }
  }
  function page(p) {
    urlEl.textContent = p.url || "";
    if (p.title) { document.title = p.title + " · CloudBrowser"; }
  }

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(proto + location.host + socketPath);
    ws.binaryType = "arraybuffer";
    ws.onmessage = onMessage;
    ws.onclose = function (ev) {
      ws = null;
      if (closedForGood) { return; }
      if (ev.code === 4404) { // the server says the browser does not exist
        closedForGood = true;
        setStatus("closed");
        show("This browser no longer exists.", true);
        return;
      }
      setStatus("reconnecting");
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 8000);
    };
  }

  ["back", "forward", "reload"].forEach(function (id) {
    document.getElementById(id).addEventListener("click", function () { send({t: "nav", action: id}); });
  });

  // A tiny API for tests and tools: round-trip latency through the socket.
  window.cloudbrowserEngine = {
    ping: function (data) {
      return new Promise(function (resolve, reject) {
        var n = ++seq;
        pending[n] = resolve;
        if (!send({t: "ping", seq: n, data: data || ""})) { delete pending[n]; reject(new Error("not connected")); }
      });
    },
    status: function () { return body.dataset.status; }
  };

  setStatus("connecting");
  connect();
})();
