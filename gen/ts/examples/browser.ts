import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ExecutionStatus, HistoryService } from "@cronmesh/client/history/v1/history_service_pb";
import { JobService } from "@cronmesh/client/registry/v1/job_service_pb";

// A browser speaks the Connect protocol (or gRPC-Web, with
// createGrpcWebTransport) through fetch. The services send no CORS headers:
// serve the page from the same origin as the API, for example behind a
// reverse proxy that routes /cronmesh.registry.v1.JobService/ to the
// registry and /cronmesh.history.v1.HistoryService/ to the history service.
const apiKey = "cm_dev_0000000000000000"; // any key in the page is readable by its users

const auth: Interceptor = (next) => (req) => {
  req.header.set("Authorization", `Bearer ${apiKey}`);
  return next(req);
};
const transport = createConnectTransport({ baseUrl: window.location.origin, interceptors: [auth] });
const jobs = createClient(JobService, transport);
const history = createClient(HistoryService, transport);

const { job } = await jobs.createJob({
  job: {
    displayName: "tick",
    schedule: { kind: { case: "cron", value: "*/10 * * * * *" } },
    target: { kind: { case: "http", value: { url: "https://example.com/hooks/tick" } } },
  },
});
const { executions } = await history.listExecutions({ jobId: job?.id });
for (const e of executions) {
  console.log(e.executionId, ExecutionStatus[e.status], e.responseStatus);
}
