// A shared whiteboard. Every stroke is appended to the instance's shared
// "strokes" array (cloudbrowser.instance.append, atomic on the worker), and
// every browser of the instance redraws the board when it changes. The board
// has a fixed logical size so all browsers agree on coordinates whatever
// their window size; the canvas is scaled to fit.
(function () {
  "use strict";
  var cb = window.cloudbrowser;
  var canvas = document.getElementById("board"), g = canvas.getContext("2d");
  var W = canvas.width, H = canvas.height;
  var KEY = "strokes";
  // A stroke is {c: colour, w: width, p: [x0, y0, dx1, dy1, ...]}: integer
  // deltas keep it small, so the 256 KiB value limit holds hundreds of
  // strokes (the oldest go first once it is full).
  var MAX_STROKES = 1000, MAX_POINTS = 300;
  var colors = ["#111827", "#dc2626", "#ea580c", "#16a34a", "#2563eb", "#9333ea"];
  var color = colors[0], strokes = [], current = null;

  var hint = document.getElementById("hint");
  if (!cb) { hint.textContent = "This page needs CloudBrowser's app API."; return; }
  hint.textContent = "· share this board from /" + cb.app.mountPoint + "/a/" + cb.instance.id;

  var box = document.getElementById("colors");
  colors.forEach(function (c) {
    var b = document.createElement("button");
    b.type = "button"; b.className = "swatch" + (c === color ? " on" : ""); b.style.background = c; b.title = c;
    b.addEventListener("click", function () {
      color = c;
      box.querySelectorAll(".swatch").forEach(function (s) { s.classList.toggle("on", s === b); });
    });
    box.appendChild(b);
  });

  function fit() {
    var wrap = document.getElementById("wrap");
    var k = Math.min((wrap.clientWidth - 16) / W, (wrap.clientHeight - 16) / H);
    k = Math.max(k, 0.1);
    canvas.style.width = Math.floor(W * k) + "px";
    canvas.style.height = Math.floor(H * k) + "px";
  }
  window.addEventListener("resize", fit);
  fit();

  function points(s) { // absolute [x, y, x, y, ...] from the deltas
    var out = [], x = 0, y = 0;
    for (var i = 0; i + 1 < s.p.length; i += 2) { x += s.p[i]; y += s.p[i + 1]; out.push(x, y); }
    return out;
  }
  function drawStroke(s) {
    var p = points(s);
    if (p.length < 2) { return; }
    g.strokeStyle = s.c; g.fillStyle = s.c; g.lineWidth = s.w;
    g.lineCap = "round"; g.lineJoin = "round";
    if (p.length === 2) { // a dot
      g.beginPath(); g.arc(p[0], p[1], s.w / 2, 0, 2 * Math.PI); g.fill();
      return;
    }
    g.beginPath(); g.moveTo(p[0], p[1]);
    for (var i = 2; i < p.length; i += 2) { g.lineTo(p[i], p[i + 1]); }
    g.stroke();
  }
  function redraw() {
    g.clearRect(0, 0, W, H);
    strokes.forEach(drawStroke);
    if (current) { drawStroke(current); }
  }
  function show(list) {
    strokes = Array.isArray(list) ? list : [];
    var n = strokes.length;
    document.getElementById("count").textContent = n + (n === 1 ? " stroke" : " strokes");
    // The title carries the count: the client engine shows it in the tab.
    document.title = "Whiteboard: " + n + (n === 1 ? " stroke" : " strokes");
    redraw();
  }
  cb.instance.subscribe(KEY, show);
  cb.instance.get(KEY).then(show);

  // ---- drawing ----
  var last = null; // the last point of the current stroke, absolute
  function at(e) {
    var r = canvas.getBoundingClientRect();
    return [Math.round((e.clientX - r.left) * W / r.width), Math.round((e.clientY - r.top) * H / r.height)];
  }
  function begin(pt) {
    current = {c: color, w: Number(document.getElementById("width").value), p: [pt[0], pt[1]]};
    last = pt;
  }
  function send() {
    var s = current;
    current = null;
    // Our stroke stays on screen until the new array arrives with it.
    strokes = strokes.concat([s]);
    cb.instance.append(KEY, s, {max: MAX_STROKES}).catch(function (err) { hint.textContent = "· " + err.message; });
  }
  canvas.addEventListener("pointerdown", function (e) {
    if (e.button !== 0) { return; }
    canvas.setPointerCapture(e.pointerId);
    begin(at(e));
    redraw();
    e.preventDefault();
  });
  canvas.addEventListener("pointermove", function (e) {
    if (!current) { return; }
    var pt = at(e);
    if (Math.abs(pt[0] - last[0]) + Math.abs(pt[1] - last[1]) < 2) { return; } // thin out jitter
    current.p.push(pt[0] - last[0], pt[1] - last[1]);
    // Only the new segment: a full redraw per move is too much for a busy
    // board.
    g.strokeStyle = current.c; g.lineWidth = current.w; g.lineCap = "round";
    g.beginPath(); g.moveTo(last[0], last[1]); g.lineTo(pt[0], pt[1]); g.stroke();
    last = pt;
    if (current.p.length >= 2 * MAX_POINTS) { // a long stroke goes out in pieces
      send();
      begin(pt);
    }
  });
  function end() {
    if (current) { send(); redraw(); }
  }
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointercancel", end);

  document.getElementById("clear").addEventListener("click", function () {
    cb.instance.set(KEY, []);
  });
})();
