import { Anchor, Group, MultiSelect, Stack, Table, Text, TextInput, Title } from "@mantine/core";
import { TriggerKind } from "@cronmesh/client/dispatch/v1/dispatch_request_pb";
import { ExecutionStatus } from "@cronmesh/client/history/v1/history_service_pb";
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "react-router";
import { ErrorAlert, Pager, StatusBadge, usePager } from "../components";
import { duration, enumLabel, fromLocalInput, when } from "../format";
import { useSession } from "../session";

const options = (e: Record<string, string | number>) =>
  Object.values(e)
    .filter((v): v is number => typeof v === "number" && v !== 0)
    .map((v) => ({ value: String(v), label: enumLabel(e as Record<number, string>, v) }));

export function Executions() {
  const { clients } = useSession();
  const pager = usePager();
  const [statuses, setStatuses] = useState<string[]>([]);
  const [kinds, setKinds] = useState<string[]>([]);
  const [from, setFrom] = useState("");
  const [to, setTo] = useState("");
  const [text, setText] = useState("");
  const filter = { statuses, kinds, from, to, text };
  const q = useQuery({
    queryKey: ["executions", { ...filter, token: pager.token }],
    queryFn: () =>
      clients.history.listExecutions({
        statuses: statuses.map(Number),
        triggerKinds: kinds.map(Number),
        startTime: fromLocalInput(from),
        endTime: fromLocalInput(to),
        query: text.trim(),
        pageSize: 50,
        pageToken: pager.token,
      }),
    refetchInterval: 5_000,
  });
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
      <Table striped aria-label="Executions">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Slot</Table.Th>
            <Table.Th>Job</Table.Th>
            <Table.Th>Status</Table.Th>
            <Table.Th>Trigger</Table.Th>
            <Table.Th>Attempt</Table.Th>
            <Table.Th>Duration</Table.Th>
            <Table.Th>Reason</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {(q.data?.executions ?? []).map((e) => (
            <Table.Tr key={e.executionId}>
              <Table.Td>
                <Anchor component={Link} to={`/executions/${e.executionId}`}>
                  {when(e.nominalTime)}
                </Anchor>
              </Table.Td>
              <Table.Td>
                <Anchor component={Link} to={`/jobs/${e.jobId}`}>
                  {e.jobDisplayName || e.jobId}
                </Anchor>
              </Table.Td>
              <Table.Td>
                <StatusBadge status={e.status} />
              </Table.Td>
              <Table.Td>{enumLabel(TriggerKind, e.triggerKind)}</Table.Td>
              <Table.Td>{e.attempt}</Table.Td>
              <Table.Td>{duration(e.duration)}</Table.Td>
              <Table.Td>
                <Text size="sm" lineClamp={1}>
                  {e.reason}
                </Text>
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
      {q.isSuccess && q.data.executions.length === 0 && <Text>No execution matches.</Text>}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
    </Stack>
  );
}
