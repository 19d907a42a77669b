import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Alert, Badge, Button, Group, Modal, MultiSelect, NumberInput, PasswordInput, SegmentedControl, Select, Stack, Switch, Table, Tabs, Text, Textarea, TextInput, Title } from "@mantine/core";
import { ChannelSchema, IncidentKind, IncidentState, RuleSchema, SmtpSecurity, type Channel, type Rule } from "@cronmesh/client/alerting/v1/alert_service_pb";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { canEdit, fieldViolations } from "../api";
import { ApiForm, DataTable, ErrorAlert, JobLink, Pager, RowActions, RowButton, usePage } from "../components";
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
  const [state, setState] = useState(String(IncidentState.OPEN));
  const { pager, q } = usePage("incidents", { state }, (pageToken) => clients.alerting.listIncidents({ state: Number(state), pageSize: 50, pageToken }), 5_000);
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
      <DataTable striped label="Incidents" columns={["Opened", "State", "Kind", "Job", "Summary", "Actions"]}>
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
              <JobLink id={i.jobId} name={i.jobDisplayName} />
            </Table.Td>
            <Table.Td>{i.summary}</Table.Td>
            <Table.Td>
              {canEdit(identity.role) && i.state !== IncidentState.RESOLVED && (
                <Group gap="xs">
                  {i.state === IncidentState.OPEN && (
                    <RowButton label={`Acknowledge the incident of ${i.jobDisplayName || i.jobId}`} onClick={() => ack.mutate(i.id)}>
                      Acknowledge
                    </RowButton>
                  )}
                  <RowButton label={`Resolve the incident of ${i.jobDisplayName || i.jobId}`} onClick={() => resolve.mutate(i.id)}>
                    Resolve
                  </RowButton>
                </Group>
              )}
              {i.state === IncidentState.RESOLVED && <Text size="xs">{i.resolveReason}</Text>}
            </Table.Td>
          </Table.Tr>
        ))}
      </DataTable>
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
  return (
    <ApiForm label={rule ? "Edit rule" : "New rule"} onSubmit={() => m.mutate()} error={m.error} violations={[...v]} pending={m.isPending} submit="Save rule">
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
    </ApiForm>
  );
}

function Rules() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const [editing, setEditing] = useState<Rule | "new">();
  const { pager, q } = usePage("rules", {}, (pageToken) => clients.alerting.listRules({ pageSize: 100, pageToken }));
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
      <DataTable striped label="Alert rules" columns={["Name", "Condition", "Jobs", "Channels", "State", editor && "Actions"]}>
        {(q.data?.rules ?? []).map((r) => (
          <Table.Tr key={r.id}>
            <Table.Td>{r.displayName || r.id}</Table.Td>
            <Table.Td>{r.condition.case?.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`) ?? "—"}</Table.Td>
            <Table.Td>{[r.selector?.jobIds.join(", "), labelsText(r.selector?.labels ?? {})].filter(Boolean).join("; ") || "every job"}</Table.Td>
            <Table.Td>{r.channelIds.map((id) => names.get(id) ?? id).join(", ")}</Table.Td>
            <Table.Td>{r.disabled ? "disabled" : "enabled"}</Table.Td>
            {editor && (
              <RowActions>
                <RowButton label={`Edit rule ${r.displayName || r.id}`} onClick={() => setEditing(r)}>
                  Edit
                </RowButton>
                <RowButton label={`Delete rule ${r.displayName || r.id}`} confirm="Delete this rule?" onClick={() => del.mutate(r.id)}>
                  Delete
                </RowButton>
              </RowActions>
            )}
          </Table.Tr>
        ))}
      </DataTable>
      <Pager pager={pager} nextToken={q.data?.nextPageToken} />
      <Modal opened={!!editing} onClose={() => setEditing(undefined)} title={editing === "new" ? "New rule" : "Edit rule"} size="lg">
        {editing && <RuleForm rule={editing === "new" ? undefined : editing} channels={channels.data?.channels ?? []} onDone={() => setEditing(undefined)} />}
      </Modal>
    </Stack>
  );
}

const securityOptions = [
  { value: String(SmtpSecurity.STARTTLS), label: "STARTTLS (required)", short: "STARTTLS", port: 587 },
  { value: String(SmtpSecurity.TLS), label: "TLS from the first byte (SMTPS)", short: "TLS", port: 465 },
  { value: String(SmtpSecurity.NONE), label: "None: a relay on a trusted network only", short: "no TLS", port: 25 },
];

/** securityOf reads a channel's security; unspecified means STARTTLS, as the API treats it. */
const securityOf = (s: SmtpSecurity | undefined) => (s === undefined || s === SmtpSecurity.UNSPECIFIED ? SmtpSecurity.STARTTLS : s);

/** parseAddresses reads recipients written one a line or comma separated. */
const parseAddresses = (s: string) =>
  s
    .split(/[\n,]/)
    .map((a) => a.trim())
    .filter(Boolean);

/** channelSummary is the list's one-line description of where a channel sends. */
function channelSummary(c: Channel): string {
  switch (c.kind.case) {
    case "webhook":
      return c.kind.value.url;
    case "email": {
      const e = c.kind.value;
      const security = securityOptions.find((o) => o.value === String(securityOf(e.security)))?.short ?? "";
      const auth = e.username ? `, as ${e.username}${e.hasPassword ? " (password stored)" : ""}` : "";
      return `${e.to.join(", ")} from ${e.from}, via ${e.host}:${e.port} ${security}${auth}`;
    }
    default:
      return "—";
  }
}

type Kind = "webhook" | "email";

function ChannelForm({ channel, onDone }: { channel?: Channel; onDone: () => void }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const webhook = channel?.kind.case === "webhook" ? channel.kind.value : undefined;
  const email = channel?.kind.case === "email" ? channel.kind.value : undefined;
  const [kind, setKind] = useState<Kind>(email ? "email" : "webhook");
  const [name, setName] = useState(channel?.displayName ?? "");
  const [url, setUrl] = useState(webhook?.url ?? "");
  const [secret, setSecret] = useState("");
  const [host, setHost] = useState(email?.host ?? "");
  const [security, setSecurity] = useState(String(securityOf(email?.security)));
  const [port, setPort] = useState<number | "">(email?.port ?? 587);
  const [username, setUsername] = useState(email?.username ?? "");
  // The password is write-only: the form starts empty and sends it only
  // when typed, since an empty password keeps the stored one.
  const [password, setPassword] = useState("");
  const [from, setFrom] = useState(email?.from ?? "");
  const [to, setTo] = useState(email?.to.join("\n") ?? "");
  const recipients = parseAddresses(to);
  const m = useMutation({
    mutationFn: async () => {
      const kind_: MessageInitShape<typeof ChannelSchema>["kind"] =
        kind === "webhook"
          ? { case: "webhook", value: { url, signingSecret: secret } }
          : {
              case: "email",
              value: { host, port: port === "" ? 0 : port, security: Number(security), username, password, from, to: recipients },
            };
      const draft = create(ChannelSchema, { id: channel?.id ?? "", displayName: name, kind: kind_ });
      if (channel) await clients.alerting.updateChannel({ channel: draft });
      else await clients.alerting.createChannel({ channel: draft });
    },
    onSuccess: () => {
      void queryClient.invalidateQueries({ queryKey: ["channels"] });
      onDone();
    },
  });
  const v = m.error ? fieldViolations(m.error) : new Map<string, string>();
  // A recipient's violation names its index (channel.email.to[1]): shown
  // on the recipients field with the address it is about.
  const toErrors = [...v]
    .flatMap(([f, d]) => {
      if (f === "channel.email.to") return [d];
      const i = /^channel\.email\.to\[(\d+)\]$/.exec(f)?.[1];
      return i === undefined ? [] : [`${recipients[Number(i)] ?? `address ${Number(i) + 1}`}: ${d}`];
    })
    .join("; ");
  const changeSecurity = (x: string | null) => {
    const next = x ?? String(SmtpSecurity.STARTTLS);
    // Follow the usual port of the security unless one was typed.
    if (securityOptions.some((o) => o.value === security && o.port === port)) setPort(securityOptions.find((o) => o.value === next)?.port ?? port);
    setSecurity(next);
  };
  return (
    <ApiForm label={channel ? "Edit channel" : "New channel"} onSubmit={() => m.mutate()} error={m.error} violations={[...v]} pending={m.isPending} submit="Save channel">
      {!channel && (
        <SegmentedControl
          aria-label="Channel kind"
          value={kind}
          onChange={(x) => setKind(x as Kind)}
          data={[
            { value: "webhook", label: "Webhook" },
            { value: "email", label: "Email" },
          ]}
        />
      )}
      <TextInput label="Name" value={name} onChange={(e) => setName(e.currentTarget.value)} error={v.get("channel.display_name")} />
      {kind === "webhook" && (
        <>
          <TextInput label="Webhook URL" value={url} onChange={(e) => setUrl(e.currentTarget.value)} error={v.get("channel.webhook.url")} />
          <TextInput
            label="Signing secret"
            description={webhook?.hasSigningSecret ? "set; leave empty to keep it" : "whsec_ and the base64 of 24 to 64 bytes; the receiver checks each notification with it"}
            value={secret}
            onChange={(e) => setSecret(e.currentTarget.value)}
            error={v.get("channel.webhook.signing_secret")}
            autoComplete="off"
          />
        </>
      )}
      {kind === "email" && (
        <>
          <Group grow align="flex-start">
            <TextInput label="SMTP host" value={host} onChange={(e) => setHost(e.currentTarget.value)} error={v.get("channel.email.host")} />
            <NumberInput label="Port" min={1} max={65535} value={port} onChange={(x) => setPort(typeof x === "number" ? x : "")} error={v.get("channel.email.port")} />
          </Group>
          <Select label="Security" allowDeselect={false} value={security} onChange={changeSecurity} data={securityOptions.map(({ value, label }) => ({ value, label }))} error={v.get("channel.email.security")} />
          <Group grow align="flex-start">
            <TextInput label="Username" description="empty: no authentication" value={username} onChange={(e) => setUsername(e.currentTarget.value)} error={v.get("channel.email.username")} autoComplete="off" />
            <PasswordInput
              label="Password"
              description={email?.hasPassword ? "stored; leave empty to keep it" : "sent only to the SMTP server, never shown again"}
              value={password}
              onChange={(e) => setPassword(e.currentTarget.value)}
              error={v.get("channel.email.password")}
              autoComplete="new-password"
            />
          </Group>
          <TextInput label="From" description="the sender address" value={from} onChange={(e) => setFrom(e.currentTarget.value)} error={v.get("channel.email.from")} />
          <Textarea label="Recipients" description="1 to 50 addresses, one a line or comma separated" autosize minRows={2} value={to} onChange={(e) => setTo(e.currentTarget.value)} error={toErrors || undefined} />
        </>
      )}
    </ApiForm>
  );
}

function Channels() {
  const { clients, identity } = useSession();
  const queryClient = useQueryClient();
  const [editing, setEditing] = useState<Channel | "new">();
  const { pager, q } = usePage("channels", {}, (pageToken) => clients.alerting.listChannels({ pageSize: 100, pageToken }));
  const test = useMutation({ mutationFn: (id: string) => clients.alerting.testChannel({ id }) });
  const del = useMutation({ mutationFn: (id: string) => clients.alerting.deleteChannel({ id }), onSuccess: () => queryClient.invalidateQueries({ queryKey: ["channels"] }) });
  const editor = canEdit(identity.role);
  const names = new Map((q.data?.channels ?? []).map((c) => [c.id, c.displayName || c.id]));
  // A test's result is about the channel as it was: editing hides it.
  const edit = (c: Channel | "new") => {
    test.reset();
    setEditing(c);
  };
  return (
    <Stack>
      {editor && (
        <Group justify="flex-end">
          <Button onClick={() => edit("new")}>New channel</Button>
        </Group>
      )}
      <ErrorAlert error={q.error ?? del.error ?? test.error} />
      {test.data && (
        <Alert
          color={test.data.delivered ? "green" : "red"}
          // Mantine's light green title is too pale for WCAG AA on its background.
          styles={test.data.delivered ? { title: { color: "#1b5e20" } } : undefined}
          role="status"
          title={`Test notification to ${names.get(test.variables) ?? test.variables}`}
        >
          {test.data.delivered ? "Delivered." : `Not delivered: ${test.data.error}`}
        </Alert>
      )}
      <DataTable striped label="Alert channels" columns={["Name", "Kind", "Destination", editor && "Actions"]}>
        {(q.data?.channels ?? []).map((c) => (
          <Table.Tr key={c.id}>
            <Table.Td>{c.displayName || c.id}</Table.Td>
            <Table.Td>{c.kind.case ?? "—"}</Table.Td>
            <Table.Td>{channelSummary(c)}</Table.Td>
            {editor && (
              <RowActions>
                <RowButton label={`Test channel ${c.displayName || c.id}`} loading={test.isPending && test.variables === c.id} onClick={() => test.mutate(c.id)}>
                  Test
                </RowButton>
                {c.kind.case !== undefined && (
                  <RowButton label={`Edit channel ${c.displayName || c.id}`} onClick={() => edit(c)}>
                    Edit
                  </RowButton>
                )}
                <RowButton label={`Delete channel ${c.displayName || c.id}`} confirm="Delete this channel?" onClick={() => del.mutate(c.id)}>
                  Delete
                </RowButton>
              </RowActions>
            )}
          </Table.Tr>
        ))}
      </DataTable>
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
