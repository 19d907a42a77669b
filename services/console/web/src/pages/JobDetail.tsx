import { Badge, Button, Card, Group, Modal, NumberInput, SimpleGrid, Stack, Table, Tabs, Text, TextInput, Title } from "@mantine/core";
import { TriggerKind } from "@cronmesh/client/dispatch/v1/dispatch_request_pb";
import type { Job } from "@cronmesh/client/registry/v1/job_pb";
import { SlotState } from "@cronmesh/client/trigger/v1/trigger_service_pb";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { useNavigate, useParams } from "react-router";
import { canEdit } from "../api";
import { DataTable, ErrorAlert, ExecutionCells, Pager, SlotLink, usePage } from "../components";
import { enumLabel, fromLocalInput, labelsText, offset, when } from "../format";
import { useSession } from "../session";
import { JobForm } from "./JobForm";
import { scheduleText } from "./Jobs";

function Preview({ job }: { job: Job }) {
  const { clients } = useSession();
  const tz = job.schedule?.timeZone || "UTC";
  const q = useQuery({
    queryKey: ["preview", job.id, String(job.version)],
    queryFn: () => clients.jobs.previewSchedule({ schedule: job.schedule, from: timestampFromDate(new Date()), count: 10 }),
  });
  return (
    <Card withBorder>
      <Title order={3} size="h4">
        Next runs
      </Title>
      <Text size="sm">Time zone {tz}; the offset column changes where daylight saving time starts or ends.</Text>
      <ErrorAlert error={q.error} />
      <DataTable columns={[`In ${tz}`, "Offset", "In this browser"]}>
        {(q.data?.times ?? []).map((t, i) => (
          <Table.Tr key={i}>
            <Table.Td>{when(t, tz)}</Table.Td>
            <Table.Td>{offset(t, tz)}</Table.Td>
            <Table.Td>{when(t)}</Table.Td>
          </Table.Tr>
        ))}
      </DataTable>
    </Card>
  );
}

function JobExecutions({ jobId }: { jobId: string }) {
  const { clients } = useSession();
  const { pager, q } = usePage("executions", { jobId }, (pageToken) => clients.history.listExecutions({ jobId, pageSize: 20, pageToken }), 3_000);
  return (
    <Stack>
      <ErrorAlert error={q.error} />
      <DataTable label="Executions of the job" columns={["Slot", "Status", "Trigger", "Attempt", "Duration", "Response"]}>
        {(q.data?.executions ?? []).map((e) => (
          <Table.Tr key={e.executionId}>
            <Table.Td>
              <SlotLink executionId={e.executionId} nominalTime={e.nominalTime} />
            </Table.Td>
            <ExecutionCells e={e} />
            <Table.Td>{e.responseStatus || "—"}</Table.Td>
          </Table.Tr>
        ))}
      </DataTable>
      {q.isSuccess && q.data.executions.length === 0 && <Text>No execution yet.</Text>}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
    </Stack>
  );
}

function Slots({ jobId }: { jobId: string }) {
  const { clients } = useSession();
  const { pager, q } = usePage("slots", { jobId }, (pageToken) => clients.trigger.listSlots({ jobId, pageSize: 20, pageToken }), 5_000);
  return (
    <Stack>
      <ErrorAlert error={q.error} />
      <DataTable label="Slots of the job" columns={["Slot", "State", "Trigger", "Recorded", "Epoch"]}>
        {(q.data?.slots ?? []).map((s) => (
          <Table.Tr key={s.executionId}>
            <Table.Td>{when(s.nominalTime)}</Table.Td>
            <Table.Td>{enumLabel(SlotState, s.state)}</Table.Td>
            <Table.Td>{enumLabel(TriggerKind, s.triggerKind)}</Table.Td>
            <Table.Td>{when(s.recordTime)}</Table.Td>
            <Table.Td>{String(s.epoch)}</Table.Td>
          </Table.Tr>
        ))}
      </DataTable>
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
    </Stack>
  );
}

function Backfill({ jobId }: { jobId: string }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const [start, setStart] = useState("");
  const [end, setEnd] = useState("");
  const [rate, setRate] = useState<number | "">("");
  const m = useMutation({
    mutationFn: () => clients.trigger.backfillJob({ jobId, startTime: fromLocalInput(start), endTime: fromLocalInput(end), rate: rate === "" ? 0 : rate }),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ["slots"] }),
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    m.mutate();
  };
  return (
    <form onSubmit={submit} aria-label="Backfill">
      <Stack>
        <Text size="sm">Fire every slot of the range that has not fired (times in this browser's zone).</Text>
        <Group align="flex-end">
          <TextInput type="datetime-local" label="From" value={start} onChange={(e) => setStart(e.currentTarget.value)} step={1} />
          <TextInput type="datetime-local" label="To" value={end} onChange={(e) => setEnd(e.currentTarget.value)} step={1} />
          <NumberInput label="Slots per second" min={0} value={rate} onChange={(v) => setRate(typeof v === "number" ? v : "")} />
          <Button type="submit" loading={m.isPending}>
            Backfill
          </Button>
        </Group>
        <ErrorAlert error={m.error} />
        {m.data && (
          <Text role="status">
            Fired {m.data.fired}, skipped {m.data.skipped} already fired.
          </Text>
        )}
      </Stack>
    </form>
  );
}

export function JobDetail() {
  const { id = "" } = useParams();
  const { clients, identity } = useSession();
  const navigate = useNavigate();
  const [editing, setEditing] = useState(false);
  const q = useQuery({ queryKey: ["jobs", id], queryFn: () => clients.jobs.getJob({ id }), refetchInterval: 10_000 });
  const job = q.data?.job;
  const editor = canEdit(identity.role);
  if (q.error) return <ErrorAlert error={q.error} />;
  if (!job) return null;
  const http = job.target?.kind.case === "http" ? job.target.kind.value : undefined;
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={2}>
          {job.displayName || job.id}{" "}
          {job.paused && (
            <Badge color="gray.8" variant="filled">
              paused
            </Badge>
          )}
        </Title>
        {editor && (
          <Group>
            <Button variant="default" onClick={() => setEditing(true)}>
              Edit
            </Button>
          </Group>
        )}
      </Group>
      <SimpleGrid cols={{ base: 1, md: 2 }}>
        <Card withBorder>
          <Stack gap={4}>
            <Text size="sm">Id: {job.id}</Text>
            <Text size="sm">Schedule: {scheduleText(job)}</Text>
            <Text size="sm">Target: {http ? `${http.method || "POST"} ${http.url}` : job.target?.kind.case === "amqp" ? `AMQP ${job.target.kind.value.exchange}` : "—"}</Text>
            <Text size="sm">Labels: {labelsText(job.labels) || "—"}</Text>
            {job.description && <Text size="sm">{job.description}</Text>}
            {job.paused && <Text size="sm">Paused {when(job.pauseTime)}{job.pauseReason ? `: ${job.pauseReason}` : ""}</Text>}
            <Text size="sm">Updated {when(job.updateTime)}, version {String(job.version)}</Text>
          </Stack>
        </Card>
        <Preview job={job} />
      </SimpleGrid>
      <Tabs defaultValue="executions">
        <Tabs.List>
          <Tabs.Tab value="executions">Executions</Tabs.Tab>
          <Tabs.Tab value="slots">Slots</Tabs.Tab>
          {editor && <Tabs.Tab value="backfill">Backfill</Tabs.Tab>}
        </Tabs.List>
        <Tabs.Panel value="executions" pt="sm">
          <JobExecutions jobId={job.id} />
        </Tabs.Panel>
        <Tabs.Panel value="slots" pt="sm">
          <Slots jobId={job.id} />
        </Tabs.Panel>
        {editor && (
          <Tabs.Panel value="backfill" pt="sm">
            <Backfill jobId={job.id} />
          </Tabs.Panel>
        )}
      </Tabs>
      <Modal opened={editing} onClose={() => setEditing(false)} title="Edit job" size="lg">
        <JobForm
          job={job}
          onDone={(saved) => {
            setEditing(false);
            navigate(`/jobs/${saved.id}`);
          }}
        />
      </Modal>
    </Stack>
  );
}
