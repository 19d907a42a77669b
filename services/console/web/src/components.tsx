import { Alert, Badge, Button, Group, Text } from "@mantine/core";
import { ExecutionStatus } from "@cronmesh/client/history/v1/history_service_pb";
import { useState } from "react";
import { errorText } from "./api";
import { enumLabel } from "./format";

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
