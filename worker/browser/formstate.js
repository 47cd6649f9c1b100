// Form state (worker/browser/formstate.go): what a page shows in its form
// fields, its focus, caret and scroll, read for a browser snapshot and put
// back after the page loads again on another worker. The Go side wraps this
// file in a function that ends with "return capture(…)" or
// "return restore(…)"; the shapes are wire.FormState's JSON.

// Inputs never captured: passwords and files never leave the page, hidden
// ones and buttons are the page's own (a restored stale token would hurt).
const skipTypes = new Set(["password", "file", "hidden", "submit", "button", "reset", "image"]);
// Fields whose autocomplete says they hold a secret.
const secret = /(^|\s)(current-password|new-password|one-time-code|cc-number|cc-csc|cc-exp|cc-exp-month|cc-exp-year)(\s|$)/i;

function inputType(el) {
  return String(el.type || "text").toLowerCase();
}

function isBox(el) {
  return el.tagName === "INPUT" && (el.type === "checkbox" || el.type === "radio");
}

function sameTagIndex(e) {
  let i = 0;
  for (let s = e.previousElementSibling; s; s = s.previousElementSibling) {
    if (s.localName === e.localName) { i++; }
  }
  return i;
}

// keyOf names an element so that the same page, loaded again, finds it:
// its id, its name (with its value for checkboxes and radios sharing a
// name), else its path of tags and indexes from <body>.
function keyOf(el) {
  if (el.id && document.getElementById(el.id) === el) { return "#" + el.id; }
  const name = el.getAttribute("name");
  if (name && /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName)) {
    const same = document.getElementsByName(name);
    if (!isBox(el) && same.length === 1) { return "n:" + name; }
    if (isBox(el)) {
      let n = 0;
      for (const o of same) { if (isBox(o) && o.value === el.value) { n++; } }
      if (n === 1) { return "c:" + JSON.stringify([name, el.value]); }
    }
  }
  const parts = [];
  for (let e = el; e !== document.body; e = e.parentElement) {
    if (!e) { return ""; } // not in <body>
    parts.push(e.localName + "[" + sameTagIndex(e) + "]");
  }
  return "p:" + parts.reverse().join("/");
}

// find is keyOf's inverse (null: not in this page, or not yet).
function find(key) {
  const body = document.body;
  if (!body) { return null; }
  if (key.startsWith("#")) { return document.getElementById(key.slice(1)); }
  if (key.startsWith("n:")) {
    const same = document.getElementsByName(key.slice(2));
    return same.length === 1 ? same[0] : null;
  }
  if (key.startsWith("c:")) {
    let nv;
    try { nv = JSON.parse(key.slice(2)); } catch (e) { return null; }
    for (const o of document.getElementsByName(nv[0])) {
      if (isBox(o) && o.value === nv[1]) { return o; }
    }
    return null;
  }
  if (!key.startsWith("p:")) { return null; }
  let e = body;
  const path = key.slice(2);
  if (path === "") { return e; }
  for (const part of path.split("/")) {
    const m = /^([^[\]/]+)\[(\d+)\]$/.exec(part);
    if (!m) { return null; }
    let i = Number(m[2]), next = null;
    for (let c = e.firstElementChild; c; c = c.nextElementSibling) {
      if (c.localName === m[1] && i-- === 0) { next = c; break; }
    }
    if (!next) { return null; }
    e = next;
  }
  return e;
}

// editableRoot: an element whose contents the user edits (not one inside
// another such element, which its root holds).
function editableRoot(el) {
  return el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable);
}

// textOffset is the length of the text of root before (node, offset).
function textOffset(root, node, offset) {
  const r = document.createRange();
  r.selectNodeContents(root);
  r.setEnd(node, offset);
  return r.toString().length;
}

// textPoint is the (text node, offset) at n characters into root's text.
function textPoint(root, n) {
  const w = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  let last = null;
  for (let t = w.nextNode(); t; t = w.nextNode()) {
    if (n <= t.data.length) { return [t, n]; }
    n -= t.data.length;
    last = t;
  }
  return last ? [last, last.data.length] : [root, root.childNodes.length];
}

function editableSelection(root) {
  const sel = getSelection();
  if (!sel || !sel.rangeCount || !root.contains(sel.anchorNode) || !root.contains(sel.focusNode)) { return null; }
  const a = textOffset(root, sel.anchorNode, sel.anchorOffset);
  const f = textOffset(root, sel.focusNode, sel.focusOffset);
  return {start: Math.min(a, f), end: Math.max(a, f), backward: f < a};
}

function fieldSelection(el) {
  try {
    if (typeof el.selectionStart !== "number") { return null; }
    return {start: el.selectionStart, end: el.selectionEnd, backward: el.selectionDirection === "backward"};
  } catch (e) {
    return null; // types without a selection (email, number) throw
  }
}

// defaultIndex is the option a single select shows when the page loads:
// the last one marked selected, else (a drop-down) the first one enabled.
function defaultIndex(sel) {
  let i = -1;
  for (let k = 0; k < sel.options.length; k++) {
    if (sel.options[k].defaultSelected) { i = k; }
  }
  if (i < 0 && sel.size <= 1) {
    for (let k = 0; k < sel.options.length; k++) {
      if (!sel.options[k].disabled) { return k; }
    }
  }
  return i;
}

// capture reads the form state; limit bounds the characters of keys and
// values (fields beyond are counted in skipped).
function capture(limit) {
  const body = document.body;
  const out = {fields: [], scrolls: [], skipped: 0};
  if (!body) { return out; }
  let used = 0;
  const take = (el, f) => {
    f.key = keyOf(el);
    if (!f.key) { return; }
    const n = f.key.length + (f.value || "").length + (f.values || []).join("").length;
    if (used + n > limit) { out.skipped++; return; }
    used += n;
    out.fields.push(f);
  };
  for (const el of body.querySelectorAll("input, textarea, select")) {
    if (secret.test(el.getAttribute("autocomplete") || "")) { continue; }
    if (el.tagName === "SELECT") {
      const opts = Array.from(el.options);
      if (el.multiple ? opts.some((o) => o.selected !== o.defaultSelected) : el.selectedIndex !== defaultIndex(el)) {
        take(el, {kind: "select", values: opts.filter((o) => o.selected).map((o) => o.value)});
      }
    } else if (el.tagName === "TEXTAREA") {
      if (el.value !== el.defaultValue) { take(el, {kind: "value", value: el.value}); }
    } else if (!skipTypes.has(inputType(el))) {
      if (isBox(el)) {
        if (el.checked !== el.defaultChecked) { take(el, {kind: "checked", checked: el.checked}); }
      } else if (el.value !== el.defaultValue) {
        take(el, {kind: "value", value: el.value});
      }
    }
  }
  for (const el of body.querySelectorAll("[contenteditable]")) {
    if (editableRoot(el)) { take(el, {kind: "editable", value: el.innerHTML}); }
  }
  const a = document.activeElement;
  if (a && a !== body && body.contains(a)) {
    out.focus = keyOf(a);
    const s = a.isContentEditable ? editableSelection(a) : (/^(INPUT|TEXTAREA)$/.test(a.tagName) ? fieldSelection(a) : null);
    if (out.focus && s) { out.selection = s; }
  }
  out.scrollX = window.scrollX;
  out.scrollY = window.scrollY;
  // Scrolled elements: the first 20000 elements are looked at, 200 kept.
  const all = body.getElementsByTagName("*");
  for (let i = 0; i < all.length && i < 20000 && out.scrolls.length < 200; i++) {
    const e = all[i];
    if (e.scrollTop || e.scrollLeft) {
      const key = keyOf(e);
      if (key) { out.scrolls.push({key: key, x: e.scrollLeft, y: e.scrollTop}); }
    }
  }
  return out;
}

// The native value setters: a framework that wraps an element's value
// property (React) then sees the change in the input event.
function setValue(el, v) {
  const proto = el.tagName === "TEXTAREA" ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, "value").set.call(el, v);
}

function fire(el, types) {
  for (const t of types) { el.dispatchEvent(new Event(t, {bubbles: true})); }
}

// restore puts st back once the page has loaded (waiting at most waitMs
// for its load event), and keeps putting back what is not there yet
// (elements the page makes later) for keepMs. Nothing the user changed
// since is overwritten: a field they typed into keeps what they typed, and
// after a click or a key of theirs the focus and caret are theirs; after a
// scroll of theirs, the scroll. Running it again changes nothing already
// restored and fires no event for it. It answers {applied, pending}.
async function restore(st, waitMs, keepMs) {
  if (document.readyState !== "complete") {
    await new Promise((done) => {
      const t = setTimeout(done, waitMs);
      window.addEventListener("load", () => { clearTimeout(t); done(); }, {once: true});
    });
  }
  const g = window[Symbol.for("cloudbrowser.form")] || (window[Symbol.for("cloudbrowser.form")] = {touched: new WeakSet()});
  if (!g.listening) {
    // The user's own input since the restore began (trusted events only:
    // the restore's events are not).
    g.listening = true;
    const mark = (e) => {
      if (!e.isTrusted) { return; }
      g.user = true;
      for (let x = e.target; x && x.nodeType === 1; x = x.parentElement) { g.touched.add(x); }
    };
    for (const type of ["input", "change", "keydown", "mousedown", "paste", "drop", "touchstart"]) {
      window.addEventListener(type, mark, true);
    }
    for (const type of ["wheel", "keydown", "mousedown", "touchmove"]) {
      window.addEventListener(type, (e) => { if (e.isTrusted) { g.scrolled = true; } }, true);
    }
  }
  if (g.stop) { g.stop(); } // an earlier restore's follow-up: this one replaces it

  let applied = 0;
  // field: true when done (restored, equal, or the user's now).
  const field = (f) => {
    const el = find(f.key);
    if (!el) { return false; }
    if (g.touched.has(el)) { return true; }
    switch (f.kind) {
      case "value":
        if (!/^(INPUT|TEXTAREA)$/.test(el.tagName) || isBox(el) || skipTypes.has(inputType(el))) { return true; }
        if (el.value !== f.value) { setValue(el, f.value); fire(el, ["input", "change"]); applied++; }
        return true;
      case "checked":
        if (!isBox(el)) { return true; }
        if (el.checked !== !!f.checked) {
          el.checked = !!f.checked;
          if (el.type === "checkbox" || el.checked) { fire(el, ["input", "change"]); }
          applied++;
        }
        return true;
      case "select": {
        if (el.tagName !== "SELECT") { return true; }
        const want = new Set(f.values || []);
        let changed = false;
        if (el.multiple) {
          for (const o of el.options) {
            if (o.selected !== want.has(o.value)) { o.selected = want.has(o.value); changed = true; }
          }
        } else if (f.values && f.values.length && el.value !== f.values[0]) {
          el.value = f.values[0];
          changed = true;
        }
        if (changed) { fire(el, ["input", "change"]); applied++; }
        return true;
      }
      case "editable":
        if (!el.isContentEditable) { return true; }
        if (el.innerHTML !== f.value) { el.innerHTML = f.value; fire(el, ["input"]); applied++; }
        return true;
    }
    return true;
  };
  const focus = () => {
    if (!st.focus || g.user) { return true; }
    const el = find(st.focus);
    if (!el) { return false; }
    if (document.activeElement !== el) { el.focus({preventScroll: true}); applied++; }
    const s = st.selection;
    if (!s || document.activeElement !== el) { return true; }
    if (el.isContentEditable) {
      const cur = editableSelection(el);
      if (!cur || cur.start !== s.start || cur.end !== s.end || cur.backward !== !!s.backward) {
        const a = textPoint(el, s.backward ? s.end : s.start), f = textPoint(el, s.backward ? s.start : s.end);
        getSelection().setBaseAndExtent(a[0], a[1], f[0], f[1]);
        applied++;
      }
    } else {
      const cur = fieldSelection(el);
      if (cur && (cur.start !== s.start || cur.end !== s.end || cur.backward !== !!s.backward)) {
        el.setSelectionRange(s.start, s.end, s.backward ? "backward" : "forward");
        applied++;
      }
    }
    return true;
  };
  const near = (a, b) => Math.abs(a - b) < 1;
  // scroll: true when there (or the user scrolled since).
  const scroll = (key, x, y) => {
    if (g.scrolled) { return true; }
    const el = key === "" ? null : find(key);
    if (key !== "" && !el) { return false; }
    const at = el ? () => [el.scrollLeft, el.scrollTop] : () => [window.scrollX, window.scrollY];
    let [cx, cy] = at();
    if (!near(cx, x) || !near(cy, y)) {
      (el || window).scrollTo({left: x, top: y, behavior: "instant"});
      [cx, cy] = at();
      applied++;
    }
    return near(cx, x) && near(cy, y);
  };

  let pending = (st.fields || []).map((f) => () => field(f));
  pending.push(focus);
  // Scroll last: values and the caret move what a scroll shows.
  if (st.scrollX || st.scrollY) { pending.push(() => scroll("", st.scrollX || 0, st.scrollY || 0)); }
  for (const s of st.scrolls || []) { pending.push(() => scroll(s.key, s.x || 0, s.y || 0)); }
  const pass = () => { pending = pending.filter((step) => !step()); };
  pass();
  if (pending.length && keepMs > 0) {
    // What is not there yet (the page builds it later, or is not tall
    // enough yet) is tried again as the page changes, for a while.
    const mo = new MutationObserver(() => { pass(); if (!pending.length) { g.stop(); } });
    const t = setTimeout(() => g.stop(), keepMs);
    window.addEventListener("resize", pass);
    g.stop = () => { mo.disconnect(); clearTimeout(t); window.removeEventListener("resize", pass); g.stop = null; };
    mo.observe(document.documentElement, {childList: true, subtree: true, attributes: true, characterData: true});
  }
  return {applied: applied, pending: pending.length};
}
