// Formatting of the API's times, durations and enums for people.
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";

export const toDate = (t: Timestamp | undefined) => (t ? timestampDate(t) : undefined);

/** when formats a time in the browser's zone, or in timeZone when given. */
export function when(t: Timestamp | Date | undefined, timeZone?: string): string {
  if (!t) return "—";
  const d = t instanceof Date ? t : timestampDate(t);
  return d.toLocaleString(undefined, { timeZone, dateStyle: "medium", timeStyle: "medium" });
}

/** offset is the UTC offset of t in timeZone ("GMT+2"): it changes at DST. */
export function offset(t: Timestamp, timeZone: string): string {
  const parts = new Intl.DateTimeFormat("en-US", { timeZone, timeZoneName: "shortOffset" }).formatToParts(timestampDate(t));
  return parts.find((p) => p.type === "timeZoneName")?.value ?? "";
}

export function durationMs(d: Duration | undefined): number | undefined {
  if (!d) return undefined;
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

export function duration(d: Duration | undefined): string {
  const ms = durationMs(d);
  if (ms === undefined) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** parseDuration reads "90s", "5m", "1h30m", "250ms" into a Duration. */
export function parseDuration(s: string): Duration | undefined {
  const text = s.trim();
  if (!text) return undefined;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let ms = 0;
  let consumed = 0;
  for (const m of text.matchAll(re)) {
    const n = Number(m[1]);
    ms += n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as "ms" | "s" | "m" | "h"];
    consumed += m[0].length;
  }
  if (consumed !== text.length) throw new Error(`"${s}" is not a duration such as 90s, 5m or 1h30m`);
  const seconds = Math.floor(ms / 1000);
  return { $typeName: "google.protobuf.Duration", seconds: BigInt(seconds), nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

export function formatDuration(d: Duration | undefined): string {
  const ms = durationMs(d);
  if (ms === undefined) return "";
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** fromLocalInput turns a datetime-local input's value into a Timestamp. */
export function fromLocalInput(v: string): Timestamp | undefined {
  if (!v) return undefined;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? undefined : timestampFromDate(d);
}

/** enumLabel turns a generated enum's member name (DEAD_LETTERED) into "dead lettered". */
export function enumLabel(names: Record<number, string>, value: number): string {
  return (names[value] ?? String(value)).toLowerCase().replaceAll("_", " ");
}

/** labelsText and parseLabels read and write "k=v, k2=v2". */
export const labelsText = (labels: Record<string, string>) =>
  Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");

export function parseLabels(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s.split(/[,\n]/)) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf("=");
    if (i < 0) out[p] = "";
    else out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
  }
  return out;
}

/** percentile of sorted numbers (nearest rank). */
export function percentile(sorted: number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
