import { Anchor, Card, Code, Group, SimpleGrid, Stack, Table, Text, Title } from "@mantine/core";
import { TriggerKind } from "@cronmesh/client/dispatch/v1/dispatch_request_pb";
import { ExecutionStatus } from "@cronmesh/client/history/v1/history_service_pb";
import { useQuery } from "@tanstack/react-query";
import { Link, useParams } from "react-router";
import { ErrorAlert, StatusBadge } from "../components";
import { duration, enumLabel, when } from "../format";
import { useSession } from "../session";

const finished = new Set([ExecutionStatus.SUCCEEDED, ExecutionStatus.DEAD, ExecutionStatus.CANCELLED, ExecutionStatus.MISSED, ExecutionStatus.FAILED]);

export function ExecutionDetail() {
  const { id = "" } = useParams();
  const { clients } = useSession();
  const q = useQuery({
    queryKey: ["executions", id],
    queryFn: () => clients.history.getExecution({ executionId: id }),
    // Until it is over, follow it.
    refetchInterval: (query) => (query.state.data?.execution && finished.has(query.state.data.execution.status) ? false : 2_000),
  });
  if (q.error) return <ErrorAlert error={q.error} />;
  const e = q.data?.execution;
  if (!e) return null;
  return (
    <Stack>
      <Group>
        <Title order={2}>Execution of {e.jobDisplayName || e.jobId}</Title>
        <StatusBadge status={e.status} />
      </Group>
      <SimpleGrid cols={{ base: 1, md: 2 }}>
        <Card withBorder>
          <Stack gap={4}>
            <Text size="sm">Id: {e.executionId}</Text>
            <Text size="sm">
              Job:{" "}
              <Anchor component={Link} to={`/jobs/${e.jobId}`}>
                {e.jobDisplayName || e.jobId}
              </Anchor>
            </Text>
            <Text size="sm">Trigger: {enumLabel(TriggerKind, e.triggerKind)}</Text>
            <Text size="sm">Slot: {when(e.nominalTime)}</Text>
            <Text size="sm">Fired: {when(e.fireTime)}</Text>
            <Text size="sm">Started: {when(e.startTime)}</Text>
            <Text size="sm">Duration: {duration(e.duration)}</Text>
            <Text size="sm">Attempts: {e.attempt}</Text>
            {e.reason && <Text size="sm">Reason: {e.reason}</Text>}
            <Text size="sm">
              Trace: {e.traceId ? (e.traceUrl ? <Anchor href={e.traceUrl} target="_blank" rel="noreferrer">{e.traceId}</Anchor> : e.traceId) : "—"}
            </Text>
          </Stack>
        </Card>
        <Card withBorder>
          <Title order={3} size="h4">
            Response {e.responseStatus ? `(${e.responseStatus})` : ""}
          </Title>
          <Code block aria-label="Response excerpt">
            {e.responseExcerpt || "no response body"}
          </Code>
        </Card>
      </SimpleGrid>
      <Title order={3} size="h4">
        Attempts
      </Title>
      <Table aria-label="Attempts">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>#</Table.Th>
            <Table.Th>Status</Table.Th>
            <Table.Th>Started</Table.Th>
            <Table.Th>Duration</Table.Th>
            <Table.Th>Response</Table.Th>
            <Table.Th>Reason</Table.Th>
            <Table.Th>Retry after</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {(q.data?.attempts ?? []).map((a) => (
            <Table.Tr key={a.attempt}>
              <Table.Td>{a.attempt}</Table.Td>
              <Table.Td>
                <StatusBadge status={a.status} />
              </Table.Td>
              <Table.Td>{when(a.startTime)}</Table.Td>
              <Table.Td>{duration(a.duration)}</Table.Td>
              <Table.Td>
                {a.responseStatus || "—"} {a.responseExcerpt && <Code>{a.responseExcerpt.slice(0, 200)}</Code>}
              </Table.Td>
              <Table.Td>{a.reason}</Table.Td>
              <Table.Td>{duration(a.retryDelay)}</Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </Stack>
  );
}
