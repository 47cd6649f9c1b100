// Playwright goto + screenshot per second, on a CloudBrowser automation
// session or on a Chromium Playwright launches itself (the baseline of
// scripts/bench/automation.sh). Each round is page.goto(a local page) and
// page.screenshot() (the viewport, PNG); prints one JSON line.
//
//   node playwright-shots.cjs cdp <cdpUrl> [rounds]          # the session's own page
//   node playwright-shots.cjs launch <chromium path> [rounds] # a new context, 1280x720
//
// The page is scripts/bench/apps/reading/index.html (a long article), served
// by this process on 127.0.0.1 (the worker needs --egress-allow 127.0.0.1 to
// reach it); PAGE_URL=... serves another instead. Playwright comes from the
// pinned clients (internal/e2e/clients, scripts/install-clients.sh).
const fs = require("fs");
const http = require("http");
const path = require("path");
const { chromium } = require(path.join(__dirname, "../../internal/e2e/clients/node_modules/playwright-core"));

const WARMUP = 3;

function serve() {
  const body = fs.readFileSync(path.join(__dirname, "apps/reading/index.html"));
  const srv = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store" });
    res.end(body);
  });
  return new Promise((resolve) => srv.listen(0, "127.0.0.1", () => resolve(srv)));
}

(async () => {
  const [mode, target, roundsArg] = process.argv.slice(2);
  const rounds = Number(roundsArg || 30);
  if (!["cdp", "launch"].includes(mode) || !target || !(rounds > 0)) {
    throw new Error("usage: playwright-shots.cjs cdp <cdpUrl> | launch <chromium> [rounds]");
  }
  const srv = process.env.PAGE_URL ? null : await serve();
  const url = process.env.PAGE_URL || `http://127.0.0.1:${srv.address().port}/`;
  let browser, page;
  const t0 = Date.now();
  if (mode === "cdp") {
    browser = await chromium.connectOverCDP(target, { timeout: 30000 });
    page = browser.contexts()[0].pages()[0];
  } else {
    browser = await chromium.launch({
      executablePath: target,
      headless: true,
      args: ["--no-sandbox", "--disable-background-networking"],
    });
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 720 } });
    page = await ctx.newPage();
  }
  const ready = Date.now() - t0;
  const times = [], gotos = [], shots = [];
  let shot;
  const ms = (from) => Number(process.hrtime.bigint() - from) / 1e6;
  for (let i = 0; i < WARMUP + rounds; i++) {
    const s = process.hrtime.bigint();
    await page.goto(`${url}?round=${i}`);
    const g = ms(s);
    shot = await page.screenshot();
    if (i >= WARMUP) times.push(ms(s)), gotos.push(g), shots.push(ms(s) - g);
  }
  const p50 = (v) => +[...v].sort((a, b) => a - b)[Math.floor(v.length / 2)].toFixed(1);
  const total = times.reduce((a, b) => a + b, 0);
  const sorted = [...times].sort((a, b) => a - b);
  const out = {
    mode,
    version: browser.version(),
    rounds,
    readyMs: ready,
    perSecond: +(rounds / (total / 1000)).toFixed(2),
    p50Ms: p50(times),
    gotoP50Ms: p50(gotos),
    screenshotP50Ms: p50(shots),
    maxMs: +sorted[sorted.length - 1].toFixed(1),
    // The PNG's size (IHDR): both sides must shoot the same viewport.
    width: shot.readUInt32BE(16),
    height: shot.readUInt32BE(20),
    shotBytes: shot.length,
  };
  await browser.close(); // a session: ends it (not Chromium)
  if (srv) srv.close();
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  process.exit(1);
});
