// The console in a real browser, driven by services/console/e2e (which
// starts the mesh and the console, and checks afterwards what the services
// saw). Every page is checked with axe-core: no serious or critical
// violation. With SCREENSHOTS set to a directory, each page is saved there.
//
// Environment: CONSOLE_URL, KEY_ALPHA, KEY_BETA, KEY_VIEWER, TARGET_URL,
// FAILING_JOB (the display name of alpha's job that dead-lettered),
// CHROMIUM (the browser binary), SCREENSHOTS (optional).
import { createRequire } from "node:module";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const consoleURL = env("CONSOLE_URL");
const target = env("TARGET_URL");
const failingJob = env("FAILING_JOB");
const shots = process.env.SCREENSHOTS || "";
const axePath = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
const timeout = 45_000;

const step = (what) => console.log(`- ${what}`);

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let failed = false;
try {
  // axe is injected as a script: the console's CSP allows only its own, so
  // the test's context bypasses it (the page itself keeps it).
  const context = await browser.newContext({ bypassCSP: true, viewport: { width: 1400, height: 900 } });
  context.setDefaultTimeout(timeout);
  const page = await context.newPage();
  page.on("pageerror", (e) => console.log(`page error: ${e.message}`));

  const axeChecked = [];
  async function check(name) {
    // Colours are measured once transitions (a modal fading in) are over.
    await page.waitForFunction(() => document.getAnimations().every((a) => a.playState !== "running"));
    await page.addScriptTag({ path: axePath });
    const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
    const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
    for (const v of bad) console.log(`axe on ${name}: ${v.impact} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).slice(0, 5).join(", ")})`);
    if (bad.length) throw new Error(`axe: ${bad.length} serious or critical violations on ${name}`);
    axeChecked.push(name);
    if (shots) {
      mkdirSync(shots, { recursive: true });
      await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
    }
  }

  async function signIn(key) {
    await page.goto(consoleURL);
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Overview" }).waitFor();
  }
  async function signOut() {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("API key").waitFor();
  }
  const nav = async (name) => {
    await page.getByRole("navigation", { name: "Pages" }).getByRole("link", { name }).click();
  };

  step("sign in");
  await page.goto(consoleURL);
  await page.getByLabel("API key").waitFor();
  await check("sign-in");
  await page.getByLabel("API key").fill("not-a-key");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("alert").filter({ hasText: "refused" }).waitFor();
  await signIn(env("KEY_ALPHA"));
  await page.getByTestId("identity").filter({ hasText: "admin" }).waitFor();
  await check("overview");

  step("create a job through the form: an invalid cron first");
  await nav("Jobs");
  await page.getByRole("heading", { name: "Jobs" }).waitFor();
  await page.getByRole("button", { name: "New job" }).click();
  const form = page.getByRole("form", { name: "New job" });
  await form.getByLabel("Name").fill("e2e every 2 seconds");
  await form.getByLabel("Labels").fill("e2e=form");
  await form.getByLabel("Cron expression").fill("every now and then");
  await form.getByLabel("Target URL").fill(`${target}/ok`);
  await check("job-form");
  await form.getByRole("button", { name: "Create job" }).click();
  const cron = form.getByLabel("Cron expression");
  await page.waitForFunction((el) => el?.getAttribute("aria-invalid") === "true", await cron.elementHandle());
  const describedBy = await cron.getAttribute("aria-describedby");
  const errorText = await page.evaluate((ids) => ids.split(" ").map((id) => document.getElementById(id)?.textContent ?? "").join(" "), describedBy ?? "");
  console.log(`  the cron field says: ${errorText.trim()}`);
  if (!/cron|field|expression/i.test(errorText)) throw new Error(`no violation shown on the cron field: "${errorText}"`);
  await check("job-form-invalid");

  step("then a valid one");
  await cron.fill("*/2 * * * * *");
  await form.getByRole("button", { name: "Create job" }).click();
  await page.getByRole("heading", { name: "e2e every 2 seconds" }).waitFor();

  step("its first execution appears without a reload");
  const executions = page.getByRole("table", { name: "Executions of the job" });
  await executions.getByRole("link").first().waitFor({ timeout: 60_000 });
  await executions.getByText("succeeded").first().waitFor({ timeout: 60_000 });
  await check("job");
  await page.getByRole("tab", { name: "Slots" }).click();
  await page.getByRole("table", { name: "Slots of the job" }).getByText("fired").first().waitFor();
  await check("job-slots");

  step("open the execution");
  await page.getByRole("tab", { name: "Executions" }).click();
  await executions.getByRole("link").first().click();
  await page.getByRole("heading", { name: /Execution of e2e every 2 seconds/ }).waitFor();
  await page.getByRole("table", { name: "Attempts" }).getByText("succeeded").first().waitFor();
  await page.getByLabel("Response excerpt").filter({ hasText: '"ok"' }).waitFor();
  await check("execution");

  step("search the executions");
  await nav("Executions");
  await page.getByRole("table", { name: "Executions" }).getByRole("link", { name: failingJob }).first().waitFor();
  await check("executions");

  step("search the jobs by name, on the server");
  await nav("Jobs");
  await page.getByRole("link", { name: failingJob }).waitFor();
  await page.getByLabel("Name contains").fill("EVERY 2");
  await page.getByRole("link", { name: failingJob }).waitFor({ state: "detached" });
  await page.getByRole("link", { name: "e2e every 2 seconds" }).waitFor();
  await page.getByLabel("Name contains").fill("");
  await page.getByRole("link", { name: failingJob }).waitFor();

  step("acknowledge the failing job's incident, then resolve it");
  await nav("Incidents and alerts");
  const incidents = page.getByRole("table", { name: "Incidents" });
  await incidents.getByText(failingJob).waitFor();
  await check("incidents");
  await page.getByRole("button", { name: `Acknowledge the incident of ${failingJob}` }).click();
  await incidents.getByText(failingJob).waitFor({ state: "detached" });
  await page.locator("label", { hasText: /^Acknowledged$/ }).click();
  await incidents.getByText(failingJob).waitFor();
  await page.getByRole("button", { name: `Resolve the incident of ${failingJob}` }).click();
  await incidents.getByText(failingJob).waitFor({ state: "detached" });
  await page.locator("label", { hasText: /^Resolved$/ }).click();
  await incidents.getByText(/^resolved by key /).waitFor();
  await page.getByRole("tab", { name: "Rules" }).click();
  await page.getByRole("table", { name: "Alert rules" }).getByText("failing jobs dead-letter").waitFor();
  await check("rules");
  await page.getByRole("tab", { name: "Channels" }).click();
  await page.getByRole("table", { name: "Alert channels" }).getByText("e2e hook").waitFor();
  await check("channels");

  step("redrive the dead letter with a target override");
  await nav("Dead letters");
  const letters = page.getByRole("table", { name: "Dead letters" });
  await letters.getByText(failingJob).waitFor();
  await check("dead-letters");
  await letters.getByRole("button", { name: /^Redrive/ }).first().click();
  const redrive = page.getByRole("form", { name: "Redrive" });
  await redrive.getByRole("switch", { name: "Override the target for this redrive" }).click();
  await redrive.getByLabel("URL").fill(`${target}/ok`);
  await check("redrive");
  await redrive.getByRole("button", { name: "Redrive" }).click();
  await letters.getByText(failingJob).waitFor({ state: "detached" });

  step("the ring");
  await nav("Ring");
  await page.getByRole("table", { name: "Partitions" }).waitFor();
  await check("ring");

  step("a viewer key is offered no change");
  await signOut();
  await signIn(env("KEY_VIEWER"));
  await page.getByTestId("identity").filter({ hasText: "viewer" }).waitFor();
  await nav("Jobs");
  await page.getByRole("link", { name: "e2e every 2 seconds" }).waitFor();
  for (const name of ["New job", /^Pause/, /^Run/, /^Delete/]) {
    if ((await page.getByRole("button", { name }).count()) !== 0) throw new Error(`a viewer is offered ${name}`);
  }
  await nav("Dead letters");
  await page.getByRole("heading", { name: "Dead letters" }).waitFor();
  if ((await page.getByRole("button", { name: /^Redrive|^Purge/ }).count()) !== 0) throw new Error("a viewer is offered a redrive");
  await nav("Incidents and alerts");
  await page.locator("label", { hasText: /^All$/ }).click();
  await page.getByRole("table", { name: "Incidents" }).getByText(failingJob).waitFor();
  if ((await page.getByRole("button", { name: /^Acknowledge|^Resolve/ }).count()) !== 0) throw new Error("a viewer is offered to acknowledge or resolve");

  step("a second namespace's key sees none of it");
  await signOut();
  await signIn(env("KEY_BETA"));
  await nav("Jobs");
  await page.getByText("No jobs.").waitFor();
  await nav("Executions");
  await page.getByText("No execution matches.").waitFor();
  await nav("Dead letters");
  await page.getByText("No dead letter.").waitFor();
  await nav("Incidents and alerts");
  await page.locator("label", { hasText: /^All$/ }).click();
  await page.getByText("No incident.").waitFor();
  console.log(`axe found no serious violation on: ${axeChecked.join(", ")}`);
} catch (e) {
  failed = true;
  console.log(`FAILED: ${e.stack ?? e}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
