// The dashboard end to end: a real broker, Debian's headless Chromium
// driven by playwright-core. Pushes messages, waits for the table to show
// them, keeps a screenshot ($EPHD_ARTIFACTS/dashboard.png) and resets a
// queue through the page's confirmation; then the shadow policy's panel and
// the cell's. Exits non-zero on any failure.
import { execFileSync, spawn } from "node:child_process";
import assert from "node:assert/strict";
import { mkdirSync, openSync } from "node:fs";
import { chromium } from "playwright-core";

const root = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");
const build = process.env.EPHD_BUILD_DIR || `${root}/build`;
const artifacts = process.env.EPHD_ARTIFACTS || build;
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

// Within $EPHD_TEST_PORTS when it is set, as every broker of the suite.
const freePort = () =>
  Number(execFileSync(`${root}/scripts/free-port`, { encoding: "utf8" }));

async function startBroker(name = "ephd", args = [], env = {}) {
  const port = freePort();
  // The broker's log goes beside the screenshot, not into the test output.
  mkdirSync(artifacts, { recursive: true });
  const log = openSync(`${artifacts}/dashboard-${name}.log`, "w");
  // Small bounds, so a queue at maxLength and a retry drop are quick to
  // make.
  const child = spawn(`${build}/ephd`,
                      ["--listen", `127.0.0.1:${port}`, ...args],
                      { stdio: ["ignore", log, log],
                        env: { ...process.env,
                               QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH: "100",
                               QUEEN_EPHEMERAL_RETRY_LIMIT: "1", ...env } });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${base}/health`)).ok) return { child, base };
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 25));
  }
  child.kill();
  throw new Error("the broker did not start");
}

async function api(base, method, path, body) {
  const res = await fetch(base + path, {
    method, body: body && JSON.stringify(body),
    headers: body ? { "Content-Type": "application/json" } : {},
  });
  return { status: res.status, json: await res.json() };
}

const push = (base, queue, n) => api(base, "POST", "/api/v1/ephemeral/push", {
  queue, messages: Array.from({ length: n }, (_, i) => ({ payload: { i } })),
});

const results = [];
async function check(name, fn) {
  try {
    await fn();
    results.push([name, true]);
    console.log(`ok - ${name}`);
  } catch (e) {
    results.push([name, false]);
    console.log(`not ok - ${name}\n  ${e.stack.split("\n").join("\n  ")}`);
  }
}

const { child, base } = await startBroker();
const browser = await chromium.launch({
  executablePath: chromiumPath,
  // Root in a container has no sandbox; the rest keep Chromium off a
  // network this machine does not have.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 640 } });
const depthCell = (q) => page.locator(`tr[data-queue="${q}"] td:nth-child(3)`);

try {
  await check("the broker serves the page", async () => {
    const res = await fetch(`${base}/dashboard`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type"), /^text\/html/);
  });

  await check("pushed messages appear in the table", async () => {
    assert.equal((await push(base, "orders", 3)).status, 201);
    assert.equal((await push(base, "presence", 2)).status, 201);
    await page.goto(`${base}/dashboard`);
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="orders"] td:nth-child(3)')
        ?.textContent === "3", null, { timeout: 10000 });
    assert.equal(await depthCell("presence").textContent(), "2");
    const tier = page.locator('tr[data-queue="orders"] td:nth-child(2)');
    assert.equal(await tier.textContent(), "implicit");
  });

  await check("the table follows new pushes within seconds", async () => {
    await push(base, "orders", 2);
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="orders"] td:nth-child(3)')
        ?.textContent === "5", null, { timeout: 10000 });
  });

  await check("the cards show the surface, this broker's bytes and queues", async () => {
    await page.waitForFunction(
      () => document.getElementById("surface").textContent === "enabled",
      null, { timeout: 10000 });
    assert.equal(await page.locator("#count").textContent(), "2");
    assert.match(await page.locator("#cell").textContent(), / \/ 256\.0 MiB$/);
    // The broker's own footprint, not the cell's: labelled so.
    assert.match(await page.locator("#cell").locator("xpath=..").textContent(),
                 /this broker's bytes \/ ceiling/);
    // Two ticks of the meter give a rate and a sparkline.
    await page.waitForFunction(
      () => document.querySelectorAll("#ratespark polyline").length === 2,
      null, { timeout: 10000 });
  });

  await check("traffic shows as rates, groups and a parked consumer",
              async () => {
    // A consumer group on presence, and one pop left parked on jobs.
    await api(base, "GET", "/api/v1/ephemeral/pop?queue=presence&group=ui");
    const parked = fetch(`${base}/api/v1/ephemeral/pop?queue=jobs&wait=true` +
                         "&timeout=20000");
    for (let i = 0; i < 8; i++) {
      await push(base, "presence", 20);
      await api(base, "GET",
                "/api/v1/ephemeral/pop?queue=presence&group=ui&batch=15" +
                "&autoAck=true");
      await page.waitForTimeout(400);
    }
    await page.waitForFunction(
      () => document.getElementById("parked").textContent === "1" &&
        document.getElementById("rates").textContent !== "0 / 0",
      null, { timeout: 10000 });
    const groups = page.locator('tr[data-queue="presence"] td:nth-child(7)');
    assert.equal(await groups.textContent(), "1");
    // Parked consumers per queue, beside the card's total.
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="jobs"] td:nth-child(8)')
        ?.textContent === "1", null, { timeout: 10000 });
    assert.equal(await page.locator('tr[data-queue="presence"] td:nth-child(8)')
      .textContent(), "0");
    await push(base, "jobs", 1); // answers the parked pop
    assert.equal((await parked).status, 200);
  });

  // The table's view ------------------------------------------------------
  const shownQueues = () => page.$$eval("#queues tr",
                                        (rows) => rows.map((r) => r.dataset.queue));

  await check("filter, sort by depth and by drops, names by their numbers",
              async () => {
    await push(base, "q10", 4);
    await push(base, "q9", 2);
    await push(base, "q2", 1);
    // A failed delivery past retryLimit 1 drops q2's message: a drop.
    const m = await api(base, "GET", "/api/v1/ephemeral/pop?queue=q2&group=g");
    await api(base, "POST", "/api/v1/ephemeral/ack", { queue: "q2", group: "g",
      acks: [{ id: m.json.messages[0].id, status: "failed" }] });
    await page.fill("#filter", "q");
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="q2"] td:nth-child(11)')
        ?.textContent === "1", null, { timeout: 10000 });
    assert.deepEqual(await shownQueues(), ["q2", "q9", "q10"]);
    assert.match(await page.locator("#shown").textContent(), /^3 of \d+ shown$/);
    await page.selectOption("#sort", "depth");
    assert.deepEqual(await shownQueues(), ["q10", "q9", "q2"]);
    await page.selectOption("#sort", "drops");
    assert.equal((await shownQueues())[0], "q2");
    assert.match(page.url(), /\?q=q&sort=drops$/);
    await page.fill("#filter", "q1");
    assert.deepEqual(await shownQueues(), ["q10"]);
    // It holds through the next refresh.
    await page.waitForTimeout(1200);
    assert.deepEqual(await shownQueues(), ["q10"]);
    await page.fill("#filter", "");
    await page.selectOption("#sort", "name");
    assert.equal(new URL(page.url()).search, "");
  });

  await check("the options in force, and a queue at its maxLength",
              async () => {
    assert.equal((await push(base, "full", 100)).status, 201);
    const opts = page.locator('tr[data-queue="full"] td.opts');
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="full"] td.opts .at-bound')
        ?.textContent.trim() === "at maxLength", null, { timeout: 10000 });
    assert.match(await opts.textContent(),
                 /≤100 msgs · ≤16\.0 MiB · reject · lease 30 s · retry 1$/);
    assert.equal(await page.locator('tr[data-queue="q9"] .at-bound').count(), 0);
  });

  await check("the queue table fits a 1280-pixel window, delete included",
              async () => {
    // A wide row: a long name, at its bound (this broker has no database
    // to declare a ttl with).
    const wide = "orders.eu-west-1.checkout-priority";
    assert.equal((await push(base, wide, 100)).status, 201);
    await page.waitForFunction(
      (q) => document.querySelector(`tr[data-queue="${q}"] .at-bound`),
      wide, { timeout: 10000 });
    const fit = await page.evaluate(() => ({
      width: window.innerWidth,
      scroll: document.documentElement.scrollWidth,
      right: Math.max(...[...document.querySelectorAll("#queues .danger")]
        .map((b) => b.getBoundingClientRect().right)),
    }));
    assert.equal(fit.width, 1280);
    assert.ok(fit.scroll <= fit.width, `the page scrolls: ${fit.scroll} px`);
    assert.ok(fit.right <= fit.width, `delete ends at ${fit.right} px`);
  });

  await check("a screenshot of the real data is kept", async () => {
    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: `${artifacts}/dashboard.png`,
                            fullPage: true });
    console.log(`  screenshot: ${artifacts}/dashboard.png`);
  });

  await check("cancelling the confirmation drops nothing", async () => {
    await page.locator('tr[data-queue="orders"] button', { hasText: "reset" })
      .click();
    await page.locator("#confirm").getByText("Cancel").click();
    await page.waitForTimeout(1500);
    const d = await api(base, "GET", "/api/v1/ephemeral/queues/orders/depth");
    assert.equal(d.json.pending, 5);
  });

  await check("reset through the page, after a confirmation that restates " +
              "the loss contract", async () => {
    await page.locator('tr[data-queue="orders"] button', { hasText: "reset" })
      .click();
    const dialog = page.locator("#confirm");
    assert.ok(await dialog.isVisible());
    assert.match(await dialog.textContent(),
                 /memory only: what this drops is gone/);
    assert.match(await dialog.textContent(), /Drops all 5 message/);
    await dialog.getByText("Confirm").click();
    await page.waitForFunction(
      () => document.querySelector('tr[data-queue="orders"] td:nth-child(3)')
        ?.textContent === "0", null, { timeout: 10000 });
    const d = await api(base, "GET", "/api/v1/ephemeral/queues/orders/depth");
    assert.equal(d.json.pending, 0);
    // Another queue keeps what it holds (the listing's depth: its messages
    // are leased, which the depth read's pending does not count).
    const list = await api(base, "GET", "/api/v1/ephemeral/queues");
    const other = list.json.queues.find((q) => q.queue === "presence");
    assert.ok(other.depth > 0);
  });

  await check("the cell panel shows a cell of one", async () => {
    await page.waitForFunction(
      () => document.querySelectorAll("#members tr").length === 1,
      null, { timeout: 10000 });
    const row = page.locator("#members tr");
    assert.equal(await row.getAttribute("class"), "self");
    assert.equal(await row.locator("td:nth-child(4)").textContent(), "live");
    const { json } = await api(base, "GET", "/api/v1/system/cell");
    assert.equal(await row.getAttribute("data-member"), json.self.id);
    assert.match(await page.locator("#cellsummary").textContent(),
                 new RegExp(`^1 live member · owns ${json.partitions.owned} ` +
                            `of ${json.partitions.held} partitions`));
  });

  await check("a paused surface shows as paused, and keeps its table live",
              async () => {
    const asked = [];
    page.on("request", (r) => asked.push(new URL(r.url()).pathname));
    await api(base, "POST", "/api/v1/system/ephemeral",
              { enabled: false, reason: "maintenance" });
    await page.waitForFunction(
      () => document.getElementById("surface").textContent === "paused",
      null, { timeout: 10000 });
    await page.waitForTimeout(1200);
    // The family's listing refuses; the operator's answers, and the page
    // says nothing is wrong with the table.
    assert.ok(asked.includes("/api/v1/system/queues"));
    assert.equal(await page.locator("#error").textContent(), "");
    assert.equal(await depthCell("q10").textContent(), "4");
    assert.ok((await shownQueues()).length >= 6);
    await api(base, "POST", "/api/v1/system/ephemeral", { enabled: true });
  });

  await check("the tenant, filter and sort come from the page's URL",
              async () => {
    const tenant = "00000000-0000-0000-0000-000000000001";
    await page.goto(`${base}/dashboard?tenant=${tenant}&q=q&sort=depth`);
    assert.equal(await page.locator("#tenant").inputValue(), tenant);
    await page.waitForFunction(
      () => document.querySelectorAll("#queues tr").length === 3, null,
      { timeout: 10000 });
    assert.deepEqual(await shownQueues(), ["q10", "q9", "q2"]);
    await page.fill("#tenant", "abababab-abab-abab-abab-abababababab");
    await page.locator("#tenant").dispatchEvent("change");
    assert.match(page.url(),
                 /\?tenant=abababab-abab-abab-abab-abababababab&q=q&sort=depth$/);
  });
} finally {
  child.kill();
}

// The shadow panel: plan-tiers live, a far stricter candidate loaded as its
// shadow through the route, and pushes the candidate would refuse.
const shadowed = [];
try {
  await check("the shadow panel shows the candidate's disagreements",
              async () => {
    shadowed.push(await startBroker("shadow",
      ["--policy-dir", `${root}/examples/policies/plan-tiers`]));
    const { base } = shadowed[0];
    await page.goto(`${base}/dashboard`);
    await page.waitForFunction(
      () => document.getElementById("shadowsummary").textContent ===
        "no shadow policy loaded", null, { timeout: 10000 });
    assert.ok(await page.locator("#shadowtables").isHidden());
    const dir = `${root}/spec/e2e/policies/shadow-tight`;
    const loaded = await api(base, "POST", "/api/v1/system/policy/shadow",
                             { dir });
    assert.equal(loaded.status, 200, JSON.stringify(loaded.json));
    // Served live, all five; the candidate's burst of two refuses three.
    for (let i = 0; i < 5; i++)
      assert.equal((await push(base, "orders", 1)).status, 201);
    await page.waitForFunction(
      () => [...document.querySelectorAll("#shadowsamples tr")].length === 3,
      null, { timeout: 10000 });
    const rows = (id) => page.$$eval(`#${id} tr`, (trs) =>
      trs.map((tr) => [...tr.children].map((td) => td.textContent)));
    const pairs = await rows("shadowpairs");
    assert.deepEqual(pairs[0], ["pass", "rate_limited", "3"]);
    assert.ok(pairs.some(([l, s, n]) => l === "pass" && s === "pass" &&
                         Number(n) >= 2));
    assert.deepEqual(await rows("shadowtenants"),
                     [["00000000-0000-0000-0000-000000000001", "3"]]);
    for (const r of await rows("shadowsamples"))
      assert.deepEqual(r.slice(1),
        ["push", "00000000-0000-0000-0000-000000000001", "pass",
         "rate_limited", "rate"]);
    const summary = await page.locator("#shadowsummary").textContent();
    assert.match(summary, new RegExp(`^shadow-tight v1 from ${dir} · ` +
                                     "3 of \\d+ decisions differ · since "));
    assert.equal(await page.locator("#shadowsummary")
      .getAttribute("data-state"), "running");
    await page.screenshot({ path: `${artifacts}/dashboard-shadow.png`,
                            fullPage: true });
    // Removed, the panel says so again.
    assert.equal((await api(base, "DELETE", "/api/v1/system/policy/shadow"))
      .status, 200);
    await page.waitForFunction(
      () => document.getElementById("shadowsummary").textContent ===
        "no shadow policy loaded", null, { timeout: 10000 });
  });

  await check("a shadow whose hook fails shows as disabled, and why",
              async () => {
    const { base } = shadowed[0];
    const dir = `${root}/spec/e2e/policies/breaks-mid-traffic`;
    assert.equal((await api(base, "POST", "/api/v1/system/policy/shadow",
                            { dir })).status, 200);
    for (let i = 0; i < 5; i++)
      assert.equal((await push(base, "orders", 1)).status, 201);
    await page.waitForFunction(
      () => document.getElementById("shadowsummary").dataset.state ===
        "disabled", null, { timeout: 10000 });
    const summary = page.locator("#shadowsummary");
    assert.match(await summary.textContent(),
                 /^breaks-mid-traffic v1 .* · disabled: its cost hook failed \(.*the candidate broke\)$/);
    assert.equal(await summary.getAttribute("class"), "paused");
  });
} finally {
  for (const c of shadowed) c.child.kill();
}

// Two brokers on the suite's private PostgreSQL (the pg fixture), one cell:
// each one's panel lists both, live, itself marked, and the partitions it
// owns of those it holds.
const pgDir = process.env.EPHD_TEST_PG_DIR;
const cell = [];
try {
  await check("the cell panel shows every member, live, and what it owns",
              async () => {
    assert.ok(pgDir, "EPHD_TEST_PG_DIR names the suite's PostgreSQL");
    const url = execFileSync(`${root}/scripts/pg.sh`, ["url", pgDir],
                             { encoding: "utf8" }).trim();
    const env = { QUEEN_EPHEMERAL_MEMBER_TTL_MS: "400",
                  QUEEN_EPHEMERAL_CELL_TOKEN: "dashboard-spec-cell-token-01" };
    for (const name of ["cell-a", "cell-b"])
      cell.push(await startBroker(name, ["--database-url", url], env));
    const [a, b] = cell.map((c) => c.base);
    // Both see both before a relays anything.
    for (const base of [a, b])
      for (let t = 0; (await api(base, "GET", "/api/v1/system/cell")).json
             .live !== 2; t++) {
        assert.ok(t < 200, "the cell did not settle");
        await new Promise((r) => setTimeout(r, 50));
      }
    for (let i = 0; i < 12; i++)
      assert.equal((await api(a, "POST", "/api/v1/ephemeral/push", {
        queue: "rooms", partition: `room-${i}`, messages: [{ payload: i }],
      })).status, 201);
    await page.goto(`${b}/dashboard`);
    await page.waitForFunction(
      () => [...document.querySelectorAll("#members tr td:nth-child(4)")]
        .filter((td) => td.textContent === "live").length === 2,
      null, { timeout: 10000 });
    const view = (await api(b, "GET", "/api/v1/system/cell")).json;
    assert.equal(view.live, 2);
    const self = page.locator("#members tr.self");
    assert.equal(await self.getAttribute("data-member"), view.self.id);
    assert.equal(await self.locator("td:nth-child(2)").textContent(),
                 view.self.address);
    // b holds only what it owns (a relayed the rest to it), some of 12.
    assert.ok(view.partitions.owned > 0 && view.partitions.owned < 12);
    await page.waitForFunction(
      (owned) => document.getElementById("cellsummary").textContent
        .startsWith(`2 live members · owns ${owned} of ${owned} partitions`),
      view.partitions.owned, { timeout: 10000 });
    await page.screenshot({ path: `${artifacts}/dashboard-cell.png`,
                            fullPage: true });
  });
} finally {
  await browser.close();
  for (const c of cell) c.child.kill();
}

const failed = results.filter(([, ok]) => !ok).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
