// The package against a running mesh: the Go test
// services/devstack/e2e (TestNodeClient) starts the mesh and a webhook target,
// builds this package and runs this file with the endpoints in the
// environment. Every import of the package goes through its own name, so
// the package's exports are what is tested, as a user would import them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import {
  ExecutionStatus,
  HistoryService,
  type Execution,
} from "@cronmesh/client/history/v1/history_service_pb";
import { JobService } from "@cronmesh/client/registry/v1/job_service_pb";

/** env returns a required environment variable; the Go test sets them all. */
function env(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run this test through services/devstack/e2e (TestNodeClient)`);
  }
  return value;
}

const registryUrl = env("CRONMESH_REGISTRY_URL");
const historyUrl = env("CRONMESH_HISTORY_URL");
const apiKey = env("CRONMESH_API_KEY");
const targetUrl = env("CRONMESH_TARGET_URL");
// Optional: where to write what the Go test checks at the target.
const resultPath = process.env.CRONMESH_TEST_RESULT;

/** The package root (dist-test/test/ is two levels below it). */
const packageRoot = fileURLToPath(new URL("../../", import.meta.url));

function bearer(key: string): Interceptor {
  return (next) => (req) => {
    req.header.set("Authorization", `Bearer ${key}`);
    return next(req);
  };
}

function connectTransport(baseUrl: string, key: string): Transport {
  return createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [bearer(key)] });
}

/** gRPC over HTTP/2 with prior knowledge: the services speak h2c. */
function grpcTransport(baseUrl: string, key: string): Transport {
  return createGrpcTransport({ baseUrl, interceptors: [bearer(key)] });
}

function describeExecutions(executions: Execution[]): string {
  if (executions.length === 0) return "none";
  return executions.map((e) => `${e.executionId} ${ExecutionStatus[e.status]} ${e.reason}`).join("; ");
}

// How long a job firing every second may take to show a succeeded execution
// in the history: the trigger picks the job up from the registry's event,
// fires, the dispatcher delivers and history ingests. Seconds normally;
// bounded so that a broken mesh fails the test instead of hanging it.
const historyDeadlineMs = 30_000;

test("creates a job over Connect, finds its succeeded execution in the history, reads both over gRPC", async (t) => {
  const jobs = createClient(JobService, connectTransport(registryUrl, apiKey));
  const history = createClient(HistoryService, connectTransport(historyUrl, apiKey));

  const { job } = await jobs.createJob({
    job: {
      displayName: "node client test",
      labels: { suite: "node" },
      schedule: { kind: { case: "cron", value: "* * * * * *" } },
      target: { kind: { case: "http", value: { url: `${targetUrl}/hook` } } },
    },
  });
  assert.ok(job, "CreateJob over Connect answered without a job");
  assert.match(job.id, /^[0-9a-f-]{36}$/, `CreateJob returned job id ${JSON.stringify(job.id)}, want a UUID`);
  assert.equal(job.displayName, "node client test", "CreateJob echoes the display name");
  assert.equal(job.schedule?.kind.case, "cron", "CreateJob echoes a cron schedule");
  assert.equal(job.schedule?.kind.value, "* * * * * *", "CreateJob echoes the cron expression");
  assert.match(
    job.target?.kind.case === "http" ? job.target.kind.value.signingSecret : "",
    /^whsec_/,
    "CreateJob returns the generated signing secret once",
  );
  t.after(() => jobs.deleteJob({ id: job.id }));

  let succeeded: Execution | undefined;
  let seen: Execution[] = [];
  let lastError: unknown;
  const deadline = Date.now() + historyDeadlineMs;
  while (!succeeded && Date.now() < deadline) {
    try {
      const resp = await history.listExecutions(
        { jobId: job.id, statuses: [ExecutionStatus.SUCCEEDED] },
        { timeoutMs: 5_000 },
      );
      succeeded = resp.executions[0];
    } catch (err) {
      lastError = err;
    }
    if (!succeeded) await sleep(250);
  }
  if (!succeeded) {
    try {
      seen = (await history.listExecutions({ jobId: job.id }, { timeoutMs: 5_000 })).executions;
    } catch (err) {
      lastError ??= err;
    }
    assert.fail(
      `no SUCCEEDED execution of job ${job.id} in the history within ${historyDeadlineMs} ms; ` +
        `its executions: ${describeExecutions(seen)}; last error: ${String(lastError ?? "none")}`,
    );
  }
  assert.equal(succeeded.jobId, job.id, "ListExecutions(job_id) returned another job's execution");
  assert.equal(
    succeeded.status,
    ExecutionStatus.SUCCEEDED,
    `execution ${succeeded.executionId} is ${ExecutionStatus[succeeded.status]}, want SUCCEEDED`,
  );
  assert.equal(succeeded.jobDisplayName, "node client test", "the execution carries the job's display name");
  assert.ok(
    succeeded.responseStatus >= 200 && succeeded.responseStatus < 300,
    `execution ${succeeded.executionId} recorded response status ${succeeded.responseStatus}, want 2xx`,
  );
  assert.match(succeeded.traceId, /^[0-9a-f]{32}$/, "the execution carries its trace id");

  // The same job and execution over gRPC.
  const jobsGrpc = createClient(JobService, grpcTransport(registryUrl, apiKey));
  const got = await jobsGrpc.getJob({ id: job.id, nextRunCount: 3 }, { timeoutMs: 10_000 });
  assert.equal(got.job?.id, job.id, "GetJob over gRPC returned another job");
  assert.equal(got.job?.displayName, "node client test", "GetJob over gRPC returns the display name");
  assert.equal(got.nextRunTimes.length, 3, "GetJob over gRPC returns the 3 next run times asked for");
  const historyGrpc = createClient(HistoryService, grpcTransport(historyUrl, apiKey));
  const exec = await historyGrpc.getExecution({ executionId: succeeded.executionId }, { timeoutMs: 10_000 });
  assert.equal(exec.execution?.executionId, succeeded.executionId, "GetExecution over gRPC returned another execution");
  assert.equal(exec.execution?.jobId, job.id, "GetExecution over gRPC: the execution's job id");
  assert.equal(
    exec.execution?.status,
    ExecutionStatus.SUCCEEDED,
    `GetExecution over gRPC: status ${ExecutionStatus[exec.execution?.status ?? 0]}, want SUCCEEDED`,
  );
  assert.ok(
    exec.attempts.some((a) => a.status === ExecutionStatus.SUCCEEDED),
    `GetExecution over gRPC: no SUCCEEDED attempt among ${exec.attempts.map((a) => ExecutionStatus[a.status]).join(", ")}`,
  );

  if (resultPath) {
    await writeFile(resultPath, JSON.stringify({ jobId: job.id, executionId: succeeded.executionId }));
  }
});

test("refuses a wrong API key with UNAUTHENTICATED over Connect and gRPC", async () => {
  for (const [protocol, transport] of [
    ["Connect", connectTransport(registryUrl, `${apiKey}-wrong`)],
    ["gRPC", grpcTransport(registryUrl, `${apiKey}-wrong`)],
  ] as const) {
    const jobs = createClient(JobService, transport);
    await assert.rejects(
      jobs.listJobs({}, { timeoutMs: 10_000 }),
      (err: unknown) => {
        const ce = ConnectError.from(err);
        assert.equal(ce.code, Code.Unauthenticated, `${protocol}: ListJobs with a wrong key failed with ${ce.message}`);
        return true;
      },
      `${protocol}: ListJobs with a wrong key succeeded`,
    );
  }
});

test("the README's Node example is examples/node.ts and runs against the mesh", async () => {
  const readme = await readFile(`${packageRoot}README.md`, "utf8");
  const example = await readFile(`${packageRoot}examples/node.ts`, "utf8");
  assert.ok(
    readme.includes("```ts\n" + example + "```"),
    "gen/ts/README.md does not show examples/node.ts verbatim in a ```ts block",
  );
  const { stdout } = await promisify(execFile)(process.execPath, [`${packageRoot}dist-test/examples/node.js`], {
    env: { ...process.env, CRONMESH_TARGET_URL: `${targetUrl}/example` },
    timeout: 60_000,
  });
  assert.match(stdout, /^created job [0-9a-f-]{36}$/m, `the example printed:\n${stdout}`);
});

test("every generated module is importable through the package's exports", async () => {
  const dist = `${packageRoot}dist/cronmesh/`;
  const modules = (await readdir(dist, { recursive: true }))
    .filter((f) => f.endsWith("_pb.js"))
    .map((f) => f.slice(0, -".js".length));
  assert.ok(modules.length > 0, `no generated modules under ${dist}: run npm run build first`);
  for (const m of modules) {
    const mod: Record<string, unknown> = await import(`@cronmesh/client/${m}`);
    assert.ok(
      Object.keys(mod).some((k) => k.startsWith("file_")),
      `@cronmesh/client/${m} exports no file descriptor`,
    );
  }
});
