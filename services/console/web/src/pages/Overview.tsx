// The overview: the namespace's last hour and day, computed in the browser
// from the history's executions (at most `cap` of them per window: the
// history has no aggregate RPC across jobs), the dead letters and the open
// incidents.
import { Card, Group, SimpleGrid, Stack, Table, Text, Title } from "@mantine/core";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ExecutionStatus, type Execution } from "@cronmesh/client/history/v1/history_service_pb";
import { IncidentState } from "@cronmesh/client/alerting/v1/alert_service_pb";
import { useQuery } from "@tanstack/react-query";
import type { Clients } from "../api";
import { DataTable, ErrorAlert } from "../components";
import { percentile, toDate } from "../format";
import { useSession } from "../session";

const cap = 5_000;

async function executionsSince(c: Clients, since: Date): Promise<{ list: Execution[]; capped: boolean }> {
  const list: Execution[] = [];
  let pageToken = "";
  do {
    const res = await c.history.listExecutions({ startTime: timestampFromDate(since), pageSize: 1000, pageToken });
    list.push(...res.executions);
    pageToken = res.nextPageToken;
  } while (pageToken && list.length < cap);
  return { list, capped: pageToken !== "" };
}

function summarize(list: Execution[], minutes: number) {
  const done = list.filter((e) => [ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.DEAD].includes(e.status));
  const ok = done.filter((e) => e.status === ExecutionStatus.SUCCEEDED).length;
  // Lateness at the target: from the slot's nominal time to its first
  // attempt's start. The fire time says when the trigger committed the slot,
  // which is ahead of it by the trigger's --lead.
  const lateness = list
    .map((e) => {
      const n = toDate(e.nominalTime);
      const s = e.attempt === 1 ? toDate(e.startTime) : undefined;
      return n && s ? s.getTime() - n.getTime() : undefined;
    })
    .filter((x): x is number => x !== undefined)
    .sort((a, b) => a - b);
  return {
    perMinute: list.length / minutes,
    success: done.length ? (100 * ok) / done.length : undefined,
    missed: list.filter((e) => e.status === ExecutionStatus.MISSED).length,
    p50: percentile(lateness, 50),
    p95: percentile(lateness, 95),
    p99: percentile(lateness, 99),
  };
}

/** Minutes draws executions per minute of the last hour as a bar chart. */
function Minutes({ list }: { list: Execution[] }) {
  const now = Date.now();
  const bins = new Array<number>(60).fill(0);
  for (const e of list) {
    const t = toDate(e.nominalTime)?.getTime();
    if (t === undefined) continue;
    const i = 59 - Math.floor((now - t) / 60_000);
    if (i >= 0 && i < 60) bins[i] = (bins[i] ?? 0) + 1;
  }
  const max = Math.max(1, ...bins);
  return (
    <svg viewBox="0 0 600 80" width="100%" height="80" role="img" aria-label={`Executions per minute over the last hour, at most ${max} a minute`}>
      {bins.map((n, i) => (
        <rect key={i} x={i * 10} y={80 - (n / max) * 78} width={8} height={(n / max) * 78} fill="#364fc7" />
      ))}
    </svg>
  );
}

const ms = (x: number | undefined) => (x === undefined ? "—" : x < 1000 ? `${Math.round(x)} ms` : `${(x / 1000).toFixed(1)} s`);

export function Overview() {
  const { clients } = useSession();
  const hour = useQuery({ queryKey: ["overview", "hour"], queryFn: () => executionsSince(clients, new Date(Date.now() - 3_600_000)), refetchInterval: 10_000 });
  const day = useQuery({ queryKey: ["overview", "day"], queryFn: () => executionsSince(clients, new Date(Date.now() - 86_400_000)), refetchInterval: 60_000 });
  const dead = useQuery({ queryKey: ["dead-letters", "overview"], queryFn: () => clients.dispatcher.listDeadLetters({ pageSize: 1000 }), refetchInterval: 10_000 });
  const incidents = useQuery({ queryKey: ["incidents", "overview"], queryFn: () => clients.alerting.listIncidents({ state: IncidentState.OPEN, pageSize: 1000 }), refetchInterval: 5_000 });
  const deadLetters = dead.data?.deadLetters ?? [];
  const deadSince = (since: number) => deadLetters.filter((d) => (toDate(d.deadTime)?.getTime() ?? 0) >= since).length;
  const rows = [
    { name: "Last hour", q: hour, minutes: 60, dead: deadSince(Date.now() - 3_600_000) },
    { name: "Last day", q: day, minutes: 1440, dead: deadSince(Date.now() - 86_400_000) },
  ];
  return (
    <Stack>
      <Title order={2}>Overview</Title>
      <ErrorAlert error={hour.error ?? day.error ?? dead.error ?? incidents.error} />
      <SimpleGrid cols={{ base: 1, sm: 2 }}>
        <Card withBorder>
          <Text size="sm">Open incidents</Text>
          <Text size="xl" fw={700} data-testid="open-incidents">
            {incidents.data ? incidents.data.incidents.length + (incidents.data.nextPageToken ? "+" : "") : "—"}
          </Text>
        </Card>
        <Card withBorder>
          <Text size="sm">Dead letters waiting</Text>
          <Text size="xl" fw={700}>
            {dead.data ? deadLetters.length + (dead.data.nextPageToken ? "+" : "") : "—"}
          </Text>
        </Card>
      </SimpleGrid>
      <Card withBorder>
        <Title order={3} size="h4">
          Executions per minute, last hour
        </Title>
        <Minutes list={hour.data?.list ?? []} />
      </Card>
      <DataTable label="Summary" columns={["Window", "Executions / min", "Success rate", "Missed", "Lateness p50 / p95 / p99", "New dead letters"]}>
        {rows.map((r) => {
          const s = r.q.data ? summarize(r.q.data.list, r.minutes) : undefined;
          return (
            <Table.Tr key={r.name}>
              <Table.Td>
                <Group gap={4}>
                  {r.name}
                  {r.q.data?.capped && <Text size="xs">(first {cap} executions)</Text>}
                </Group>
              </Table.Td>
              <Table.Td>{s ? s.perMinute.toFixed(1) : "—"}</Table.Td>
              <Table.Td>{s?.success === undefined ? "—" : `${s.success.toFixed(1)} %`}</Table.Td>
              <Table.Td>{s ? s.missed : "—"}</Table.Td>
              <Table.Td>{s ? `${ms(s.p50)} / ${ms(s.p95)} / ${ms(s.p99)}` : "—"}</Table.Td>
              <Table.Td>{r.dead}</Table.Td>
            </Table.Tr>
          );
        })}
      </DataTable>
    </Stack>
  );
}
