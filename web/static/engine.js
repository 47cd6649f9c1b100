// CloudBrowser client engine: shows a virtual browser's screen on a canvas
// and sends the user's input back over one WebSocket (through any proxy; the
// path carries the instance id). Reconnects with backoff.
(function () {
  "use strict";
  // Marks for first-frame timing (scripts/bench/first-frame.sh): each is
  // set once, on the page's first visit to that step.
  var marked = {};
  function mark(name) {
    if (marked[name] || !window.performance || !performance.mark) { return; }
    marked[name] = true;
    performance.mark(name);
  }
  mark("cb-engine");
  var body = document.body;
  var canvas = document.getElementById("canvas");
  var ctx2d = canvas.getContext("2d");
  var screenEl = document.getElementById("screen");
  var statusEl = document.getElementById("status");
  var urlEl = document.getElementById("url");
  var notice = document.getElementById("notice");
  var noticeText = document.getElementById("notice-text");
  var noticeAction = document.getElementById("notice-action");
  // keys takes the keyboard: a hidden text area over the screen, so the
  // user's IME composes in it and a phone shows its keyboard for it.
  var keys = document.getElementById("keys");
  // A phone or tablet (a coarse pointer, no fine one) gets a mobile
  // viewport, and its keyboard only while the page's focus is in a text
  // field (the worker's "editable"), not on every tap.
  var touchScreen = window.matchMedia && matchMedia("(pointer: coarse)").matches && !matchMedia("(any-pointer: fine)").matches;
  var pageEditable = false;
  function focusKeys() {
    if (touchScreen && !pageEditable) { return; }
    keys.focus({preventScroll: true});
  }
  var socketPath = body.dataset.socket;
  // A worker given a socket URL (a proxy on its own host) is reached there,
  // with a ticket good for one handshake, rather than relayed from the
  // page's origin; body.dataset.socketHost says where the socket went.
  var direct = body.dataset.socketAt ? {url: body.dataset.socketAt, ticket: body.dataset.ticket || "", failed: 0} : null;
  var ws = null, backoff = 250, closedForGood = false, seq = 0, readOnly = false;
  // live: this socket's worker said hello (input goes to it); holding: a
  // migration holds the browser's input; moving: the browser moved, the
  // engine reconnects to its new copy.
  var live = false, holding = false, moving = false;
  var pending = {}, reloadURL = "";
  var frames = 0, received = 0, lastFrame = null, drawing = false, queued = [];
  // The screen at the frame's pixels, onto which tile updates are
  // composed (docs/client-engine.md, Tiles); the canvas shows it scaled.
  var canvasScreen = document.createElement("canvas"), screenCtx = canvasScreen.getContext("2d");
  var tileUpdates = 0, scrollMoves = 0;
  // Where the last frame was drawn, to map pointer positions to the page.
  var view = {x: 0, y: 0, w: 1, h: 1, dw: 1, dh: 1};

  function liveStatus() { return readOnly ? "live (read-only)" : "live"; }
  function setStatus(s) {
    statusEl.textContent = s;
    statusEl.className = "status " + s.split(" ")[0];
    body.dataset.status = s;
  }
  function show(msg, reload) {
    noticeText.textContent = msg;
    notice.hidden = false;
    reloadURL = reload || "";
    noticeAction.hidden = !reload;
  }
  noticeAction.addEventListener("click", function () { location.href = reloadURL || location.href; });

  function send(msg) {
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(msg)); return true; }
    return false;
  }
  // ---- input, kept across moves ----
  // Input the worker cannot take now (the socket is reconnecting, or a
  // migration holds the browser's input) is kept in order and sent once a
  // socket is live again, to wherever the browser is then. The worker sends
  // back what reached it during a hold ({"t":"held"}): it goes first, since
  // it was typed before anything kept here.
  var inputs = 0, queue = [], queueMax = 2000, returned = 0;
  var kept = 0, dropped = 0;
  function input(ev) {
    if (readOnly) { return; }
    ev.t = "input";
    if (!queue.length && live && !holding && sendInput(ev)) { return; }
    keep(ev, queue.length);
    flush();
  }
  function sendInput(ev) {
    if (!send(ev)) { return false; }
    inputs++;
    body.dataset.inputs = String(inputs);
    if (paints(ev) && !awaiting) { awaiting = Date.now(); probed = false; }
    return true;
  }
  // keep puts ev at index at of the queue (beyond queueMax the oldest go)
  // and says whether it took a place of its own.
  function keep(ev, at) {
    if (ev.type === "resize") { return false; } // the size is sent on connecting
    var prev = queue[at - 1];
    if (ev.type === "mousemove" && prev && prev.type === "mousemove" && at === queue.length) {
      queue[at - 1] = ev; // only the last position of a move matters
      return false;
    }
    queue.splice(at, 0, ev);
    kept++;
    body.dataset.kept = String(kept);
    if (queue.length > queueMax) {
      queue.shift();
      if (returned > 0) { returned--; }
      dropped++;
      body.dataset.dropped = String(dropped);
      if (window.console) { console.warn("cloudbrowser: more than " + queueMax + " input events while disconnected: the oldest is dropped"); }
    }
    body.dataset.queued = String(queue.length);
    return true;
  }
  function flush() {
    while (queue.length && live && !holding) {
      if (!sendInput(queue[0])) { break; }
      queue.shift();
    }
    if (!queue.length) { returned = 0; }
    body.dataset.queued = String(queue.length);
  }

  // ---- truthful status ----
  // "live" needs frames: a new socket is "connecting" until its first
  // frame; input that paints and no frame for 1.5 s asks the worker for one
  // ({"t":"refresh"}); none by 3 s shows "connection problem" until a frame
  // comes.
  var awaiting = 0, probed = false, framed = false;
  function paints(ev) {
    switch (ev.type) {
      case "keydown": return !/^(Shift|Control|Alt|Meta|CapsLock|NumLock)$/.test(ev.key);
      case "inserttext": case "compose": case "mousedown": case "wheel": return true;
    }
    return false;
  }
  setInterval(function () {
    if (!awaiting || !live) { return; }
    var waited = Date.now() - awaiting;
    if (waited > 1500 && !probed) { probed = true; send({t: "refresh"}); }
    var st = body.dataset.status;
    if (waited > 3000 && !holding && (st.indexOf("live") === 0 || st === "connecting")) { setStatus("connection problem"); }
  }, 250);

  // ---- frames ----
  function onFrame(buf) {
    mark("cb-frame-received");
    received++;
    awaiting = 0;
    if (!framed) {
      framed = true;
      if (!holding) { setStatus(liveStatus()); }
    }
    if (body.dataset.status === "connection problem") { setStatus(liveStatus()); }
    body.dataset.framesReceived = String(received); // drawn ones: frames
    var dv = new DataView(buf);
    var n = dv.getUint32(0);
    var hdr = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, n)));
    var blob = new Blob([new Uint8Array(buf, 4 + n)], {type: "image/jpeg"});
    // Latest whole frame wins here too; a tile update (hdr.tiles, on the
    // frame hdr.base) needs every update before it, so none is skipped.
    if (!hdr.tiles) { queued = []; }
    queued.push({hdr: hdr, blob: blob});
    if (!drawing) { drawNext(); }
  }
  function drawNext() {
    if (!queued.length) { drawing = false; return; }
    drawing = true;
    var f = queued.shift(), tiles = f.hdr.tiles;
    if (tiles && (!lastFrame || lastFrame.hdr.seq !== f.hdr.base || canvasScreen.width !== f.hdr.w || canvasScreen.height !== f.hdr.h)) {
      // Not on this screen (cannot happen unless a frame failed to
      // draw): the worker's next frame for a refresh is whole.
      queued = queued.filter(function (q) { return !q.hdr.tiles; });
      send({t: "refresh"});
      drawNext();
      return;
    }
    // An update with no tile (a repaint of the same pixels) has no
    // image: it only moves the screen to its frame.
    var decoded = tiles && !tiles.length ? Promise.resolve(null) : createImageBitmap(f.blob);
    decoded.then(function (bmp) {
      if (tiles) {
        var mv = f.hdr.mv;
        if (mv) { // a scroll: the screen moves, then the tiles that differ from what moved in
          var w = canvasScreen.width - Math.abs(mv[0]), h = canvasScreen.height - Math.abs(mv[1]);
          if (w > 0 && h > 0) {
            screenCtx.drawImage(canvasScreen, Math.max(0, mv[0]), Math.max(0, mv[1]), w, h, Math.max(0, -mv[0]), Math.max(0, -mv[1]), w, h);
          }
        }
        for (var i = 0; i < tiles.length; i++) {
          var t = tiles[i];
          screenCtx.drawImage(bmp, 0, i * 64, t[2], t[3], t[0], t[1], t[2], t[3]);
        }
        tileUpdates++;
        body.dataset.tileUpdates = String(tileUpdates);
        if (mv) { scrollMoves++; body.dataset.scrollMoves = String(scrollMoves); }
      } else {
        if (canvasScreen.width !== bmp.width || canvasScreen.height !== bmp.height) {
          canvasScreen.width = bmp.width;
          canvasScreen.height = bmp.height;
        }
        screenCtx.drawImage(bmp, 0, 0);
      }
      if (bmp && bmp.close) { bmp.close(); }
      lastFrame = {bmp: canvasScreen, hdr: f.hdr};
      paint();
      mark("cb-first-frame");
      frames++;
      body.dataset.frames = String(frames);
      body.dataset.frameSeq = String(f.hdr.seq);
      body.dataset.screenNear = String(f.hdr.near || 0); // tiles still approximate after a scroll (a repair follows)
      body.dataset.frameWidth = String(canvasScreen.width);
      body.dataset.pageWidth = String(f.hdr.dw || canvasScreen.width); // CSS pixels, whatever the frame's size
      if (!body.dataset.firstFrameWidth) { body.dataset.firstFrameWidth = String(canvasScreen.width); }
      ack(f.hdr.seq);
      drawNext();
    }, function () {
      ack(f.hdr.seq);
      if (tiles && lastFrame) { // the screen missed an update: no more on it until a whole frame
        lastFrame = {bmp: canvasScreen, hdr: Object.assign({}, lastFrame.hdr, {seq: -1})};
        send({t: "refresh"});
      }
      drawNext();
    });
  }
  // ack tells the worker this frame (and any skipped before it) is done:
  // it sends the next ones only as fast as they are drawn, so frames never
  // queue up on a slow link.
  function ack(n) { send({t: "ack", seq: n}); }
  function paint() {
    var dpr = window.devicePixelRatio || 1;
    var cw = canvas.clientWidth, ch = canvas.clientHeight;
    if (canvas.width !== Math.round(cw * dpr) || canvas.height !== Math.round(ch * dpr)) {
      canvas.width = Math.round(cw * dpr);
      canvas.height = Math.round(ch * dpr);
    }
    ctx2d.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx2d.fillStyle = "#e4e4e7";
    ctx2d.fillRect(0, 0, cw, ch);
    if (!lastFrame) { return; }
    var h = lastFrame.hdr;
    var dw = h.dw || lastFrame.bmp.width, dh = h.dh || lastFrame.bmp.height;
    var scale = Math.min(cw / dw, ch / dh, 1); // never upscale: the owner's viewport is the window
    var w = dw * scale, hh = dh * scale;
    view = {x: 0, y: 0, w: w, h: hh, dw: dw, dh: dh};
    ctx2d.drawImage(lastFrame.bmp, 0, 0, w, hh);
  }
  window.addEventListener("resize", paint);

  // ---- input ----
  function pos(e) {
    var r = canvas.getBoundingClientRect();
    var x = (e.clientX - r.left - view.x) * view.dw / view.w;
    var y = (e.clientY - r.top - view.y) * view.dh / view.h;
    return {x: Math.max(0, Math.min(view.dw, x)), y: Math.max(0, Math.min(view.dh, y))};
  }
  function mods(e) {
    return (e.altKey ? 1 : 0) | (e.ctrlKey ? 2 : 0) | (e.metaKey ? 4 : 0) | (e.shiftKey ? 8 : 0);
  }
  var buttonNames = ["left", "middle", "right", "back", "forward"];
  var moveQueued = null;
  canvas.addEventListener("mousemove", function (e) {
    var p = pos(e);
    var first = moveQueued === null;
    moveQueued = {type: "mousemove", x: p.x, y: p.y, buttons: e.buttons, modifiers: mods(e)};
    if (first) {
      requestAnimationFrame(function () { input(moveQueued); moveQueued = null; });
    }
  });
  canvas.addEventListener("focus", focusKeys);
  canvas.addEventListener("mousedown", function (e) {
    e.preventDefault(); // the focus stays on keys
    focusKeys();
    var p = pos(e);
    input({type: "mousedown", x: p.x, y: p.y, button: buttonNames[e.button] || "left", buttons: e.buttons, clickCount: e.detail || 1, modifiers: mods(e)});
  });
  canvas.addEventListener("mouseup", function (e) {
    var p = pos(e);
    input({type: "mouseup", x: p.x, y: p.y, button: buttonNames[e.button] || "left", buttons: e.buttons, clickCount: e.detail || 1, modifiers: mods(e)});
    e.preventDefault();
  });
  canvas.addEventListener("contextmenu", function (e) { e.preventDefault(); });
  canvas.addEventListener("wheel", function (e) {
    var p = pos(e), k = e.deltaMode === 1 ? 16 : (e.deltaMode === 2 ? view.dh : 1);
    // deltaX is always sent, also when 0 (see browser.InputWheel).
    input({type: "wheel", x: p.x, y: p.y, deltaX: e.deltaX * k, deltaY: e.deltaY * k, modifiers: mods(e)});
    e.preventDefault();
  }, {passive: false});
  // ---- keyboard, IME and paste ----
  // Keys typed go as key events. Text that an IME composes (Chinese,
  // Japanese, Korean, dead keys where the platform composes them) goes as
  // the composition in progress ("compose") and its commit ("inserttext"),
  // not as the raw keys; so does what a phone's keyboard types (its keys
  // come as "Unidentified", the text in input events).
  var composing = false;
  function isPaste(e) { return (e.ctrlKey || e.metaKey) && (e.key === "v" || e.key === "V"); }
  function imeKey(e) { return composing || e.isComposing || e.keyCode === 229 || e.key === "Process" || e.key === "Unidentified"; }
  keys.addEventListener("keydown", function (e) {
    if (isPaste(e)) { return; } // let the paste event carry the text
    if (imeKey(e)) { return; } // the composition or input events carry it
    if (e.key === "Dead") { return; } // the next key brings the character
    var ev = {type: "keydown", key: e.key, code: e.code, keyCode: e.keyCode, modifiers: mods(e)};
    if ([...e.key].length === 1 && !e.ctrlKey && !e.metaKey) { ev.text = e.key; } // one character, also beyond the BMP
    else if (e.key === "Enter") { ev.text = "\r"; }
    input(ev);
    e.preventDefault();
  });
  keys.addEventListener("keyup", function (e) {
    if (isPaste(e) || imeKey(e) || e.key === "Dead") { return; }
    input({type: "keyup", key: e.key, code: e.code, keyCode: e.keyCode, modifiers: mods(e)});
    e.preventDefault();
  });
  keys.addEventListener("compositionstart", function () { composing = true; });
  keys.addEventListener("compositionupdate", function (e) { input({type: "compose", text: e.data || ""}); });
  keys.addEventListener("compositionend", function (e) {
    composing = false;
    input(e.data ? {type: "inserttext", text: e.data} : {type: "compose", text: ""});
    keys.value = "";
  });
  keys.addEventListener("input", function (e) {
    if (composing || e.isComposing) { return; }
    if (e.inputType === "deleteContentBackward") {
      input({type: "keydown", key: "Backspace"}); input({type: "keyup", key: "Backspace"});
    } else if (e.inputType === "insertLineBreak") {
      input({type: "keydown", key: "Enter", text: "\r"}); input({type: "keyup", key: "Enter"});
    } else if (e.data) {
      input({type: "inserttext", text: e.data});
    }
    keys.value = "";
  });
  keys.addEventListener("paste", function (e) {
    var text = (e.clipboardData || window.clipboardData).getData("text"); // rich text as plain text
    if (text) { input({type: "inserttext", text: text}); }
    e.preventDefault();
  });

  // ---- touch ----
  // Fingers on the screen go as touch events (the page's own touch
  // handlers, or Chromium's taps, scrolls and pinches); the engine's page
  // itself neither scrolls nor zooms under them.
  var touchQueued = null;
  function touchesOf(list) {
    var out = [];
    for (var i = 0; i < list.length && out.length < 10; i++) {
      var p = pos(list[i]);
      out.push({x: p.x, y: p.y, id: list[i].identifier});
    }
    return out;
  }
  function onTouch(phase) {
    return function (e) {
      e.preventDefault();
      if (phase === "start") { focusKeys(); }
      var ev = {type: "touch", phase: phase, touches: touchesOf(e.touches)};
      if (phase !== "move") { touchQueued = null; input(ev); return; }
      var first = touchQueued === null;
      touchQueued = ev;
      if (first) { requestAnimationFrame(function () { if (touchQueued) { input(touchQueued); touchQueued = null; } }); }
    };
  }
  canvas.addEventListener("touchstart", onTouch("start"), {passive: false});
  canvas.addEventListener("touchmove", onTouch("move"), {passive: false});
  canvas.addEventListener("touchend", onTouch("end"), {passive: false});
  canvas.addEventListener("touchcancel", onTouch("cancel"), {passive: false});

  // ---- clipboard out ----
  // What the page copies after this user's own gesture comes back as
  // {"t":"clipboard"}; it goes on the user's clipboard where their browser
  // allows it, else a "copied" bar offers it for one click.
  var copiedEl = document.getElementById("copied");
  var copiedText = document.getElementById("copied-text");
  var copiedBtn = document.getElementById("copied-copy");
  var lastCopy = "", copies = 0, copiedTimer = null;
  function preview(t) { t = t.replace(/\s+/g, " "); return t.length > 60 ? t.slice(0, 60) + "…" : t; }
  function offerCopy(ok) {
    clearTimeout(copiedTimer);
    copiedText.textContent = ok ? "Copied to your clipboard: " + preview(lastCopy) : "copied: " + preview(lastCopy);
    copiedBtn.hidden = ok;
    copiedEl.hidden = false;
    body.dataset.copied = ok ? "clipboard" : "offered";
    copiedTimer = setTimeout(function () { copiedEl.hidden = true; }, ok ? 2500 : 15000);
  }
  function writeClipboard(text) {
    if (navigator.clipboard && navigator.clipboard.writeText) { return navigator.clipboard.writeText(text); }
    return Promise.reject(new Error("no clipboard API"));
  }
  function copiedByPage(text) {
    lastCopy = text;
    copies++;
    body.dataset.copies = String(copies);
    writeClipboard(text).then(function () { offerCopy(true); }, function () { offerCopy(false); });
  }
  // An automation session's browser (docs/automation.md): while a person
  // drives it ({"t":"takeover"}, user "" when handed back) its automation
  // waits; the bar says who, and those who may drive hand it back.
  var takeoverEl = document.getElementById("takeover");
  var takeoverText = document.getElementById("takeover-text");
  var handBackBtn = document.getElementById("hand-back");
  function showTakeover(user) {
    body.dataset.takeover = user;
    takeoverEl.hidden = !user;
    if (!user) { return; }
    takeoverText.textContent = user + " is driving: the automation waits.";
    handBackBtn.hidden = readOnly;
  }
  handBackBtn.addEventListener("click", function () {
    send({t: "handBack"});
    focusKeys();
  });

  copiedBtn.addEventListener("click", function () {
    writeClipboard(lastCopy).then(function () { offerCopy(true); }, function () {
      // An older or stricter browser: copy a selection, in this click.
      var t = document.createElement("textarea");
      t.value = lastCopy;
      document.body.appendChild(t);
      t.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
      t.remove();
      offerCopy(ok);
      focusKeys();
    });
  });

  // The viewport follows the owner's window.
  var resizeTimer = null;
  // The screen's pixel ratio makes frames as sharp as it is.
  function sendSize() {
    var w = Math.round(screenEl.clientWidth), h = Math.round(screenEl.clientHeight);
    var scale = Math.min(4, Math.round((window.devicePixelRatio || 1) * 100) / 100);
    if (w > 0 && h > 0) { input({type: "resize", width: w, height: h, scale: scale === 1 ? 0 : scale, mobile: touchScreen}); }
  }
  if (window.ResizeObserver) {
    new ResizeObserver(function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(sendSize, 150);
      paint();
    }).observe(screenEl);
  }

  ["back", "forward", "reload"].forEach(function (id) {
    document.getElementById(id).addEventListener("click", function () { input({type: id}); focusKeys(); });
  });

  // ---- the page's dialogs ----
  // alert, confirm, prompt and "leave this page?" are shown over the
  // screen; the page waits for the answer. Every viewer sees the dialog;
  // the first answer from one who may use the browser wins, and the
  // others' dialogs close (dialogClosed).
  var dialogEl = document.getElementById("dialog");
  var dialogForm = document.getElementById("dialog-form");
  var dialogOrigin = document.getElementById("dialog-origin");
  var dialogText = document.getElementById("dialog-text");
  var dialogInput = document.getElementById("dialog-input");
  var dialogPassword = document.getElementById("dialog-password");
  var dialogNote = document.getElementById("dialog-note");
  var dialogOk = document.getElementById("dialog-ok");
  var dialogCancel = document.getElementById("dialog-cancel");
  var dialog = null; // the open one
  function originOf(url) {
    try { return new URL(url).host; } catch (e) { return ""; }
  }
  // What a permission request asks, in words; camera and microphone are
  // not carried, so allowing them gives the page none.
  var permissionWords = {
    geolocation: "know your location",
    notifications: "show notifications",
    camera: "use a camera (your own camera is not shared: the page will find none)",
    microphone: "use a microphone (your own microphone is not shared: the page will find none)"
  };
  function openDialog(m) {
    dialog = m;
    var leave = m.kind === "beforeunload", auth = m.kind === "auth", perm = m.kind === "permission";
    var from = originOf(m.url);
    dialogOrigin.textContent = auth ? "Sign in to " + (from || "this site") : perm ? (from || "This site") + " wants to" : from ? from + " says" : "The page says";
    dialogText.textContent = leave ? "Leave this page? Changes you made may not be saved." :
      auth ? (m.message ? "The site says: " + m.message : "The site asks for a user name and password.") :
      perm ? (permissionWords[m.message] || m.message) : (m.message || "");
    dialogInput.hidden = m.kind !== "prompt" && !auth;
    dialogInput.value = m.default || "";
    dialogInput.placeholder = auth ? "User name" : "";
    dialogInput.autocomplete = auth ? "username" : "off";
    dialogPassword.hidden = !auth;
    dialogPassword.value = "";
    dialogCancel.hidden = m.kind === "alert";
    dialogOk.textContent = leave ? "Leave" : auth ? "Sign in" : perm ? "Allow" : "OK";
    dialogCancel.textContent = leave ? "Stay" : perm ? "Block" : "Cancel";
    dialogRole();
    dialogEl.hidden = false;
    body.dataset.dialog = m.kind;
    if (!readOnly) { (m.kind === "prompt" || auth ? dialogInput : dialogOk).focus(); }
  }
  function dialogRole() {
    dialogOk.disabled = dialogCancel.disabled = dialogInput.disabled = dialogPassword.disabled = readOnly;
    dialogNote.textContent = readOnly ? "You may only watch: someone who may use this browser answers." : "";
  }
  function closeDialog(id) {
    if (!dialog || (id && dialog.id !== id)) { return; }
    dialog = null;
    dialogEl.hidden = true;
    body.dataset.dialog = "";
    focusKeys();
  }
  function answer(accept) {
    if (!dialog || readOnly) { return; }
    var typed = (dialog.kind === "prompt" || dialog.kind === "auth") && accept;
    var text = typed ? dialogInput.value : "", password = typed && dialog.kind === "auth" ? dialogPassword.value : "";
    dialogPassword.value = "";
    var m = {t: "answer", dialog: dialog.id, accept: accept, value: text, password: password};
    var where = accept && dialog.kind === "permission" && dialog.message === "geolocation" && navigator.geolocation;
    closeDialog(dialog.id);
    if (where) {
      // The page learns where this user is if the user's own browser
      // tells (it may ask them too); otherwise "position unavailable".
      navigator.geolocation.getCurrentPosition(function (p) {
        m.position = {latitude: p.coords.latitude, longitude: p.coords.longitude, accuracy: p.coords.accuracy};
        send(m);
      }, function () { send(m); }, {timeout: 15000, maximumAge: 60000});
      return;
    }
    // Lost with a dropped socket, the dialog comes back on reconnect.
    send(m);
  }
  dialogForm.addEventListener("submit", function (e) { e.preventDefault(); answer(true); });
  dialogCancel.addEventListener("click", function () { answer(false); });
  dialogEl.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { e.preventDefault(); answer(false); }
    e.stopPropagation(); // typed into the dialog, not the page
  });

  // ---- files ----
  // A file picker the page opens after this user's click shows here: the
  // user's own picker chooses the files, which go up over HTTP to the
  // Browser URL's file door and are set on the page's input. Files
  // dropped on the screen go the same way, to the element under the drop.
  // The page's downloads show in a bar with their progress; a finished one
  // is a link to the file.
  var filesBase = socketPath.replace(/\/ws(\?.*)?$/, "") + "/files/";
  var toastEl = document.getElementById("toast");
  var toastTimer = null;
  function toast(msg) {
    toastEl.textContent = msg;
    toastEl.hidden = false;
    body.dataset.toast = msg;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { toastEl.hidden = true; }, 8000);
  }
  var pickerEl = document.getElementById("picker");
  var pickerInput = document.getElementById("picker-input");
  var pickerText = document.getElementById("picker-text");
  var picker = null; // the page's open picker
  function sendFiles(url, list, limit, done) {
    var total = 0, fd = new FormData();
    for (var i = 0; i < list.length; i++) { total += list[i].size; fd.append("file", list[i], list[i].name); }
    if (limit && total > limit) {
      toast("Too large: at most " + Math.floor(limit / 1048576) + " MiB of files per browser.");
      done(false);
      return;
    }
    body.dataset.upload = "sending";
    fetch(url, {method: "POST", body: fd, credentials: "same-origin"}).then(function (r) {
      if (r.ok) { body.dataset.upload = "done"; done(true); return; }
      return r.text().then(function (t) { body.dataset.upload = "refused"; toast(t || ("Upload refused (" + r.status + ")")); done(false); });
    }, function () { body.dataset.upload = "failed"; toast("The upload failed: check the connection and try again."); done(false); });
  }
  function openPicker(m) {
    if (m.refused) { toast(m.refused); return; }
    picker = m;
    pickerInput.value = "";
    pickerInput.multiple = !!m.multiple;
    if (m.accept) { pickerInput.accept = m.accept; } else { pickerInput.removeAttribute("accept"); }
    pickerText.textContent = m.multiple ? "The page asks for files." : "The page asks for a file.";
    pickerEl.hidden = false;
    body.dataset.picker = String(m.id);
  }
  function closePicker() { picker = null; pickerEl.hidden = true; body.dataset.picker = ""; focusKeys(); }
  document.getElementById("picker-choose").addEventListener("click", function () { pickerInput.click(); });
  document.getElementById("picker-cancel").addEventListener("click", closePicker);
  pickerInput.addEventListener("change", function () {
    if (!picker || !pickerInput.files.length) { return; }
    var p = picker;
    pickerText.textContent = "Sending…";
    sendFiles(filesBase + "up/" + p.id, pickerInput.files, p.maxBytes, function () { if (picker === p) { closePicker(); } });
  });
  canvas.addEventListener("dragover", function (e) {
    if (e.dataTransfer && Array.prototype.indexOf.call(e.dataTransfer.types, "Files") >= 0) { e.preventDefault(); }
  });
  canvas.addEventListener("drop", function (e) {
    if (!e.dataTransfer || !e.dataTransfer.files.length) { return; }
    e.preventDefault();
    if (readOnly) { toast("You may only watch this browser: you cannot drop files on it."); return; }
    var p = pos(e);
    sendFiles(filesBase + "drop?x=" + p.x.toFixed(1) + "&y=" + p.y.toFixed(1), e.dataTransfer.files, 0, function () {});
  });
  var downloadsEl = document.getElementById("downloads");
  var downloadsList = document.getElementById("downloads-list");
  var downloads = {};
  function size(n) { return n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : n >= 1024 ? Math.round(n / 1024) + " KiB" : (n || 0) + " B"; }
  function download(m) {
    var d = downloads[m.id];
    if (!d) {
      d = downloads[m.id] = {el: document.createElement("li")};
      d.el.className = "download";
      downloadsList.appendChild(d.el);
    }
    d.name = m.name || d.name || "download";
    d.state = m.state;
    d.el.textContent = "";
    var label = document.createElement(m.state === "completed" ? "a" : "span");
    label.textContent = d.name;
    if (m.state === "completed") {
      label.href = filesBase + "down/" + encodeURIComponent(m.id);
      label.download = d.name;
    }
    var note = document.createElement("span");
    note.className = "note";
    note.textContent = m.state === "inProgress" ? size(m.received) + (m.total ? " of " + size(m.total) : "") :
      m.state === "completed" ? size(m.total || m.received) : m.state === "refused" ? (m.error || "refused") : "cancelled";
    d.el.appendChild(label);
    d.el.appendChild(note);
    d.el.dataset.state = m.state;
    downloadsEl.hidden = false;
    body.dataset.downloads = String(Object.keys(downloads).length);
  }
  document.getElementById("downloads-close").addEventListener("click", function () { downloadsEl.hidden = true; });

  // ---- connection ----
  function onMessage(ev) {
    if (typeof ev.data !== "string") { onFrame(ev.data); return; }
    var m;
    try { m = JSON.parse(ev.data); } catch (e) { return; }
    switch (m.t) {
      case "hello":
        mark("cb-hello");
        backoff = 250;
        readOnly = !!m.readOnly;
        body.dataset.readOnly = String(readOnly);
        live = true;
        holding = moving = framed = false;
        awaiting = Date.now(); // no frame by 3 s: "connection problem"
        probed = false;
        if (m.noFrames) { // a runtime that renders nothing: no frame will come
          framed = true;
          awaiting = 0;
          setStatus(liveStatus());
        } else {
          setStatus("connecting");
        }
        if (m.page) { page(m.page); }
        pageEditable = false; // the worker says again if it is
        closeDialog(); // the worker sends the open one again
        showTakeover(""); // and who drives, if anybody
        body.dataset.worker = m.worker || "";
        if (readOnly) {
          queue = [];
          returned = 0;
        } else {
          sendSize();
          flush(); // what was typed while away, in order
        }
        // The first frame should follow at once (the worker's last one):
        // if none comes, ask for one.
        var sock = ws, before = received;
        setTimeout(function () { if (ws === sock && live && received === before) { send({t: "refresh"}); } }, 1000);
        focusKeys();
        break;
      case "role": // the owner changed this user's access while connected
        readOnly = !!m.readOnly;
        body.dataset.readOnly = String(readOnly);
        if (!holding && framed) { setStatus(liveStatus()); }
        dialogRole();
        showTakeover(body.dataset.takeover || "");
        break;
      case "dialog": // the page asks its user
        openDialog(m);
        break;
      case "dialogClosed": // answered (by anyone), timed out, or gone
        closeDialog(m.id);
        break;
      case "clipboard": // the page copied after this user's gesture
        copiedByPage(m.text || "");
        break;
      case "fileChooser": // the page asks this user for files
        openPicker(m);
        break;
      case "editable": // the page's focus moved into or out of a text field
        pageEditable = !!m.on;
        body.dataset.editable = String(pageEditable);
        if (touchScreen) { if (pageEditable) { focusKeys(); } else { keys.blur(); } }
        break;
      case "takeover": // a person drives this automation session's browser, or handed it back
        showTakeover(m.user || "");
        break;
      case "download": // a download of the page began, progressed or ended
        download(m);
        break;
      case "hold": // a migration: keep the input for the browser's new copy
        holding = true;
        returned = 0;
        setStatus("moving");
        break;
      case "held": // input that reached the worker after the hold
        if (m.input && !readOnly && keep(m.input, returned)) { returned++; }
        if (!holding) { flush(); }
        break;
      case "resume": // the migration did not happen: the input goes here
        holding = false;
        setStatus(framed ? liveStatus() : "connecting");
        flush();
        break;
      case "page":
        page(m);
        break;
      case "pong":
        if (pending[m.seq]) { pending[m.seq](m); delete pending[m.seq]; }
        break;
      case "moved": // the instance lives on another worker now: same URL
        backoff = 250;
        moving = true;
        setStatus("moving");
        break;
      case "closed":
        closedForGood = true;
        body.dataset.closedReason = m.reason || "";
        setStatus("closed");
        show(m.reason || "This browser was closed.", m.reload);
        break;
      case "error":
        if (window.console) { console.warn("cloudbrowser:", m.message); }
        break;
    }
  }
  function page(p) {
    urlEl.textContent = p.url || "";
    body.dataset.pageUrl = p.url || "";
    document.title = (p.title ? p.title + " · " : "") + "CloudBrowser";
  }

  // linkKbps estimates this viewer's link in kbit/s from the page load: the
  // bytes of the largest response after its first packet, over the time
  // from its first byte to its last. The worker sizes the first frame by it
  // (a full one takes seconds on a slow link). Only transfers of 20 ms or
  // more count: shorter ones are a fast link's jitter, and a fast link
  // needs no hint. 0: nothing measurable came (cached assets, a fast link);
  // the last estimate of this browser, within the hour, stands in.
  function linkKbps() {
    var kbps = 0, size = 0;
    if (window.performance && performance.getEntriesByType) {
      var es = performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"));
      for (var i = 0; i < es.length; i++) {
        var e = es[i], dt = e.responseEnd - e.responseStart;
        if (e.transferSize >= 2048 && dt >= 20 && e.transferSize > size) {
          size = e.transferSize;
          kbps = Math.round((e.transferSize - 1460) * 8 / dt);
        }
      }
    }
    try {
      if (kbps > 0) {
        localStorage.setItem("cb-link", JSON.stringify({kbps: kbps, at: Date.now()}));
      } else {
        var saved = JSON.parse(localStorage.getItem("cb-link") || "null");
        if (saved && Date.now() - saved.at < 3600e3) { kbps = saved.kbps; }
      }
    } catch (err) { /* storage off: no memory of the link */ }
    return Math.max(0, Math.min(kbps, 10000000));
  }
  var link = linkKbps();
  body.dataset.link = String(link);

  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var q = link > 0 ? (socketPath.indexOf("?") < 0 ? "?" : "&") + "link=" + link : "";
    var here = proto + location.host + socketPath + q;
    if (!direct) { openSocket(here, ""); return; }
    if (direct.ticket) {
      var tk = direct.ticket;
      direct.ticket = "";
      openSocket(direct.url + q, tk);
      return;
    }
    // A fresh ticket, and the socket URL of whichever worker has the
    // browser now (none: the page's origin).
    fetch(socketPath, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
      return r.ok ? r.json() : {};
    }).then(function (j) {
      if (j.url && j.ticket) { openSocket(j.url + q, j.ticket); } else { openSocket(here, ""); }
    }, function () { openSocket(here, ""); });
  }

  // ---- a socket that went silent ----
  // A connection can die without a close reaching the browser (its
  // worker stalled or cut off, an end of stream the network lost): after
  // 4 s without a word from the worker the engine asks ({"t":"ping"}, the
  // worker answers at once); after 10 s it gives the socket up and
  // reconnects, which finds the browser wherever it is now.
  var heard = 0;
  setInterval(function () {
    if (!ws || ws.readyState !== 1 || !heard) { return; }
    var quiet = Date.now() - heard;
    if (quiet > 10000) {
      var dead = ws;
      dead.onclose = dead.onmessage = null;
      try { dead.close(); } catch (err) { /* already closing */ }
      silences++;
      body.dataset.silences = String(silences);
      dropSocket();
      return;
    }
    if (quiet > 4000) { send({t: "ping", seq: 0}); }
  }, 2000);
  var silences = 0;

  // dropSocket forgets the socket and reconnects after the backoff.
  function dropSocket() {
    ws = null;
    live = holding = false;
    awaiting = 0;
    heard = 0;
    if (closedForGood) { return; }
    setStatus(moving ? "moving" : "reconnecting");
    setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 8000);
  }

  function openSocket(url, ticket) {
    var opened = false;
    ws = ticket ? new WebSocket(url, ["cb.v1", "cb-ticket." + ticket]) : new WebSocket(url);
    body.dataset.socketHost = url.split("/")[2];
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      opened = true;
      send({t: "caps", tiles: true}); // tile updates (older engines get whole frames)
      heard = Date.now();
      if (ticket) { direct.failed = 0; }
      mark("cb-ws-open");
    };
    ws.onmessage = function (ev) { heard = Date.now(); onMessage(ev); };
    ws.onclose = function () {
      // Twice refused or out of reach, even with a fresh ticket: the
      // socket URL does not work from here; the page's origin relays.
      if (ticket && !opened && ++direct.failed >= 2) { direct = null; }
      dropSocket();
    };
  }

  // A small API for tests and tools.
  window.cloudbrowserEngine = {
    ping: function (data) {
      return new Promise(function (resolve, reject) {
        var n = ++seq;
        pending[n] = resolve;
        if (!send({t: "ping", seq: n, data: data || ""})) { delete pending[n]; reject(new Error("not connected")); }
      });
    },
    status: function () { return body.dataset.status; },
    frames: function () { return frames; },
    // screen is the composed screen, at the frame's pixels, as a PNG data URL.
    screen: function () { return canvasScreen.toDataURL("image/png"); },
    queued: function () { return queue.length; },
    copied: function () { return lastCopy; },
    downloads: function () {
      return Object.keys(downloads).map(function (id) { return {id: id, name: downloads[id].name, state: downloads[id].state, href: filesBase + "down/" + encodeURIComponent(id)}; });
    }
  };

  // The socket before the first paint: a new one's handshake runs while
  // the page lays out and paints the empty screen.
  setStatus("connecting");
  connect();
  paint();
})();
