import { Group, MultiSelect, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { TriggerKind } from "@cronmesh/client/dispatch/v1/dispatch_request_pb";
import { ExecutionStatus } from "@cronmesh/client/history/v1/history_service_pb";
import { useState } from "react";
import { DataTable, ErrorAlert, ExecutionCells, JobLink, Pager, SlotLink, usePage } from "../components";
import { enumLabel, fromLocalInput } from "../format";
import { useSession } from "../session";

const options = (e: Record<string, string | number>) =>
  Object.values(e)
    .filter((v): v is number => typeof v === "number" && v !== 0)
    .map((v) => ({ value: String(v), label: enumLabel(e as Record<number, string>, v) }));

export function Executions() {
  const { clients } = useSession();
  const [statuses, setStatuses] = useState<string[]>([]);
  const [kinds, setKinds] = useState<string[]>([]);
  const [from, setFrom] = useState("");
  const [to, setTo] = useState("");
  const [text, setText] = useState("");
  const { pager, q } = usePage(
    "executions",
    { statuses, kinds, from, to, text },
    (pageToken) =>
      clients.history.listExecutions({
        statuses: statuses.map(Number),
        triggerKinds: kinds.map(Number),
        startTime: fromLocalInput(from),
        endTime: fromLocalInput(to),
        query: text.trim(),
        pageSize: 50,
        pageToken,
      }),
    5_000,
  );
  const change = <T,>(set: (v: T) => void) => (v: T) => {
    set(v);
    pager.reset();
  };
  return (
    <Stack>
      <Title order={2}>Executions</Title>
      <Group align="flex-end">
        <MultiSelect label="Status" data={options(ExecutionStatus)} value={statuses} onChange={change(setStatuses)} clearable w={220} />
        <MultiSelect label="Trigger" data={options(TriggerKind)} value={kinds} onChange={change(setKinds)} clearable w={220} />
        <TextInput type="datetime-local" label="Slots from" value={from} onChange={(e) => change(setFrom)(e.currentTarget.value)} />
        <TextInput type="datetime-local" label="Slots to" value={to} onChange={(e) => change(setTo)(e.currentTarget.value)} />
        <TextInput label="Text" description="job name, reason, response" value={text} onChange={(e) => change(setText)(e.currentTarget.value)} />
      </Group>
      <ErrorAlert error={q.error} />
      <DataTable striped label="Executions" columns={["Slot", "Job", "Status", "Trigger", "Attempt", "Duration", "Reason"]}>
        {(q.data?.executions ?? []).map((e) => (
          <Table.Tr key={e.executionId}>
            <Table.Td>
              <SlotLink executionId={e.executionId} nominalTime={e.nominalTime} />
            </Table.Td>
            <Table.Td>
              <JobLink id={e.jobId} name={e.jobDisplayName} />
            </Table.Td>
            <ExecutionCells e={e} />
            <Table.Td>
              <Text size="sm" lineClamp={1}>
                {e.reason}
              </Text>
            </Table.Td>
          </Table.Tr>
        ))}
      </DataTable>
      {q.isSuccess && q.data.executions.length === 0 && <Text>No execution matches.</Text>}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
    </Stack>
  );
}
