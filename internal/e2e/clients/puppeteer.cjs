// Drives a CloudBrowser automation session as a Puppeteer user would
// (connect with browserWSEndpoint, or browserURL for an http:// one), and
// prints what it saw as one JSON line.
//   node puppeteer.cjs <endpoint> <site URL>
const puppeteer = require("puppeteer-core");

(async () => {
  const [endpoint, site] = process.argv.slice(2);
  const out = {};
  const opts = endpoint.startsWith("http") ? { browserURL: endpoint } : { browserWSEndpoint: endpoint };
  // defaultViewport null: the session's own viewport, not Puppeteer's 800x600.
  const browser = await puppeteer.connect({ ...opts, protocolTimeout: 30000, defaultViewport: null });
  out.version = await browser.version();
  const pages = await browser.pages();
  out.pagesAtStart = pages.length;
  const page = pages[0] || (await browser.newPage());
  await page.goto(site + "/one");
  out.title = await page.title();
  out.text = await page.$eval("#msg", (e) => e.textContent);
  out.viewport = await page.evaluate(() => innerWidth + "x" + innerHeight);
  await page.type("#field", "typed by puppeteer");
  out.field = await page.$eval("#field", (e) => e.value);
  out.screenshotBytes = (await page.screenshot()).length;
  out.targets = browser.targets().filter((t) => t.type() === "page").length;
  const second = await browser.newPage();
  await second.goto(site + "/two");
  out.secondTitle = await second.title();
  await second.close();
  const ctx = await browser.createBrowserContext();
  const p3 = await ctx.newPage();
  await p3.goto(site + "/three");
  out.ownContextTitle = await p3.title();
  await ctx.close();
  await browser.disconnect();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
