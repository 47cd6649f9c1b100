package chromium

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Clipboard out. Headless Chromium's clipboard is its own, in memory, and
// CDP cannot read it; so a script in every document reports what the page
// copies through copyBinding: the selection of a copy or cut (or the text
// the page's handler puts on the event's clipboardData instead), and what
// the page hands navigator.clipboard. Who receives it is the client
// engine's business (only the viewer whose input caused it).

// copyBinding is the page function copyScript reports through. The script
// takes it off the page's global object, so the page's own scripts cannot
// call it directly.
const copyBinding = "__cloudbrowserCopy"

// copyScript runs in every new document before the page's scripts.
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
var copyScript = `(() => {
	const report = window.` + copyBinding + `;
	if (typeof report !== "function") return;
	try { delete window.` + copyBinding + `; } catch (e) {}
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

// copyWatch hands the page's copies to who watches them.
type copyWatch struct {
	mu   sync.Mutex
	subs map[int]func(string)
	next int
}

// OnCopy implements browser.Browser.
func (w *copyWatch) OnCopy(fn func(string)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = map[int]func(string){}
	}
	id := w.next
	w.next++
	w.subs[id] = fn
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
	}
}

// copied delivers one copy; called on the event reader goroutine, so the
// subscribers' fn must not block.
func (w *copyWatch) copied(text string) {
	if len(text) > browser.MaxCopyText {
		// The page counts UTF-16 units, we bytes: cut at a character.
		n := browser.MaxCopyText
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	w.mu.Lock()
	fns := make([]func(string), 0, len(w.subs))
	for _, fn := range w.subs {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(text)
	}
}
