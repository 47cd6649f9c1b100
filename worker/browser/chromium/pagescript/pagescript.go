// Package pagescript holds the scripts the Chromium runtime puts in pages
// and the names of the bindings they report through: the title watcher,
// the clipboard's copies, the desk (print, permissions, focus), the steady caret, the file picker's helpers and
// Load's selector query. They are the runtime's own; a page's bindings
// may not take their names (BindingName).
package pagescript

import (
	"encoding/json"
	"regexp"
	"strconv"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TitleBinding is the page function the title watcher reports through.
// CDP has no event for document.title changes (Target.targetInfoChanged
// lags or never comes), so a tiny script reports them.
const TitleBinding = "__cloudbrowserTitle"

// Title runs in every new document of the top frame and reports the
// title once parsed and whenever <head> changes. It observes only <head>,
// so DOM-heavy pages pay nothing.
const Title = `(() => {
	if (window !== window.top) return;
	const report = window.` + TitleBinding + `;
	if (typeof report !== "function") return;
	let last = null;
	const check = () => {
		const t = document.title;
		if (t !== last) { last = t; report(t); }
	};
	const watch = () => {
		check();
		const head = document.head || document.documentElement;
		if (head) new MutationObserver(check).observe(head, {subtree: true, childList: true, characterData: true});
	};
	if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch, {once: true});
	else watch();
})();`

// CopyBinding is the page function Copy reports through. The script
// takes it off the page's global object, so the page's own scripts cannot
// call it directly.
const CopyBinding = "__cloudbrowserCopy"

// Copy runs in every new document before the page's scripts.
//   - A copy or cut: its capture listener, first on the window, notes the
//     selection (a cut removes it afterwards) and, once the event's
//     listeners ran, reports the text a handler set with setData, or the
//     selection unless a handler cancelled the copy. Password fields copy
//     nothing, as in any browser.
//   - navigator.clipboard.writeText and write (its text/plain item): the
//     text goes out, and the page's promise resolves even where headless
//     Chromium's own clipboard refuses (an unfocused page). A page that is
//     no secure context (plain http, as the app pages' own origin) gets a
//     navigator.clipboard that only writes.
var Copy = `(() => {
	const report = window.` + CopyBinding + `;
	if (typeof report !== "function") return;
	try { delete window.` + CopyBinding + `; } catch (e) {}
	const max = ` + strconv.Itoa(browser.MaxCopyText) + `;
	const send = (t) => {
		if (typeof t !== "string" || t === "") return;
		report(t.length > max ? t.slice(0, max) : t);
	};
	let copying = 0, set = null;
	const setData = DataTransfer.prototype.setData;
	DataTransfer.prototype.setData = function (type, data) {
		if (copying && /^text(\/plain)?$/i.test(String(type))) set = String(data);
		return setData.apply(this, arguments);
	};
	const textField = /^(text|search|url|tel|email|number)$/i;
	const selected = () => {
		const el = document.activeElement;
		if (el && (el.tagName === "TEXTAREA" || (el.tagName === "INPUT" && textField.test(el.type)))) {
			try { return el.value.slice(el.selectionStart, el.selectionEnd); } catch (e) { return ""; }
		}
		if (el && el.tagName === "INPUT") return ""; // a password, or no text
		const s = window.getSelection();
		return s ? s.toString() : "";
	};
	const onCopy = (e) => {
		copying++;
		set = null;
		const sel = selected();
		setTimeout(() => {
			copying--;
			const t = set !== null ? set : (e.defaultPrevented ? "" : sel);
			set = null;
			send(t);
		}, 0);
	};
	window.addEventListener("copy", onCopy, true);
	window.addEventListener("cut", onCopy, true);
	if (!navigator.clipboard) {
		// A page over plain http (the app pages' own origin among them)
		// has no clipboard API; its user's browser, where the text goes,
		// decides. Writing is all it gets.
		const denied = () => Promise.reject(new DOMException("Read permission denied.", "NotAllowedError"));
		const shim = {writeText: () => Promise.resolve(), write: () => Promise.resolve(), readText: denied, read: denied};
		Object.defineProperty(Navigator.prototype, "clipboard", {configurable: true, enumerable: true, get: () => shim});
	}
	const cb = navigator.clipboard;
	const writeText = cb.writeText, write = cb.write;
	cb.writeText = function (t) {
		send(String(t));
		return writeText.call(cb, t).catch(() => undefined);
	};
	if (write) cb.write = function (items) {
		for (const it of Array.from(items || [])) {
			if (it && it.types && it.types.includes("text/plain")) {
				it.getType("text/plain").then((b) => b.text()).then(send, () => {});
			}
		}
		return write.call(cb, items).catch(() => undefined);
	};
})();`

// DeskBinding is the page function Desk reports through; like Copy's, the
// script takes it off the page's global object.
const DeskBinding = "__cloudbrowserDesk"

// Desk runs in every new document before the page's scripts and reports,
// as JSON, what a person's own browser would handle at its desk:
//   - {"print": title}: window.print(), which a headless browser ignores;
//   - {"ask": name}: the page asks for a permission (geolocation,
//     notifications, camera, microphone) that is neither granted nor
//     denied yet. The page's call waits until the worker sets the
//     permission (Browser.setPermission fires the PermissionStatus change
//     event it waits for), then goes to the browser's own API, which
//     grants or refuses by that setting. Asks that cannot wait (no
//     Permissions API) go straight through, and headless Chromium denies
//     them;
//   - {"editable": bool}: whether the focused element takes text, as focus
//     moves, so a phone's keyboard opens only for a text field.
var Desk = `(() => {
	const report = window.` + DeskBinding + `;
	if (typeof report !== "function") return;
	try { delete window.` + DeskBinding + `; } catch (e) {}
	const send = (m) => { try { report(JSON.stringify(m)); } catch (e) {} };
	window.print = function () { send({print: String(document.title || "").slice(0, 200)}); };

	const perms = navigator.permissions;
	const settled = (name) => {
		// Not a secure context: the API refuses by itself, nothing to ask.
		if (!perms || !window.isSecureContext) return Promise.resolve();
		return perms.query({name}).then((st) => {
			if (st.state !== "prompt") return;
			return new Promise((done) => {
				const on = () => { if (st.state !== "prompt") { st.removeEventListener("change", on); done(); } };
				st.addEventListener("change", on);
				send({ask: name});
			});
		}, () => undefined);
	};
	const geo = navigator.geolocation;
	if (geo) {
		const get = geo.getCurrentPosition, watch = geo.watchPosition, clear = geo.clearWatch;
		geo.getCurrentPosition = function (...args) { settled("geolocation").then(() => get.apply(geo, args)); };
		// watchPosition answers its id at once; the real one comes later.
		let next = 0;
		const ids = new Map();
		geo.watchPosition = function (...args) {
			const id = ++next;
			ids.set(id, null);
			settled("geolocation").then(() => { if (ids.has(id)) ids.set(id, watch.apply(geo, args)); });
			return id;
		};
		geo.clearWatch = function (id) {
			const real = ids.get(id);
			ids.delete(id);
			if (real !== null && real !== undefined) clear.call(geo, real);
		};
	}
	if (window.Notification && Notification.requestPermission) {
		const request = Notification.requestPermission;
		Notification.requestPermission = function (cb) {
			return settled("notifications").then(() => request.call(Notification)).then((r) => {
				if (typeof cb === "function") cb(r);
				return r;
			});
		};
	}
	const media = navigator.mediaDevices;
	if (media && media.getUserMedia) {
		const gum = media.getUserMedia;
		media.getUserMedia = function (c) {
			let wait = Promise.resolve();
			if (c && c.video) wait = wait.then(() => settled("camera"));
			if (c && c.audio) wait = wait.then(() => settled("microphone"));
			return wait.then(() => gum.call(media, c));
		};
	}

	const textInput = /^(text|search|url|tel|email|number|password|date|datetime-local|month|time|week)$/i;
	const editable = (el) => {
		if (!el || el.readOnly || el.disabled) return false;
		return el.isContentEditable || el.tagName === "TEXTAREA" || (el.tagName === "INPUT" && textInput.test(el.type || "text"));
	};
	let was = false;
	const focusMoved = () => {
		const el = document.activeElement;
		if (el && (el.tagName === "IFRAME" || el.tagName === "FRAME")) return; // its document reports
		const now = editable(el);
		if (now !== was) { was = now; send({editable: now}); }
	};
	window.addEventListener("focusin", focusMoved, true);
	window.addEventListener("focusout", () => setTimeout(focusMoved, 0), true);
})();`

// SteadyCaret stops the text caret's blinking (CSS caret-animation:
// manual, Chromium 139+) in every document of a browser. Each blink is a
// repaint, and each repaint a whole screencast frame (~100 KiB at
// 1280x720): a viewer reading a page with a focused input got two frames a
// second of nothing new (~1.7 Mbit/s, docs/benchmarks.md "Bytes per
// viewer"). The caret stays visible. The rule is a constructed stylesheet
// adopted from an isolated world: the page's CSP does not apply to it and
// it is not in the page's DOM; a page that sets caret-animation itself
// keeps its own.
const SteadyCaret = `(() => {
	try {
		const s = new CSSStyleSheet();
		s.replaceSync(":root{caret-animation:manual}");
		document.adoptedStyleSheets = [...document.adoptedStyleSheets, s];
	} catch (e) {}
})()`

// SteadyCaretWorld is the isolated world the script runs in.
const SteadyCaretWorld = "cloudbrowser-caret"

// PickerAccept returns an input's accept attribute, a hint shown to a user,
// so a page's megabyte of it goes nowhere.
const PickerAccept = `function() { return String(this.accept || "").slice(0, 1024); }`

// PickerCancel tells the page its picker was dismissed, as Chromium does
// when a user closes the dialog: an intercepted picker is never answered
// otherwise, and a page waiting for change or cancel would wait for good.
const PickerCancel = `function() { this.dispatchEvent(new Event("cancel", {bubbles: true})); }`

// jsIdent matches the binding names pages may have.
var jsIdent = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// BindingName reports whether name may be a page's binding: a JavaScript
// identifier that is none of the runtime's own.
func BindingName(name string) bool {
	return jsIdent.MatchString(name) && name != TitleBinding && name != CopyBinding && name != DeskBinding
}

// Selector is an expression that is true when sel matches an element, and
// the error's message when sel is no valid selector.
func Selector(sel string) string {
	q, _ := json.Marshal(sel)
	return `(() => { try { return document.querySelector(` + string(q) + `) !== null; } catch (e) { return String(e.message); } })()`
}
