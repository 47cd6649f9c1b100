package chromium

// steadyCaretScript stops the text caret's blinking (CSS caret-animation:
// manual, Chromium 139+) in every document of a browser. Each blink is a
// repaint, and each repaint a whole screencast frame (~100 KiB at
// 1280x720): a viewer reading a page with a focused input got two frames a
// second of nothing new (~1.7 Mbit/s, docs/benchmarks.md "Bytes per
// viewer"). The caret stays visible. The rule is a constructed stylesheet
// adopted from an isolated world: the page's CSP does not apply to it and
// it is not in the page's DOM; a page that sets caret-animation itself
// keeps its own.
const steadyCaretScript = `(() => {
	try {
		const s = new CSSStyleSheet();
		s.replaceSync(":root{caret-animation:manual}");
		document.adoptedStyleSheets = [...document.adoptedStyleSheets, s];
	} catch (e) {}
})()`

// steadyCaretWorld is the isolated world the script runs in.
const steadyCaretWorld = "cloudbrowser-caret"
