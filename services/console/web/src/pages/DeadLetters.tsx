import { create } from "@bufbuild/protobuf";
import { Code, Modal, Select, Stack, Switch, Table, Text, Textarea, TextInput, Title } from "@mantine/core";
import type { DeadLetter } from "@cronmesh/client/dispatcher/v1/dispatch_service_pb";
import { TargetSchema } from "@cronmesh/client/registry/v1/job_pb";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { canEdit, fieldViolations } from "../api";
import { ApiForm, DataTable, ErrorAlert, JobLink, Pager, RowActions, RowButton, SlotLink, usePage } from "../components";
import { labelsText, parseLabels, when } from "../format";
import { useSession } from "../session";

/** Redrive delivers a dead letter again, to its own target or to an override. */
function Redrive({ letter, onDone }: { letter: DeadLetter; onDone: () => void }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const current = letter.request?.target?.kind;
  const http = current?.case === "http" ? current.value : undefined;
  const [override, setOverride] = useState(false);
  const [method, setMethod] = useState(http?.method || "POST");
  const [url, setUrl] = useState(http?.url ?? "");
  const [headers, setHeaders] = useState(labelsText(http?.headers ?? {}));
  const [body, setBody] = useState(http?.body ?? "");
  const m = useMutation({
    mutationFn: () =>
      clients.dispatcher.redriveDeadLetter({
        id: letter.id,
        targetOverride: override
          ? create(TargetSchema, { kind: { case: "http", value: { method, url, headers: parseLabels(headers), body, timeout: http?.timeout, acceptedStatusCodes: http?.acceptedStatusCodes ?? [], bodyFormat: http?.bodyFormat } } })
          : undefined,
      }),
    onSuccess: () => {
      void queryClient.invalidateQueries({ queryKey: ["dead-letters"] });
      onDone();
    },
  });
  const violations = m.error ? fieldViolations(m.error) : new Map<string, string>();
  const v = (suffix: string) => violations.get(`target_override.http.${suffix}`);
  return (
    <ApiForm label="Redrive" onSubmit={() => m.mutate()} failed="Not redriven" error={m.error} violations={[...violations]} pending={m.isPending} submit="Redrive">
      <Text size="sm">
        Current target: {http ? `${http.method || "POST"} ${http.url}` : current?.case === "amqp" ? `AMQP ${current.value.exchange}` : "—"}
      </Text>
      <Switch label="Override the target for this redrive" checked={override} onChange={(e) => setOverride(e.currentTarget.checked)} disabled={!http} />
      {override && (
        <>
          <Select label="Method" data={["GET", "POST", "PUT", "PATCH", "DELETE"]} value={method} onChange={(x) => setMethod(x ?? "POST")} allowDeselect={false} error={v("method")} />
          <TextInput label="URL" value={url} onChange={(e) => setUrl(e.currentTarget.value)} error={v("url")} />
          <TextInput label="Headers" description="Name=value, separated by commas" value={headers} onChange={(e) => setHeaders(e.currentTarget.value)} error={v("headers")} />
          <Textarea label="Body" value={body} onChange={(e) => setBody(e.currentTarget.value)} autosize minRows={2} error={v("body")} />
        </>
      )}
    </ApiForm>
  );
}

export function DeadLetters() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const [jobId, setJobId] = useState("");
  const [redriving, setRedriving] = useState<DeadLetter>();
  const { pager, q } = usePage("dead-letters", { jobId }, (pageToken) => clients.dispatcher.listDeadLetters({ jobId: jobId.trim(), pageSize: 50, pageToken }), 5_000);
  const purge = useMutation({
    mutationFn: (id: string) => clients.dispatcher.purgeDeadLetter({ id }),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ["dead-letters"] }),
  });
  const editor = canEdit(identity.role);
  return (
    <Stack>
      <Title order={2}>Dead letters</Title>
      <Text size="sm">Executions that used up their retries. Redrive one to deliver it again, or purge it.</Text>
      <TextInput
        label="Job id"
        w={360}
        value={jobId}
        onChange={(e) => {
          setJobId(e.currentTarget.value);
          pager.reset();
        }}
      />
      <ErrorAlert error={q.error ?? purge.error} />
      <DataTable striped label="Dead letters" columns={["Died", "Job", "Slot", "Attempts", "Reason", "Response", editor && "Actions"]}>
        {(q.data?.deadLetters ?? []).map((d) => (
          <Table.Tr key={d.id}>
            <Table.Td>{when(d.deadTime)}</Table.Td>
            <Table.Td>
              <JobLink id={d.jobId} name={d.request?.jobDisplayName} />
            </Table.Td>
            <Table.Td>
              <SlotLink executionId={d.executionId} nominalTime={d.nominalTime} />
            </Table.Td>
            <Table.Td>{d.attempt}</Table.Td>
            <Table.Td>{d.reason}</Table.Td>
            <Table.Td>
              {d.responseStatus || "—"} {d.responseExcerpt && <Code>{d.responseExcerpt.slice(0, 120)}</Code>}
            </Table.Td>
            {editor && (
              <RowActions>
                <RowButton label={`Redrive the dead letter of ${d.request?.jobDisplayName || d.jobId} at ${when(d.nominalTime)}`} onClick={() => setRedriving(d)}>
                  Redrive
                </RowButton>
                <RowButton
                  label={`Purge the dead letter of ${d.request?.jobDisplayName || d.jobId} at ${when(d.nominalTime)}`}
                  confirm="Purge this dead letter? It will not be delivered."
                  onClick={() => purge.mutate(d.id)}
                >
                  Purge
                </RowButton>
              </RowActions>
            )}
          </Table.Tr>
        ))}
      </DataTable>
      {q.isSuccess && q.data.deadLetters.length === 0 && <Text>No dead letter.</Text>}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
      <Modal opened={!!redriving} onClose={() => setRedriving(undefined)} title="Redrive a dead letter" size="lg">
        {redriving && <Redrive letter={redriving} onDone={() => setRedriving(undefined)} />}
      </Modal>
    </Stack>
  );
}
