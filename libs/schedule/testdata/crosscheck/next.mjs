// next.mjs prints, for each JSON line {"expr", "zone", "start", "count",
// "only"} on
// standard input, one JSON line with the next `count` times after `start`
// (strictly) according to croner and cron-parser (or only those named in
// the optional "only"), and the error each gave:
//   {"croner": {"times": [...], "error": "..."}, "cronParser": {...}}
// A library that throws after some times keeps them beside the error.
// Times are RFC 3339 in UTC with whole seconds. The Go test
// (../../crosscheck_test.go) writes the input and judges the output.
import { createInterface } from 'node:readline';
import { Cron } from 'croner';
import { CronExpressionParser } from 'cron-parser';

const iso = (d) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');

// take calls next until it has count times or the library throws; the
// times found before an error are kept.
function take(next, count) {
  const times = [];
  try {
    while (times.length < count) times.push(iso(next()));
    return { times };
  } catch (err) {
    return { times, error: String(err && err.message ? err.message : err) };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of lines) {
  if (line.trim() === '') continue;
  const { expr, zone, start, count, only } = JSON.parse(line);
  const from = new Date(start);
  const runs = (lib) => !only || only.includes(lib);
  const result = {};
  if (runs('croner')) try {
    // domAndDow false (croner's default, its legacyMode) is Vixie's OR.
    const job = new Cron(expr, { timezone: zone, domAndDow: false });
    let after = from;
    result.croner = take(() => (after = job.nextRun(after)), count);
  } catch (err) {
    result.croner = { times: [], error: String(err.message) };
  }
  if (runs('cronParser')) try {
    const it = CronExpressionParser.parse(expr, { tz: zone, currentDate: from });
    result.cronParser = take(() => it.next().toDate(), count);
  } catch (err) {
    result.cronParser = { times: [], error: String(err.message) };
  }
  out.push(JSON.stringify(result));
}
process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
