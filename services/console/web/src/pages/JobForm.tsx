// The create and edit form of a job. The API checks the job: its
// google.rpc.BadRequest field violations show on the fields they name.
import { create } from "@bufbuild/protobuf";
import { Alert, Group, NumberInput, SegmentedControl, Select, Switch, Textarea, TextInput } from "@mantine/core";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { JobSchema, type Job } from "@cronmesh/client/registry/v1/job_pb";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { fieldViolations } from "../api";
import { ApiForm } from "../components";
import { formatDuration, labelsText, parseDuration, parseLabels } from "../format";
import { useSession } from "../session";

interface Fields {
  displayName: string;
  description: string;
  labels: string;
  kind: "cron" | "interval";
  cron: string;
  every: string;
  timeZone: string;
  method: string;
  url: string;
  headers: string;
  body: string;
  timeout: string;
  maxRetries: number | "";
  paused: boolean;
}

function fieldsOf(job?: Job): Fields {
  const s = job?.schedule?.kind;
  const http = job?.target?.kind.case === "http" ? job.target.kind.value : undefined;
  return {
    displayName: job?.displayName ?? "",
    description: job?.description ?? "",
    labels: labelsText(job?.labels ?? {}),
    kind: s?.case === "interval" ? "interval" : "cron",
    cron: s?.case === "cron" ? s.value : "",
    every: s?.case === "interval" ? formatDuration(s.value.every) : "",
    timeZone: job?.schedule?.timeZone ?? "",
    method: http?.method || "POST",
    url: http?.url ?? "",
    headers: labelsText(http?.headers ?? {}),
    body: http?.body ?? "",
    timeout: formatDuration(http?.timeout),
    maxRetries: job?.retryPolicy?.maxRetries ?? "",
    paused: job?.paused ?? false,
  };
}

/** Each input and the field paths whose violations it shows. */
const paths: Record<keyof Fields, string[]> = {
  displayName: ["job.display_name"],
  description: ["job.description"],
  labels: ["job.labels"],
  kind: ["job.schedule.kind", "job.schedule"],
  cron: ["job.schedule.cron"],
  every: ["job.schedule.interval"],
  timeZone: ["job.schedule.time_zone"],
  method: ["job.target.http.method"],
  url: ["job.target.http.url", "job.target"],
  headers: ["job.target.http.headers", "job.target.http.secret_headers"],
  body: ["job.target.http.body"],
  timeout: ["job.target.http.timeout"],
  maxRetries: ["job.retry_policy"],
  paused: ["job.paused"],
};

function violationOf(violations: Map<string, string>, key: keyof Fields): string | undefined {
  const found: string[] = [];
  for (const [field, description] of violations) {
    if (paths[key].some((p) => field === p || field.startsWith(`${p}.`) || field.startsWith(`${p}[`))) found.push(description);
  }
  return found.length ? found.join("; ") : undefined;
}

export function JobForm({ job, onDone }: { job?: Job; onDone: (job: Job) => void }) {
  const { clients } = useSession();
  const queryClient = useQueryClient();
  const [f, setF] = useState<Fields>(() => fieldsOf(job));
  const [violations, setViolations] = useState(new Map<string, string>());
  const [localError, setLocalError] = useState<string>();
  const set = <K extends keyof Fields>(k: K, v: Fields[K]) => setF((old) => ({ ...old, [k]: v }));

  const save = useMutation({
    mutationFn: async () => {
      const draft = create(JobSchema, {
        id: job?.id ?? "",
        etag: job?.etag ?? "",
        displayName: f.displayName,
        description: f.description,
        labels: parseLabels(f.labels),
        paused: f.paused,
        schedule: {
          timeZone: f.timeZone,
          kind: f.kind === "cron" ? { case: "cron", value: f.cron } : { case: "interval", value: { every: parseDuration(f.every) } },
        },
        target: {
          kind: {
            case: "http",
            value: { method: f.method, url: f.url, headers: parseLabels(f.headers), body: f.body, timeout: parseDuration(f.timeout) },
          },
        },
        retryPolicy: f.maxRetries === "" ? undefined : { maxRetries: f.maxRetries },
      });
      if (!job) return (await clients.jobs.createJob({ job: draft, requestId: crypto.randomUUID() })).job;
      // Paused is changed by Pause and Resume, which record who and why.
      const mask = create(FieldMaskSchema, {
        paths: ["display_name", "description", "labels", "schedule", "target", ...(f.maxRetries === "" ? [] : ["retry_policy"])],
      });
      return (await clients.jobs.updateJob({ job: draft, updateMask: mask })).job;
    },
    onSuccess: (saved) => {
      void queryClient.invalidateQueries({ queryKey: ["jobs"] });
      if (saved) onDone(saved);
    },
    onError: (err) => setViolations(fieldViolations(err)),
  });

  const submit = () => {
    setViolations(new Map());
    setLocalError(undefined);
    try {
      parseDuration(f.every);
      parseDuration(f.timeout);
    } catch (err) {
      setLocalError((err as Error).message);
      return;
    }
    save.mutate();
  };
  const err = (k: keyof Fields) => violationOf(violations, k);
  const unplaced = [...violations].filter(([field]) => !Object.values(paths).some((ps) => ps.some((p) => field === p || field.startsWith(`${p}.`) || field.startsWith(`${p}[`))));

  return (
    <ApiForm label={job ? "Edit job" : "New job"} onSubmit={submit} noValidate error={save.error} violations={unplaced} pending={save.isPending} submit={job ? "Save" : "Create job"}>
      <TextInput label="Name" value={f.displayName} onChange={(e) => set("displayName", e.currentTarget.value)} error={err("displayName")} />
      <Textarea label="Description" value={f.description} onChange={(e) => set("description", e.currentTarget.value)} error={err("description")} autosize minRows={1} />
      <TextInput label="Labels" description="key=value, separated by commas" value={f.labels} onChange={(e) => set("labels", e.currentTarget.value)} error={err("labels")} />
      <SegmentedControl
        aria-label="Schedule kind"
        value={f.kind}
        onChange={(v) => set("kind", v as Fields["kind"])}
        data={[
          { value: "cron", label: "Cron" },
          { value: "interval", label: "Every" },
        ]}
      />
      {f.kind === "cron" ? (
        <TextInput label="Cron expression" description="5 fields, or 6 with seconds first: */5 * * * *" value={f.cron} onChange={(e) => set("cron", e.currentTarget.value)} error={err("cron")} />
      ) : (
        <TextInput label="Every" description="90s, 5m, 1h" value={f.every} onChange={(e) => set("every", e.currentTarget.value)} error={err("every")} />
      )}
      <TextInput label="Time zone" description="IANA name, e.g. Europe/Paris; empty: UTC" value={f.timeZone} onChange={(e) => set("timeZone", e.currentTarget.value)} error={err("timeZone")} />
      <Group grow>
        <Select label="Method" data={["GET", "POST", "PUT", "PATCH", "DELETE"]} value={f.method} onChange={(v) => set("method", v ?? "POST")} error={err("method")} allowDeselect={false} />
        <TextInput label="Timeout" description="e.g. 10s" value={f.timeout} onChange={(e) => set("timeout", e.currentTarget.value)} error={err("timeout")} />
        <NumberInput label="Retries" min={0} value={f.maxRetries} onChange={(v) => set("maxRetries", typeof v === "number" ? v : "")} error={err("maxRetries")} />
      </Group>
      <TextInput label="Target URL" value={f.url} onChange={(e) => set("url", e.currentTarget.value)} error={err("url")} />
      <TextInput label="Headers" description="Name=value, separated by commas" value={f.headers} onChange={(e) => set("headers", e.currentTarget.value)} error={err("headers")} />
      <Textarea label="Body" value={f.body} onChange={(e) => set("body", e.currentTarget.value)} error={err("body")} autosize minRows={2} />
      {!job && <Switch label="Create paused" checked={f.paused} onChange={(e) => set("paused", e.currentTarget.checked)} />}
      {localError && (
        <Alert color="red" role="alert">
          {localError}
        </Alert>
      )}
    </ApiForm>
  );
}
