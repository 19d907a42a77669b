import { setTimeout as sleep } from "node:timers/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { ExecutionStatus, HistoryService } from "@cronmesh/client/history/v1/history_service_pb";
import { JobService } from "@cronmesh/client/registry/v1/job_service_pb";

// The `make dev` endpoints and development key, unless the environment says otherwise.
const registryUrl = process.env.CRONMESH_REGISTRY_URL ?? "http://127.0.0.1:8081";
const historyUrl = process.env.CRONMESH_HISTORY_URL ?? "http://127.0.0.1:8084";
const apiKey = process.env.CRONMESH_API_KEY ?? "cm_dev_0000000000000000";
const targetUrl = process.env.CRONMESH_TARGET_URL ?? "https://example.com/hooks/tick";

// Every call carries the API key; its namespace scopes what the call sees.
const auth: Interceptor = (next) => (req) => {
  req.header.set("Authorization", `Bearer ${apiKey}`);
  return next(req);
};

// The Connect protocol, here over HTTP/1.1.
const jobs = createClient(
  JobService,
  createConnectTransport({ baseUrl: registryUrl, httpVersion: "1.1", interceptors: [auth] }),
);
// gRPC needs HTTP/2; the services speak it without TLS (h2c) to an http:// URL.
const history = createClient(
  HistoryService,
  createGrpcTransport({ baseUrl: historyUrl, interceptors: [auth] }),
);

const { job } = await jobs.createJob({
  job: {
    displayName: "tick",
    schedule: { kind: { case: "cron", value: "* * * * * *" } }, // every second
    target: { kind: { case: "http", value: { url: targetUrl } } },
  },
});
if (!job) throw new Error("CreateJob answered without a job");
console.log(`created job ${job.id}`);

await sleep(5_000);
const { executions } = await history.listExecutions({ jobId: job.id });
for (const e of executions) {
  const due = e.nominalTime ? timestampDate(e.nominalTime).toISOString() : "-";
  console.log(`${e.executionId} ${due} ${ExecutionStatus[e.status]} ${e.responseStatus}`);
}

await jobs.deleteJob({ id: job.id });
