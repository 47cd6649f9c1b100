// The app's navigation policy holds for an automation client, also with
// its own request interception on: prints what got through as JSON.
//   node policy.cjs <cdp endpoint> <site URL>
const { chromium } = require("playwright-core");

(async () => {
  const [endpoint, site] = process.argv.slice(2);
  const out = {};
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 30000 });
  const page = browser.contexts()[0].pages()[0];
  const tryGoto = async (url) => {
    try {
      await page.goto(url);
      return await page.title();
    } catch (e) {
      return "failed: " + String(e.message).split("\n")[0];
    }
  };
  out.allowed = await tryGoto(site + "/one");
  out.denied = await tryGoto(site + "/denied");
  // The client's own interception, continuing every request: the policy
  // still decides.
  await page.route("**/*", (route) => route.continue());
  out.allowedRouted = await tryGoto(site + "/one");
  out.deniedRouted = await tryGoto(site + "/denied");
  await tryGoto(site + "/one"); // off the error page
  out.fetchDenied = await page.evaluate((u) => fetch(u).then((r) => "fetched " + r.status, (e) => "failed"), site + "/denied-api");
  try {
    await browser.newContext();
    out.newContext = "created";
  } catch (e) {
    out.newContext = "refused";
  }
  await browser.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
