// The live dashboard in a real browser (Debian's chromium, driven by playwright-core):
//   node dashboard.mjs BASE_URL API_KEY [SCREENSHOT.png]
// Opens BASE_URL/dashboard?key=API_KEY, sends generations, and checks that the page's
// running-requests figure rises above 0 and falls back to 0 as /metrics' does, that the output
// tokens/s, the requests table and the latency percentiles show the load, and that the page
// logged no error. Exit 0 with "OK: ..." on success; 2 when no browser can be started (the
// caller skips); 1 on a failed check. The server must run with --enable-metrics.
import { existsSync } from "node:fs";

// Batch mode (node dashboard.mjs --batch DASHBOARD_URL): the batch run's page while it waits for
// a server: it says so, with no console errors.
const batchMode = process.argv[2] === "--batch";
const [base, key, screenshot] = process.argv.slice(batchMode ? 3 : 2);
const executable = process.env.CHROMIUM ?? ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find(existsSync);
if (!executable) { console.log("SKIP: no chromium"); process.exit(2); }

let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (e) {  // missing, or a node older than it needs
  console.log("SKIP: playwright-core does not load under node " + process.version + ": " + e.message.split("\n")[0]);
  process.exit(2);
}
const fail = (why) => { console.error("FAIL: " + why); process.exit(1); };
const auth = { Authorization: "Bearer " + key };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metricsRunning() {
  const text = await (await fetch(base + "/metrics", { headers: auth })).text();
  const m = text.match(/^sglang:num_running_reqs\{[^}]*\} ([0-9.e+-]+)$/m);
  if (!m) fail("no sglang:num_running_reqs in /metrics");
  return Number(m[1]);
}

let browser;
try {
  browser = await chromium.launch({ executablePath: executable, args: ["--no-sandbox", "--disable-gpu"] });
} catch (e) {
  console.log("SKIP: chromium did not start: " + e.message.split("\n")[0]);
  process.exit(2);
}
const errors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  if (batchMode) {
    await page.goto(base + "/dashboard");
    await page.waitForFunction(() => window.dashboardState && window.dashboardState.polls >= 2, null, { timeout: 20000 });
    const summary = await page.evaluate(() => document.getElementById("summary").innerText);
    if (!summary.includes("paused: no server")) fail("the batch page does not say it waits for a server: " + summary);
    const charts = await page.evaluate(() => document.querySelectorAll("#charts svg path").length);
    if (errors.length) fail("console errors: " + errors.join(" | "));
    console.log("OK: the batch page says: " + summary.replace(/\s+/g, " ") + "; " + charts + " curves; no console errors");
    process.exit(0);
  }
  await page.goto(base + "/dashboard?key=" + encodeURIComponent(key));
  await page.waitForFunction(() => window.dashboardState && window.dashboardState.polls >= 2, null, { timeout: 20000 });
  const shown = () => page.evaluate(() => ({
    polls: window.dashboardState.polls,
    running: window.dashboardState.latest.reqs?.running ?? null,
    output_tps: window.dashboardState.latest.tps?.output ?? null,
    table: Number(document.getElementById("now-requests").textContent),
    rows: document.querySelectorAll("#requests tr").length,
    ttft_p50_ms: window.dashboardState.latest.ttft?.p50 ?? null,
    text: document.body.innerText,
  }));
  if ((await shown()).running !== 0) fail("the page shows requests running before any was sent");

  // The load: 4 clients sending generations of 1900 tokens, one after another, until the page
  // has shown what it must (however fast or slow this host runs them); a prompt marker the page
  // must never show.
  const marker = "PROMPT-MARKER-" + Date.now();
  let loading = true, sent = 0;
  const client = async (i) => {
    while (loading) {
      const r = await fetch(base + "/generate", {
        method: "POST", headers: { ...auth, "Content-Type": "application/json" },
        body: JSON.stringify({ text: marker + " KING " + i + ":", sampling_params: { max_new_tokens: 1900, ignore_eos: true } }),
      });
      const a = await r.json();
      ++sent;
      if (a.meta_info?.completion_tokens !== 1900) fail("a generation did not finish: " + JSON.stringify(a).slice(0, 300));
    }
  };
  const clients = [0, 1, 2, 3].map(client);

  let pageMax = 0, metricsMax = 0, tpsMax = 0, tableMax = 0, rowsMax = 0, shot = false;
  for (let i = 0; i < 600 && !(pageMax > 0 && metricsMax > 0 && tpsMax > 0 && rowsMax > 0 && (shot || !screenshot)); ++i) {
    const s = await shown();
    pageMax = Math.max(pageMax, s.running ?? 0);
    tpsMax = Math.max(tpsMax, s.output_tps ?? 0);
    tableMax = Math.max(tableMax, s.table);
    rowsMax = Math.max(rowsMax, s.rows);
    metricsMax = Math.max(metricsMax, await metricsRunning());
    if (s.text.includes(marker)) fail("the page shows prompt text");
    if (screenshot && !shot && s.running >= 2 && s.output_tps > 0 && s.polls >= 8) {
      await page.screenshot({ path: screenshot, fullPage: true });
      shot = true;
    }
    await sleep(100);
  }
  loading = false;
  await Promise.all(clients);
  if (!(metricsMax > 0)) fail("/metrics never showed a running request");
  if (!(pageMax > 0)) fail("the page never showed a running request (max " + pageMax + ")");
  if (!(tpsMax > 0)) fail("the page never showed output tokens/s");
  if (!(tableMax > 0 && rowsMax > 0)) fail("the requests table stayed empty");

  // Back to idle: /metrics says 0, then the page does (within its next polls).
  let metricsNow = await metricsRunning(), s = await shown();
  for (let i = 0; i < 200 && !(metricsNow === 0 && s.running === 0 && s.table === 0 && s.ttft_p50_ms > 0); ++i) {
    await sleep(100);
    metricsNow = await metricsRunning();
    s = await shown();
  }
  if (metricsNow !== 0) fail("/metrics still shows running requests");
  if (s.running !== 0) fail("the page still shows " + s.running + " running");
  if (s.table !== 0) fail("the requests table still lists " + s.table);
  if (!(s.ttft_p50_ms > 0)) fail("no TTFT percentile after the requests finished");
  if (errors.length) fail("console errors: " + errors.join(" | "));
  console.log(`OK: running rose to ${pageMax} on the page (${metricsMax} in /metrics) and fell to 0; ` +
              `output up to ${tpsMax.toFixed(1)} tok/s; ${tableMax} requests in the table (${sent} sent); TTFT p50 ${s.ttft_p50_ms.toFixed(1)} ms; ` +
              `${s.polls} polls, no console errors` + (shot ? "; screenshot " + screenshot : ""));
} finally {
  await browser.close();
}
