// A Playwright automation that downloads a file in a CloudBrowser session
// and fetches it from the session's downloads (docs/automation.md,
// "Downloads"): the file is saved on the worker, not where Playwright
// runs, so it is read over HTTP with the session's ticket.
//   node downloads.cjs <cdpUrl> <site URL>
const { chromium } = require("playwright-core");

(async () => {
  const [cdpUrl, site] = process.argv.slice(2);
  const browser = await chromium.connectOverCDP(cdpUrl, { timeout: 30000 });
  const page = browser.contexts()[0].pages()[0];
  await page.goto(site + "/download");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#dl")]);
  const out = { suggested: download.suggestedFilename() };
  const base = new URL(cdpUrl.replace(/^ws/, "http"));
  const list = new URL(base.pathname + "/downloads" + base.search, base);
  let kept;
  for (let i = 0; i < 100 && !kept; i++) {
    const res = await fetch(list);
    out.listStatus = res.status;
    kept = res.ok && (await res.json()).downloads.find((d) => d.name === out.suggested);
    if (!kept) await new Promise((r) => setTimeout(r, 200));
  }
  if (!kept) throw new Error("the download never appeared in " + list.pathname);
  out.size = kept.size;
  const file = await fetch(new URL(base.pathname + "/downloads/" + kept.id + base.search, base));
  out.fileStatus = file.status;
  out.disposition = file.headers.get("content-disposition");
  out.body = await file.text();
  out.path = list.pathname + "/" + kept.id;
  await browser.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
