// An automation that pauses while a person takes its browser over: it
// listens on Playwright's browser CDP session for CloudBrowser's takeover
// and handback events (docs/automation.md, "Live view and takeover").
// Prints {"ready":true} once listening, then one JSON line at the end.
//   node takeover.cjs <endpoint> <unused>
const { chromium } = require("playwright-core");

(async () => {
  const [endpoint] = process.argv.slice(2);
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 30000 });
  const cdp = await browser.newBrowserCDPSession();
  const event = (name) => new Promise((resolve) => cdp.once(name, resolve));
  const took = event("CloudBrowser.takeover");
  const page = browser.contexts()[0].pages()[0];
  const out = { titleBefore: await page.title() };
  console.log(JSON.stringify({ ready: true }));
  out.takeover = await took;
  const back = event("CloudBrowser.handback");
  out.handback = await back; // the automation waits for the person here
  out.titleAfter = await page.title();
  await cdp.detach();
  await browser.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
