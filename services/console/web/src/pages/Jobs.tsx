import { Badge, Button, Group, Modal, SegmentedControl, Stack, Table, Text, TextInput, Title, Tooltip } from "@mantine/core";
import type { Job } from "@cronmesh/client/registry/v1/job_pb";
import { useDebouncedValue } from "@mantine/hooks";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { useNavigate } from "react-router";
import { canEdit } from "../api";
import { DataTable, ErrorAlert, JobLink, Pager, StatusBadge, usePage } from "../components";
import { labelsText, parseLabels, when } from "../format";
import { useSession } from "../session";
import { JobForm } from "./JobForm";

const pageSize = 25;

export function scheduleText(job: Job): string {
  const k = job.schedule?.kind;
  const tz = job.schedule?.timeZone ? ` (${job.schedule.timeZone})` : "";
  switch (k?.case) {
    case "cron":
      return `cron ${k.value}${tz}`;
    case "interval":
      return `every ${Number(k.value.every?.seconds ?? 0)}s`;
    case "at":
      return `once at ${when(k.value)}`;
    case "after":
      return `once after ${Number(k.value.seconds)}s`;
    default:
      return "—";
  }
}

/** NextRun asks the registry for the job's next run. */
function NextRun({ job }: { job: Job }) {
  const { clients } = useSession();
  const q = useQuery({
    queryKey: ["jobs", job.id, "next"],
    queryFn: () => clients.jobs.getJob({ id: job.id, nextRunCount: 1 }),
    enabled: !job.paused,
    refetchInterval: 15_000,
  });
  if (job.paused) return <Text size="sm">paused</Text>;
  return <Text size="sm">{when(q.data?.nextRunTimes[0])}</Text>;
}

/** Outcomes shows the last status and the recent outcomes at a glance. */
function Outcomes({ job }: { job: Job }) {
  const { clients } = useSession();
  const q = useQuery({
    queryKey: ["executions", { jobId: job.id, recent: true }],
    queryFn: () => clients.history.listExecutions({ jobId: job.id, pageSize: 10 }),
    refetchInterval: 5_000,
  });
  const list = q.data?.executions ?? [];
  const last = list[0];
  if (!last) return <Text size="sm">no run yet</Text>;
  return (
    <Group gap={4} wrap="nowrap">
      <StatusBadge status={last.status} />
      <Text size="xs" aria-label="recent outcomes, newest first">
        {list.map((e) => ({ 2: "✓", 4: "✗", 5: "✗", 7: "·", 1: "…", 3: "↻", 6: "−" })[e.status as number] ?? "?").join("")}
      </Text>
    </Group>
  );
}

function Actions({ job }: { job: Job }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const done = () => queryClient.invalidateQueries({ queryKey: ["jobs"] });
  const pause = useMutation({ mutationFn: () => clients.jobs.pauseJob({ id: job.id, reason: "paused from the console" }), onSuccess: done });
  const resume = useMutation({ mutationFn: () => clients.jobs.resumeJob({ id: job.id }), onSuccess: done });
  const run = useMutation({ mutationFn: () => clients.jobs.runJob({ id: job.id, requestId: crypto.randomUUID() }), onSuccess: () => queryClient.invalidateQueries({ queryKey: ["executions"] }) });
  const del = useMutation({ mutationFn: () => clients.jobs.deleteJob({ id: job.id, etag: job.etag }), onSuccess: done });
  const name = job.displayName || job.id;
  const failed = pause.error ?? resume.error ?? run.error ?? del.error;
  return (
    <Stack gap={4}>
      <Group gap={4} wrap="nowrap">
        {job.paused ? (
          <Button size="compact-xs" variant="default" onClick={() => resume.mutate()} loading={resume.isPending} aria-label={`Resume ${name}`}>
            Resume
          </Button>
        ) : (
          <Button size="compact-xs" variant="default" onClick={() => pause.mutate()} loading={pause.isPending} aria-label={`Pause ${name}`}>
            Pause
          </Button>
        )}
        <Button size="compact-xs" variant="default" onClick={() => run.mutate()} loading={run.isPending} aria-label={`Run now: ${name}`}>
          Run now
        </Button>
        <Button
          size="compact-xs"
          color="red.9"
          variant="outline"
          loading={del.isPending}
          aria-label={`Delete ${name}`}
          onClick={() => window.confirm(`Delete the job ${name}? It fires nothing afterwards.`) && del.mutate()}
        >
          Delete
        </Button>
      </Group>
      {failed ? <ErrorAlert error={failed} /> : null}
    </Stack>
  );
}

export function Jobs() {
  const { clients, identity } = useSession();
  const navigate = useNavigate();
  const [search, setSearch] = useState("");
  // The registry searches the names (ListJobs name_contains): a call per
  // pause in typing, not per key.
  const [nameContains] = useDebouncedValue(search.trim(), 300);
  const [labels, setLabels] = useState("");
  const [paused, setPaused] = useState("all");
  const [creating, setCreating] = useState(false);
  const { pager, q } = usePage(
    "jobs",
    { labels, paused, nameContains },
    (pageToken) =>
      clients.jobs.listJobs({
        pageSize,
        pageToken,
        labels: parseLabels(labels),
        paused: paused === "all" ? undefined : paused === "paused",
        nameContains,
      }),
    5_000,
  );
  const jobs = q.data?.jobs ?? [];
  const editor = canEdit(identity.role);
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>Jobs</Title>
        {editor && <Button onClick={() => setCreating(true)}>New job</Button>}
      </Group>
      <Group align="flex-end">
        <TextInput
          label="Name contains"
          description="ignoring case"
          maxLength={200}
          value={search}
          onChange={(e) => {
            setSearch(e.currentTarget.value);
            pager.reset();
          }}
        />
        <TextInput
          label="Labels"
          description="key=value, all must match"
          value={labels}
          onChange={(e) => {
            setLabels(e.currentTarget.value);
            pager.reset();
          }}
        />
        <SegmentedControl
          aria-label="Paused filter"
          value={paused}
          onChange={(v) => {
            setPaused(v);
            pager.reset();
          }}
          data={[
            { value: "all", label: "All" },
            { value: "active", label: "Active" },
            { value: "paused", label: "Paused" },
          ]}
        />
      </Group>
      <ErrorAlert error={q.error} />
      <DataTable striped highlightOnHover columns={["Name", "Schedule", "Labels", "Next run", "Last status", editor && "Actions"]}>
        {jobs.map((job) => (
          <Table.Tr key={job.id}>
            <Table.Td>
              <JobLink id={job.id} name={job.displayName} />
              {job.paused && (
                <Tooltip label={job.pauseReason || "paused"}>
                  <Badge ml="xs" color="gray.8" variant="filled">
                    paused
                  </Badge>
                </Tooltip>
              )}
            </Table.Td>
            <Table.Td>
              <Text size="sm">{scheduleText(job)}</Text>
            </Table.Td>
            <Table.Td>
              <Text size="sm">{labelsText(job.labels)}</Text>
            </Table.Td>
            <Table.Td>
              <NextRun job={job} />
            </Table.Td>
            <Table.Td>
              <Outcomes job={job} />
            </Table.Td>
            {editor && (
              <Table.Td>
                <Actions job={job} />
              </Table.Td>
            )}
          </Table.Tr>
        ))}
      </DataTable>
      {q.isSuccess && jobs.length === 0 && (
        // A name search reads the namespace 10,000 jobs a call: an empty
        // page with a next token means only that this part had no match.
        <Text>{q.data.nextPageToken ? "No match among these jobs: Next searches further." : "No jobs."}</Text>
      )}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
      <Modal opened={creating} onClose={() => setCreating(false)} title="New job" size="lg">
        <JobForm
          onDone={(job) => {
            setCreating(false);
            navigate(`/jobs/${job.id}`);
          }}
        />
      </Modal>
    </Stack>
  );
}
