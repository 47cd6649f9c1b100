// Playwright on a session of a pooled app whose pool signed its browsers in:
// the page is signed in when the client arrives, the client goes on, takes
// a screenshot, intercepts a request of its own, and the egress guard still
// refuses a loopback address. Prints what it saw as JSON.
//   node pooled.cjs <cdp endpoint> <a loopback URL>
const { chromium } = require("playwright-core");

(async () => {
  const [endpoint, loopback] = process.argv.slice(2);
  const out = {};
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 30000 });
  const page = browser.contexts()[0].pages()[0];
  out.title = await page.title();
  out.cookie = (await browser.contexts()[0].cookies()).some((c) => c.name === "demo_session");
  await page.goto("http://pooldemo.app.cloudbrowser.internal/search.html?q=x");
  out.who = await page.textContent("#who");
  out.screenshotBytes = (await page.screenshot()).length;
  await page.route("**/from-the-client", (r) => r.fulfill({ body: "<title>fulfilled</title>", contentType: "text/html" }));
  await page.goto("http://pooldemo.app.cloudbrowser.internal/from-the-client");
  out.routed = await page.title();
  // The guard answers for the site it refuses (an error page of its own).
  try {
    await page.goto(loopback, { timeout: 15000 });
    const title = await page.title();
    out.loopback = title === "page one" ? "reached the site" : "refused: " + title;
  } catch (e) {
    out.loopback = "refused: " + String(e.message).split("\n")[0];
  }
  await browser.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
