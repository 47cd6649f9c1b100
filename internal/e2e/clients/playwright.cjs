// Drives a CloudBrowser automation session as a Playwright user would
// (connectOverCDP), and prints what it saw as one JSON line.
//   node playwright.cjs <cdp endpoint: ws://… or http://…> <site URL>
const { chromium } = require("playwright-core");

(async () => {
  const [endpoint, site] = process.argv.slice(2);
  const out = {};
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 30000 });
  out.version = browser.version();
  const ctx = browser.contexts()[0];
  out.contexts = browser.contexts().length;
  out.pagesAtStart = ctx.pages().length;
  const page = ctx.pages()[0] || (await ctx.newPage());
  await page.goto(site + "/one");
  out.title = await page.title();
  out.text = await page.textContent("#msg");
  await page.fill("#field", "typed by playwright");
  out.field = await page.inputValue("#field");
  out.screenshotBytes = (await page.screenshot()).length;
  // Its own interception, alongside the worker's.
  await page.route("**/intercepted", (route) => route.fulfill({ body: "<title>fulfilled by the client</title>", contentType: "text/html" }));
  await page.goto(site + "/intercepted");
  out.routed = await page.title();
  const second = await ctx.newPage();
  await second.goto(site + "/two");
  out.secondTitle = await second.title();
  out.pagesAfter = ctx.pages().length;
  await second.close();
  const own = await browser.newContext();
  const p3 = await own.newPage();
  await p3.goto(site + "/three");
  out.ownContextTitle = await p3.title();
  out.contextsWithOwn = browser.contexts().length;
  await own.close();
  await browser.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
