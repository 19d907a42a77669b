import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Alert, Anchor, Badge, Button, Group, Modal, MultiSelect, NumberInput, SegmentedControl, Select, Stack, Switch, Table, Tabs, Text, TextInput, Title } from "@mantine/core";
import { ChannelSchema, IncidentKind, IncidentState, RuleSchema, type Channel, type Rule } from "@cronmesh/client/alerting/v1/alert_service_pb";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import { Link } from "react-router";
import { canEdit, errorText, fieldViolations } from "../api";
import { ErrorAlert, Pager, usePager } from "../components";
import { enumLabel, formatDuration, labelsText, parseDuration, parseLabels, when } from "../format";
import { useSession } from "../session";

const stateColor: Record<number, string> = {
  [IncidentState.OPEN]: "red.9",
  [IncidentState.ACKNOWLEDGED]: "#8a4b00",
  [IncidentState.RESOLVED]: "#1b5e20",
};

function Incidents() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const pager = usePager();
  const [state, setState] = useState(String(IncidentState.OPEN));
  const q = useQuery({
    queryKey: ["incidents", { state, token: pager.token }],
    queryFn: () => clients.alerting.listIncidents({ state: Number(state), pageSize: 50, pageToken: pager.token }),
    refetchInterval: 5_000,
  });
  const ack = useMutation({
    mutationFn: (id: string) => clients.alerting.acknowledgeIncident({ id }),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ["incidents"] }),
  });
  const resolve = useMutation({
    mutationFn: (id: string) => clients.alerting.resolveIncident({ id }),
    onSuccess: () => queryClient.invalidateQueries({ queryKey: ["incidents"] }),
  });
  return (
    <Stack>
      <SegmentedControl
        aria-label="Incident state"
        value={state}
        onChange={(v) => {
          setState(v);
          pager.reset();
        }}
        data={[
          { value: String(IncidentState.OPEN), label: "Open" },
          { value: String(IncidentState.ACKNOWLEDGED), label: "Acknowledged" },
          { value: String(IncidentState.RESOLVED), label: "Resolved" },
          { value: "0", label: "All" },
        ]}
      />
      <Text size="sm">
        An incident resolves by itself when its job next succeeds (or, for a missed schedule, a slot fires on time). Resolved by hand, it opens again
        only on what happens afterwards: a new streak of failures, a new dead letter or missed slot.
      </Text>
      <ErrorAlert error={q.error ?? ack.error ?? resolve.error} />
      <Table striped aria-label="Incidents">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Opened</Table.Th>
            <Table.Th>State</Table.Th>
            <Table.Th>Kind</Table.Th>
            <Table.Th>Job</Table.Th>
            <Table.Th>Summary</Table.Th>
            <Table.Th>Actions</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {(q.data?.incidents ?? []).map((i) => (
            <Table.Tr key={i.id}>
              <Table.Td>{when(i.openTime)}</Table.Td>
              <Table.Td>
                <Badge color={stateColor[i.state] ?? "gray.8"} variant="filled">
                  {enumLabel(IncidentState, i.state)}
                </Badge>
              </Table.Td>
              <Table.Td>{enumLabel(IncidentKind, i.kind)}</Table.Td>
              <Table.Td>
                <Anchor component={Link} to={`/jobs/${i.jobId}`}>
                  {i.jobDisplayName || i.jobId}
                </Anchor>
              </Table.Td>
              <Table.Td>{i.summary}</Table.Td>
              <Table.Td>
                {canEdit(identity.role) && i.state !== IncidentState.RESOLVED && (
                  <Group gap="xs">
                    {i.state === IncidentState.OPEN && (
                      <Button size="compact-xs" variant="default" onClick={() => ack.mutate(i.id)} aria-label={`Acknowledge the incident of ${i.jobDisplayName || i.jobId}`}>
                        Acknowledge
                      </Button>
                    )}
                    <Button size="compact-xs" variant="default" onClick={() => resolve.mutate(i.id)} aria-label={`Resolve the incident of ${i.jobDisplayName || i.jobId}`}>
                      Resolve
                    </Button>
                  </Group>
                )}
                {i.state === IncidentState.RESOLVED && <Text size="xs">{i.resolveReason}</Text>}
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
      {q.isSuccess && q.data.incidents.length === 0 && <Text>No incident.</Text>}
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
    </Stack>
  );
}

type Condition = "consecutiveFailures" | "missedSchedule" | "deadLettered" | "noSuccessWithin";

function RuleForm({ rule, channels, onDone }: { rule?: Rule; channels: Channel[]; onDone: () => void }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const c = rule?.condition;
  const [name, setName] = useState(rule?.displayName ?? "");
  const [jobIds, setJobIds] = useState(rule?.selector?.jobIds.join(", ") ?? "");
  const [labels, setLabels] = useState(labelsText(rule?.selector?.labels ?? {}));
  const [condition, setCondition] = useState<Condition>((c?.case as Condition | undefined) ?? "consecutiveFailures");
  const [count, setCount] = useState<number | "">(c?.case === "consecutiveFailures" ? c.value.count : 3);
  const [span, setSpan] = useState(c?.case === "missedSchedule" ? formatDuration(c.value.tolerance) : c?.case === "noSuccessWithin" ? formatDuration(c.value.duration) : "");
  const [channelIds, setChannelIds] = useState<string[]>(rule?.channelIds ?? []);
  const [disabled, setDisabled] = useState(rule?.disabled ?? false);
  const m = useMutation({
    mutationFn: async () => {
      const condition_: MessageInitShape<typeof RuleSchema>["condition"] =
        condition === "consecutiveFailures"
          ? { case: condition, value: { count: count === "" ? 0 : count } }
          : condition === "missedSchedule"
            ? { case: condition, value: { tolerance: parseDuration(span) } }
            : condition === "noSuccessWithin"
              ? { case: condition, value: { duration: parseDuration(span) } }
              : { case: condition, value: {} };
      const draft = create(RuleSchema, {
        id: rule?.id ?? "",
        displayName: name,
        selector: { jobIds: jobIds.split(",").map((s) => s.trim()).filter(Boolean), labels: parseLabels(labels) },
        condition: condition_,
        channelIds,
        disabled,
      });
      if (rule) await clients.alerting.updateRule({ rule: draft });
      else await clients.alerting.createRule({ rule: draft });
    },
    onSuccess: () => {
      void queryClient.invalidateQueries({ queryKey: ["rules"] });
      onDone();
    },
  });
  const v = m.error ? fieldViolations(m.error) : new Map<string, string>();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    m.mutate();
  };
  return (
    <form onSubmit={submit} aria-label={rule ? "Edit rule" : "New rule"}>
      <Stack>
        <TextInput label="Name" value={name} onChange={(e) => setName(e.currentTarget.value)} error={v.get("rule.display_name")} />
        <TextInput label="Job ids" description="comma separated; empty: every job the labels select" value={jobIds} onChange={(e) => setJobIds(e.currentTarget.value)} error={v.get("rule.selector.job_ids")} />
        <TextInput label="Job labels" description="key=value, comma separated" value={labels} onChange={(e) => setLabels(e.currentTarget.value)} error={v.get("rule.selector.labels") ?? v.get("rule.selector")} />
        <Select
          label="Condition"
          allowDeselect={false}
          value={condition}
          onChange={(x) => setCondition((x ?? "consecutiveFailures") as Condition)}
          data={[
            { value: "consecutiveFailures", label: "Consecutive failures" },
            { value: "missedSchedule", label: "Missed schedule" },
            { value: "deadLettered", label: "Dead lettered" },
            { value: "noSuccessWithin", label: "No success within" },
          ]}
          error={v.get("rule.condition")}
        />
        {condition === "consecutiveFailures" && <NumberInput label="Failures" min={1} value={count} onChange={(x) => setCount(typeof x === "number" ? x : "")} error={v.get("rule.consecutive_failures.count")} />}
        {(condition === "missedSchedule" || condition === "noSuccessWithin") && (
          <TextInput label={condition === "missedSchedule" ? "Tolerance" : "Within"} description="e.g. 5m" value={span} onChange={(e) => setSpan(e.currentTarget.value)} error={v.get("rule.missed_schedule.tolerance") ?? v.get("rule.no_success_within.duration")} />
        )}
        <MultiSelect label="Channels" data={channels.map((ch) => ({ value: ch.id, label: ch.displayName || ch.id }))} value={channelIds} onChange={setChannelIds} error={v.get("rule.channel_ids")} />
        <Switch label="Disabled" checked={disabled} onChange={(e) => setDisabled(e.currentTarget.checked)} />
        {m.isError && (
          <Alert color="red" role="alert" title="Not saved">
            {v.size ? [...v].map(([f, d]) => `${f}: ${d}`).join("; ") : errorText(m.error)}
          </Alert>
        )}
        <Group justify="flex-end">
          <Button type="submit" loading={m.isPending}>
            Save rule
          </Button>
        </Group>
      </Stack>
    </form>
  );
}

function Rules() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const pager = usePager();
  const [editing, setEditing] = useState<Rule | "new">();
  const q = useQuery({ queryKey: ["rules", pager.token], queryFn: () => clients.alerting.listRules({ pageSize: 100, pageToken: pager.token }) });
  const channels = useQuery({ queryKey: ["channels", "all"], queryFn: () => clients.alerting.listChannels({ pageSize: 1000 }) });
  const del = useMutation({ mutationFn: (id: string) => clients.alerting.deleteRule({ id }), onSuccess: () => queryClient.invalidateQueries({ queryKey: ["rules"] }) });
  const editor = canEdit(identity.role);
  const names = new Map((channels.data?.channels ?? []).map((c) => [c.id, c.displayName || c.id]));
  return (
    <Stack>
      {editor && (
        <Group justify="flex-end">
          <Button onClick={() => setEditing("new")}>New rule</Button>
        </Group>
      )}
      <ErrorAlert error={q.error ?? del.error} />
      <Table striped aria-label="Alert rules">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Name</Table.Th>
            <Table.Th>Condition</Table.Th>
            <Table.Th>Jobs</Table.Th>
            <Table.Th>Channels</Table.Th>
            <Table.Th>State</Table.Th>
            {editor && <Table.Th>Actions</Table.Th>}
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {(q.data?.rules ?? []).map((r) => (
            <Table.Tr key={r.id}>
              <Table.Td>{r.displayName || r.id}</Table.Td>
              <Table.Td>{r.condition.case?.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`) ?? "—"}</Table.Td>
              <Table.Td>{[r.selector?.jobIds.join(", "), labelsText(r.selector?.labels ?? {})].filter(Boolean).join("; ") || "every job"}</Table.Td>
              <Table.Td>{r.channelIds.map((id) => names.get(id) ?? id).join(", ")}</Table.Td>
              <Table.Td>{r.disabled ? "disabled" : "enabled"}</Table.Td>
              {editor && (
                <Table.Td>
                  <Group gap={4} wrap="nowrap">
                    <Button size="compact-xs" variant="default" onClick={() => setEditing(r)} aria-label={`Edit rule ${r.displayName || r.id}`}>
                      Edit
                    </Button>
                    <Button size="compact-xs" variant="outline" color="red.9" aria-label={`Delete rule ${r.displayName || r.id}`} onClick={() => window.confirm("Delete this rule?") && del.mutate(r.id)}>
                      Delete
                    </Button>
                  </Group>
                </Table.Td>
              )}
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
      <Modal opened={!!editing} onClose={() => setEditing(undefined)} title={editing === "new" ? "New rule" : "Edit rule"} size="lg">
        {editing && <RuleForm rule={editing === "new" ? undefined : editing} channels={channels.data?.channels ?? []} onDone={() => setEditing(undefined)} />}
      </Modal>
    </Stack>
  );
}

function ChannelForm({ channel, onDone }: { channel?: Channel; onDone: () => void }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const webhook = channel?.kind.case === "webhook" ? channel.kind.value : undefined;
  const [name, setName] = useState(channel?.displayName ?? "");
  const [url, setUrl] = useState(webhook?.url ?? "");
  const [secret, setSecret] = useState("");
  const m = useMutation({
    mutationFn: async () => {
      const draft = create(ChannelSchema, { id: channel?.id ?? "", displayName: name, kind: { case: "webhook", value: { url, signingSecret: secret } } });
      if (channel) await clients.alerting.updateChannel({ channel: draft });
      else await clients.alerting.createChannel({ channel: draft });
    },
    onSuccess: () => {
      void queryClient.invalidateQueries({ queryKey: ["channels"] });
      onDone();
    },
  });
  const v = m.error ? fieldViolations(m.error) : new Map<string, string>();
  const submit = (e: FormEvent) => {
    e.preventDefault();
    m.mutate();
  };
  return (
    <form onSubmit={submit} aria-label={channel ? "Edit channel" : "New channel"}>
      <Stack>
        <TextInput label="Name" value={name} onChange={(e) => setName(e.currentTarget.value)} error={v.get("channel.display_name")} />
        <TextInput label="Webhook URL" value={url} onChange={(e) => setUrl(e.currentTarget.value)} error={v.get("channel.webhook.url")} />
        <TextInput
          label="Signing secret"
          description={webhook?.hasSigningSecret ? "set; leave empty to keep it" : "whsec_ and the base64 of 24 to 64 bytes; the receiver checks each notification with it"}
          value={secret}
          onChange={(e) => setSecret(e.currentTarget.value)}
          error={v.get("channel.webhook.signing_secret")}
          autoComplete="off"
        />
        {m.isError && (
          <Alert color="red" role="alert" title="Not saved">
            {v.size ? [...v].map(([f, d]) => `${f}: ${d}`).join("; ") : errorText(m.error)}
          </Alert>
        )}
        <Group justify="flex-end">
          <Button type="submit" loading={m.isPending}>
            Save channel
          </Button>
        </Group>
      </Stack>
    </form>
  );
}

function Channels() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const pager = usePager();
  const [editing, setEditing] = useState<Channel | "new">();
  const q = useQuery({ queryKey: ["channels", pager.token], queryFn: () => clients.alerting.listChannels({ pageSize: 100, pageToken: pager.token }) });
  const test = useMutation({ mutationFn: (id: string) => clients.alerting.testChannel({ id }) });
  const del = useMutation({ mutationFn: (id: string) => clients.alerting.deleteChannel({ id }), onSuccess: () => queryClient.invalidateQueries({ queryKey: ["channels"] }) });
  const editor = canEdit(identity.role);
  return (
    <Stack>
      {editor && (
        <Group justify="flex-end">
          <Button onClick={() => setEditing("new")}>New webhook channel</Button>
        </Group>
      )}
      <ErrorAlert error={q.error ?? del.error ?? test.error} />
      {test.data && (
        <Alert color={test.data.delivered ? "green" : "red"} role="status" title="Test notification">
          {test.data.delivered ? "Delivered." : `Not delivered: ${test.data.error}`}
        </Alert>
      )}
      <Table striped aria-label="Alert channels">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Name</Table.Th>
            <Table.Th>Kind</Table.Th>
            <Table.Th>Destination</Table.Th>
            {editor && <Table.Th>Actions</Table.Th>}
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {(q.data?.channels ?? []).map((c) => (
            <Table.Tr key={c.id}>
              <Table.Td>{c.displayName || c.id}</Table.Td>
              <Table.Td>{c.kind.case ?? "—"}</Table.Td>
              <Table.Td>{c.kind.case === "webhook" ? c.kind.value.url : c.kind.case === "email" ? c.kind.value.to.join(", ") : "—"}</Table.Td>
              {editor && (
                <Table.Td>
                  <Group gap={4} wrap="nowrap">
                    <Button size="compact-xs" variant="default" onClick={() => test.mutate(c.id)} loading={test.isPending && test.variables === c.id} aria-label={`Test channel ${c.displayName || c.id}`}>
                      Test
                    </Button>
                    {c.kind.case === "webhook" && (
                      <Button size="compact-xs" variant="default" onClick={() => setEditing(c)} aria-label={`Edit channel ${c.displayName || c.id}`}>
                        Edit
                      </Button>
                    )}
                    <Button size="compact-xs" variant="outline" color="red.9" aria-label={`Delete channel ${c.displayName || c.id}`} onClick={() => window.confirm("Delete this channel?") && del.mutate(c.id)}>
                      Delete
                    </Button>
                  </Group>
                </Table.Td>
              )}
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
      <Modal opened={!!editing} onClose={() => setEditing(undefined)} title={editing === "new" ? "New channel" : "Edit channel"} size="lg">
        {editing && <ChannelForm channel={editing === "new" ? undefined : editing} onDone={() => setEditing(undefined)} />}
      </Modal>
    </Stack>
  );
}

export function Alerts() {
  return (
    <Stack>
      <Title order={2}>Incidents and alerts</Title>
      <Tabs defaultValue="incidents" keepMounted={false}>
        <Tabs.List>
          <Tabs.Tab value="incidents">Incidents</Tabs.Tab>
          <Tabs.Tab value="rules">Rules</Tabs.Tab>
          <Tabs.Tab value="channels">Channels</Tabs.Tab>
        </Tabs.List>
        <Tabs.Panel value="incidents" pt="sm">
          <Incidents />
        </Tabs.Panel>
        <Tabs.Panel value="rules" pt="sm">
          <Rules />
        </Tabs.Panel>
        <Tabs.Panel value="channels" pt="sm">
          <Channels />
        </Tabs.Panel>
      </Tabs>
    </Stack>
  );
}
