import { Alert, Anchor, Badge, Button, Group, Stack, Table, Text } from "@mantine/core";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { TriggerKind } from "@cronmesh/client/dispatch/v1/dispatch_request_pb";
import { ExecutionStatus, type Execution } from "@cronmesh/client/history/v1/history_service_pb";
import { useQuery } from "@tanstack/react-query";
import { useState, type ReactNode } from "react";
import { Link } from "react-router";
import { errorText } from "./api";
import { duration, enumLabel, when } from "./format";

// Shades dark enough for 4.5:1 contrast with white text.
const statusColor: Record<number, string> = {
  [ExecutionStatus.RUNNING]: "blue.9",
  [ExecutionStatus.SUCCEEDED]: "#1b5e20",
  [ExecutionStatus.RETRYING]: "#8a4b00",
  [ExecutionStatus.FAILED]: "red.9",
  [ExecutionStatus.DEAD]: "red.9",
  [ExecutionStatus.CANCELLED]: "gray.8",
  [ExecutionStatus.MISSED]: "grape.9",
};

export function StatusBadge({ status }: { status: ExecutionStatus }) {
  return (
    <Badge color={statusColor[status] ?? "gray.8"} variant="filled">
      {enumLabel(ExecutionStatus, status)}
    </Badge>
  );
}

export function ErrorAlert({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <Alert color="red" role="alert" title="The call failed">
      {errorText(error)}
    </Alert>
  );
}

/** usePager keeps the page tokens seen, so Previous goes back. */
export function usePager() {
  const [tokens, setTokens] = useState<string[]>([""]);
  const token = tokens[tokens.length - 1] ?? "";
  return {
    token,
    page: tokens.length,
    reset: () => setTokens([""]),
    next: (t: string) => setTokens((ts) => [...ts, t]),
    previous: () => setTokens((ts) => (ts.length > 1 ? ts.slice(0, -1) : ts)),
  };
}

/**
 * usePage fetches the page of a list the pager is on: fetch is given its
 * token. The query's key is [name, filter and token], so invalidating
 * [name] fetches it again; refetchInterval (ms) polls. A change of the
 * filter should reset the pager.
 */
export function usePage<T>(name: string, filter: object, fetch: (pageToken: string) => Promise<T>, refetchInterval?: number) {
  const pager = usePager();
  const q = useQuery({ queryKey: [name, { ...filter, token: pager.token }], queryFn: () => fetch(pager.token), refetchInterval });
  return { pager, q };
}

export function Pager({ pager, nextToken }: { pager: ReturnType<typeof usePager>; nextToken: string | undefined }) {
  return (
    <Group justify="flex-end">
      <Text size="sm">Page {pager.page}</Text>
      <Button variant="default" size="xs" disabled={pager.page === 1} onClick={pager.previous}>
        Previous
      </Button>
      <Button variant="default" size="xs" disabled={!nextToken} onClick={() => nextToken && pager.next(nextToken)}>
        Next
      </Button>
    </Group>
  );
}

/**
 * DataTable is a table with a header row of columns (false ones, such as
 * an Actions column a viewer does not get, are left out) and rows.
 */
export function DataTable({ label, columns, striped, highlightOnHover, children }: { label?: string; columns: (string | false)[]; striped?: boolean; highlightOnHover?: boolean; children: ReactNode }) {
  return (
    <Table striped={striped} highlightOnHover={highlightOnHover} aria-label={label}>
      <Table.Thead>
        <Table.Tr>
          {columns
            .filter((c) => c !== false)
            .map((c) => (
              <Table.Th key={c}>{c}</Table.Th>
            ))}
        </Table.Tr>
      </Table.Thead>
      <Table.Tbody>{children}</Table.Tbody>
    </Table>
  );
}

/** JobLink links to a job's page, by its name (its id when it has none). */
export function JobLink({ id, name }: { id: string; name?: string }) {
  return (
    <Anchor component={Link} to={`/jobs/${id}`}>
      {name || id}
    </Anchor>
  );
}

/** SlotLink links to an execution's page, by its slot's nominal time. */
export function SlotLink({ executionId, nominalTime }: { executionId: string; nominalTime?: Timestamp }) {
  return (
    <Anchor component={Link} to={`/executions/${executionId}`}>
      {when(nominalTime)}
    </Anchor>
  );
}

/** ExecutionCells are an execution's status, trigger, attempt and duration. */
export function ExecutionCells({ e }: { e: Execution }) {
  return (
    <>
      <Table.Td>
        <StatusBadge status={e.status} />
      </Table.Td>
      <Table.Td>{enumLabel(TriggerKind, e.triggerKind)}</Table.Td>
      <Table.Td>{e.attempt}</Table.Td>
      <Table.Td>{duration(e.duration)}</Table.Td>
    </>
  );
}

/** RowActions is a row's last cell: its buttons side by side. */
export function RowActions({ children }: { children: ReactNode }) {
  return (
    <Table.Td>
      <Group gap={4} wrap="nowrap">
        {children}
      </Group>
    </Table.Td>
  );
}

/**
 * RowButton is a small button of a row, named for screen readers by label.
 * With confirm it is a destructive one (delete, purge): outlined in red,
 * it acts only once the question is answered yes.
 */
export function RowButton({ label, onClick, confirm, loading, children }: { label: string; onClick: () => void; confirm?: string; loading?: boolean; children: ReactNode }) {
  return (
    <Button
      size="compact-xs"
      variant={confirm ? "outline" : "default"}
      color={confirm ? "red.9" : undefined}
      loading={loading}
      aria-label={label}
      onClick={() => (confirm === undefined || window.confirm(confirm)) && onClick()}
    >
      {children}
    </Button>
  );
}

/**
 * ApiForm is a form whose submit calls the API (onSubmit, the page not
 * reloaded): its fields, then why the call failed under the title failed
 * (the field violations not shown on a field, else the error), and the
 * submit button.
 */
export function ApiForm({
  label,
  onSubmit,
  noValidate,
  failed = "Not saved",
  error,
  violations,
  pending,
  submit,
  children,
}: {
  label: string;
  onSubmit: () => void;
  noValidate?: boolean;
  failed?: string;
  error: unknown;
  violations: [string, string][];
  pending: boolean;
  submit: ReactNode;
  children: ReactNode;
}) {
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        onSubmit();
      }}
      noValidate={noValidate}
      aria-label={label}
    >
      <Stack>
        {children}
        {error ? (
          <Alert color="red" role="alert" title={failed}>
            {violations.length ? violations.map(([f, d]) => `${f}: ${d}`).join("; ") : errorText(error)}
          </Alert>
        ) : null}
        <Group justify="flex-end">
          <Button type="submit" loading={pending}>
            {submit}
          </Button>
        </Group>
      </Stack>
    </form>
  );
}
