// Package pagescript holds the scripts the Chromium runtime puts in pages
// and the names of the bindings they report through: the title watcher,
// the clipboard's copies, the steady caret, the file picker's helpers and
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
	return jsIdent.MatchString(name) && name != TitleBinding && name != CopyBinding
}

// Selector is an expression that is true when sel matches an element, and
// the error's message when sel is no valid selector.
func Selector(sel string) string {
	q, _ := json.Marshal(sel)
	return `(() => { try { return document.querySelector(` + string(q) + `) !== null; } catch (e) { return String(e.message); } })()`
}
