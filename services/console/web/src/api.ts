// The console's view of the five services: clients over connect-web on the
// console's own origin (the console forwards each service's path), the
// caller's identity, and the decoding of the errors the services return.
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AlertService } from "@cronmesh/client/alerting/v1/alert_service_pb";
import { DispatchService } from "@cronmesh/client/dispatcher/v1/dispatch_service_pb";
import { HistoryService } from "@cronmesh/client/history/v1/history_service_pb";
import { JobService } from "@cronmesh/client/registry/v1/job_service_pb";
import { KeyRole, KeyService } from "@cronmesh/client/registry/v1/key_service_pb";
import { TriggerService } from "@cronmesh/client/trigger/v1/trigger_service_pb";

/** Clients of every service, each call carrying the API key. */
export function makeClients(apiKey: string) {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${apiKey}`);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl: window.location.origin, interceptors: [auth] });
  return {
    jobs: createClient(JobService, transport),
    keys: createClient(KeyService, transport),
    trigger: createClient(TriggerService, transport),
    dispatcher: createClient(DispatchService, transport),
    history: createClient(HistoryService, transport),
    alerting: createClient(AlertService, transport),
  };
}

export type Clients = ReturnType<typeof makeClients>;

/** What a key may do in its namespace (cronmesh.auth.v1.Role). */
export type Role = "viewer" | "editor" | "admin";

export interface Identity {
  role: Role;
  /** The key's namespace. */
  namespace: string;
  /** The key's id, as the audit log names it. */
  keyId: string;
}

const roles: Record<number, Role> = {
  [KeyRole.ADMIN]: "admin",
  [KeyRole.EDITOR]: "editor",
  [KeyRole.VIEWER]: "viewer",
};

/**
 * whoAmI asks the registry who the key is (KeyService.GetCallerIdentity:
 * any key may call it, and it changes nothing). A wrong key fails with
 * UNAUTHENTICATED. A role this console does not know is taken as viewer:
 * it is offered nothing it might not be allowed.
 */
export async function whoAmI(c: Clients): Promise<Identity> {
  const id = await c.keys.getCallerIdentity({});
  return { role: roles[id.role] ?? "viewer", namespace: id.namespace, keyId: id.keyId };
}

/** canEdit says whether a role may change jobs, rules, channels and dead letters. */
export const canEdit = (role: Role | undefined) => role === "editor" || role === "admin";

/**
 * fieldViolations returns the google.rpc.BadRequest field violations of an
 * error, field path → description ("job.schedule.cron" → "..."). The
 * generated client has no schema for google.rpc types, so the detail is
 * read from its wire form: BadRequest { repeated FieldViolation
 * field_violations = 1 } and FieldViolation { string field = 1; string
 * description = 2 }.
 */
export function fieldViolations(err: unknown): Map<string, string> {
  const out = new Map<string, string>();
  for (const d of ConnectError.from(err).details) {
    if (!("type" in d) || d.type !== "google.rpc.BadRequest") continue;
    const r = new BinaryReader(d.value);
    while (r.pos < r.len) {
      const [no, wt] = r.tag();
      if (no !== 1 || wt !== WireType.LengthDelimited) {
        r.skip(wt);
        continue;
      }
      const v = new BinaryReader(r.bytes());
      let field = "";
      let description = "";
      while (v.pos < v.len) {
        const [n, w] = v.tag();
        if (n === 1 && w === WireType.LengthDelimited) field = v.string();
        else if (n === 2 && w === WireType.LengthDelimited) description = v.string();
        else v.skip(w);
      }
      out.set(field, out.has(field) ? `${out.get(field)}; ${description}` : description);
    }
  }
  return out;
}

/** errorText is what a failed call shows to a person. */
export function errorText(err: unknown): string {
  const e = ConnectError.from(err);
  switch (e.code) {
    case Code.Unauthenticated:
      return "The API key was refused: sign in again.";
    case Code.PermissionDenied:
      return "This key may not do that.";
    case Code.Unavailable:
      return `A service is unavailable: ${e.rawMessage}`;
    default:
      return e.rawMessage || e.message;
  }
}
