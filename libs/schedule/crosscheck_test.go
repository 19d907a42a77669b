package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The cross-check compares Next with two independent implementations, the
// npm packages croner and cron-parser (versions pinned by
// testdata/crosscheck/package-lock.json, installed by `make tools`), on
// random and hand-picked expressions, in zones with and without daylight
// saving, from random instants and from instants just before a transition.
//
// Every disagreement must be one of the documented differences below, each
// asserted for the library it belongs to, and each must actually be seen, so
// that the list stays true when a library changes:
//
//   - refusals: forms a library does not support (cron-parser has no W, no
//     L-n, no # in a list and no value listed twice, as in "1-23/7,1-31/7";
//     croner has no L-n and no LW in a list);
//   - star-step: both libraries treat a day field such as "*/10" as
//     restricted (Vixie's OR with the other day field) where Vixie cron and
//     cronmesh see a '*' (AND). The libraries must then agree with cronmesh
//     on the same set written as a range ("1-31/10");
//   - second pass: croner fires an expression that is not a single time of
//     day (a wildcard, step, range or list in second, minute or hour) in both
//     passes of a repeated hour, and cron-parser one whose hour field is a
//     wildcard ("*", "*/6"); cronmesh fires only in the first pass;
//   - gap skipped: slots in a spring-forward gap that cronmesh fires once at
//     the end of the gap, croner (same expressions as above) and cron-parser
//     drop;
//   - gap shifted: cron-parser moves a slot in a spring-forward gap forward
//     by the gap's length (02:30 → 03:30 CEST) where cronmesh fires at the
//     end of the gap (03:00 CEST).
//
// cron-parser does not handle Lord Howe's 30-minute change of offset: its
// search throws "loop limit exceeded" when it crosses one, whatever the time
// of day, or fires at wall times that do not match. It runs in that zone
// only on the cases of cronParserLordHowe, which pin that behaviour.
const (
	diffRefused      = "refused"
	diffStarStep     = "star-step day field is restricted"
	diffSecondPass   = "fires in the second pass of a repeated hour"
	diffGapSkipped   = "drops a slot in a spring-forward gap"
	diffGapShifted   = "moves a slot in a spring-forward gap by the gap's length"
	crossCheckCount  = 6
	crossCheckLibDir = "testdata/crosscheck"
)

// crossCheckLibs are the libraries and the documented differences each may
// show.
var crossCheckLibs = map[string][]string{
	"croner":     {diffRefused, diffStarStep, diffSecondPass, diffGapSkipped},
	"cronParser": {diffRefused, diffStarStep, diffSecondPass, diffGapSkipped, diffGapShifted},
}

type crossCase struct {
	Expr  string    `json:"expr"`
	Zone  string    `json:"zone"`
	Start time.Time `json:"start"`
	Count int       `json:"count"`
	// Only names the libraries to run, all when empty.
	Only []string `json:"only,omitempty"`
}

type libResult struct {
	Times []time.Time `json:"times"`
	Error string      `json:"error"`
}

// TestCrossCheck runs the cross-check described above; it fails, rather than
// skips, when node or the pinned packages are missing.
func TestCrossCheck(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the cross-check needs node")
	for _, pkg := range []string{"croner", "cron-parser"} {
		_, err := os.Stat(filepath.Join(crossCheckLibDir, "node_modules", pkg, "package.json"))
		require.NoError(t, err, "%s is not installed: run `make tools` (npm ci in libs/schedule/%s)", pkg, crossCheckLibDir)
	}

	cases := crossCheckCases(t, rand.New(rand.NewPCG(7, 8)))
	began := time.Now()
	results := runCrossCheck(t, node, cases)
	t.Logf("next.mjs took %s", time.Since(began))
	seen := map[string]map[string]int{}
	for lib := range crossCheckLibs {
		seen[lib] = map[string]int{}
	}
	agreed, quartzAgreed := 0, map[string]int{}
	lordHowe := len(cases) - len(cronParserLordHowe)
	for i, lh := range cronParserLordHowe {
		require.Equal(t, map[string]libResult{"cronParser": lh.want}, results[lordHowe+i], "cron-parser on %q in Lord Howe", lh.Expr)
		c := mustCron(t, lh.Expr)
		require.NotEqual(t, utcStrings(lh.want.Times), utcStrings(NewCron(c, loadLocation(t, lh.Zone)).NextN(lh.Start, lh.Count)))
	}
	cases, results = cases[:lordHowe], results[:lordHowe]
	for i, cc := range cases {
		for lib, res := range results[i] {
			diffs := judgeCrossCheck(t, cc, lib, res)
			if len(diffs) == 0 {
				agreed++
				if strings.ContainsAny(cc.Expr, "LW#") {
					quartzAgreed[lib]++
				}
			}
			for _, d := range diffs {
				require.Contains(t, crossCheckLibs[lib], d, "%s shows an undocumented difference on %q in %s", lib, cc.Expr, cc.Zone)
				seen[lib][d]++
			}
		}
	}
	t.Logf("%d cases, %d library results agree exactly (%v with L, W or #); documented differences seen: %v", len(cases), agreed, quartzAgreed, seen)
	require.Greater(t, agreed, len(cases), "most results must agree exactly")
	require.Greater(t, quartzAgreed["croner"], 300, "croner must agree on many expressions with L, W or #")
	require.Greater(t, quartzAgreed["cronParser"], 150, "cron-parser must agree on many expressions with L or #")
	for lib, diffs := range crossCheckLibs {
		for _, d := range diffs {
			require.Positive(t, seen[lib][d], "%s: documented difference %q never seen; is it still true?", lib, d)
		}
	}
}

// runCrossCheck runs testdata/crosscheck/next.mjs once over all cases.
func runCrossCheck(t *testing.T, node string, cases []crossCase) []map[string]libResult {
	t.Helper()
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, cc := range cases {
		require.NoError(t, enc.Encode(cc))
	}
	// go test caches a passing result until the files the test read
	// change; node reads these in a process of its own.
	for _, name := range []string{"next.mjs", "package-lock.json"} {
		_, err := os.ReadFile(filepath.Join(crossCheckLibDir, name))
		require.NoError(t, err)
	}
	cmd := exec.CommandContext(t.Context(), node, "next.mjs")
	cmd.Dir = crossCheckLibDir
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "next.mjs: %s", stderr.String())
	var results []map[string]libResult
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r map[string]libResult
		require.NoError(t, dec.Decode(&r))
		results = append(results, r)
	}
	require.Len(t, results, len(cases))
	return results
}

// crossCheckZones have no daylight saving (UTC, Asia/Kolkata with its
// half-hour offset), a one-hour shift on either hemisphere, or Lord Howe's
// 30-minute shift.
var crossCheckZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}

// crossCheckTransitions are the 2026 daylight-saving changes of the zones
// above, as instants.
var crossCheckTransitions = map[string][]string{
	"Europe/Berlin":       {"2026-03-29T01:00:00Z", "2026-10-25T01:00:00Z"},
	"America/New_York":    {"2026-03-08T07:00:00Z", "2026-11-01T06:00:00Z"},
	"Australia/Lord_Howe": {"2026-04-04T15:00:00Z", "2026-10-03T15:30:00Z"},
}

// crossCheckExprs are written by hand: each Quartz form, combinations with
// the OR rule, and slots inside the gaps and repeated hours of the zones.
var crossCheckExprs = []string{
	"* * * * *", "*/15 * * * *", "0 9 * * 1-5", "0 0 1,15 * MON", "0 0 */10 * MON", "0 0 13 * FRI",
	"0 0 L * *", "0 0 LW * *", "0 0 15W * *", "0 0 1W * *", "0 0 31W * *", "0 0 1W,15W * *", "0 0 1,L * *",
	"0 0 * * 5L", "0 0 * * FRIL", "0 0 * * 1#2", "0 0 * * MON#2", "0 0 * * 5#5", "0 0 ? * 5L",
	"0 0 L * 5L", "0 0 13 * 5#2", "0 0 L 2 *", "0 0 */10 * 5#2", "0 0 */7 * 0L",
	"30 2 * * *", "0 2 * * *", "0 3 * * *", "30 1 * * *", "*/30 * * * *", "15,45 1-3 * * *", "30 2,3 * * *",
	"0 30 2 * * *", "*/20 30 2 * * *", "30 2 * 3 0L", "30 2 * 10 SUNL", "30 2 * 3 0#2", "30 1 * 11 0#1",
	"0 2 * 10 SUN#1", "15 2 * 4 0#1", "45 1 * 4 0#1", "*/10 1-2 * 4,10 0#1",
	// Refused by one library or the other.
	"0 0 L-3 * *", "0 0 L-0 * *", "0 0 L,LW * *", "0 0 * * 1#2,5L",
}

// cronParserLordHowe pins what cron-parser does across Lord Howe's changes
// (02:00 → 02:30 on the first Sunday of October, 02:00 → 01:30 on the first
// Sunday of April), where cronmesh and croner agree.
var cronParserLordHowe = []struct {
	crossCase
	want libResult
}{
	{
		// Across the April change: the search gives up after 23:00 on the
		// Saturday.
		crossCase{Expr: "0 23 * * *", Zone: "Australia/Lord_Howe", Start: ts("2026-04-03T13:00:00Z"), Count: 3, Only: []string{"cronParser"}},
		libResult{Times: []time.Time{ts("2026-04-04T12:00:00Z")}, Error: "Invalid expression, loop limit exceeded"},
	},
	{
		// Across the October change: 03:00 and 03:10 do not match hour 1-2;
		// cronmesh fires 02:30 (the end of the gap, 15:30Z) and 02:40.
		crossCase{Expr: "*/10 1-2 * 4,10 0#1", Zone: "Australia/Lord_Howe", Start: ts("2026-10-03T15:15:00Z"), Count: 3, Only: []string{"cronParser"}},
		libResult{Times: []time.Time{ts("2026-10-03T15:20:00Z"), ts("2026-10-03T16:00:00Z"), ts("2026-10-03T16:10:00Z")}},
	},
}

func crossCheckCases(t *testing.T, r *rand.Rand) []crossCase {
	exprs := slices.Clone(crossCheckExprs)
	for len(exprs) < 160 {
		exprs = append(exprs, genCrossExpr(r))
	}
	var cases []crossCase
	for _, expr := range exprs {
		c, err := ParseCron(expr)
		if err != nil {
			continue // cannot fire: nothing to compare
		}
		for _, zone := range crossCheckZones {
			var only []string
			if zone == "Australia/Lord_Howe" {
				only = []string{"croner"}
			}
			start := ts("2020-01-01T00:00:00Z").Add(time.Duration(r.Int64N(int64(12 * 365 * 24 * time.Hour)))).Truncate(time.Second)
			cases = append(cases, crossCase{Expr: c.String(), Zone: zone, Start: start, Count: crossCheckCount, Only: only})
			if trs := crossCheckTransitions[zone]; trs != nil {
				// From 1 to 50 hours before a transition, so that frequent
				// expressions cross it within their next 8 slots.
				tr := ts(trs[r.IntN(len(trs))])
				start := tr.Add(-time.Duration(1+r.IntN(50*60)) * time.Minute)
				cases = append(cases, crossCase{Expr: c.String(), Zone: zone, Start: start, Count: crossCheckCount, Only: only})
			}
		}
	}
	require.Greater(t, len(cases), 1000)
	for _, lh := range cronParserLordHowe {
		cases = append(cases, lh.crossCase)
	}
	return cases
}

// genCrossExpr writes a random expression in the syntax all three
// implementations share (the refusals are covered by crossCheckExprs and
// crossRefuses), the day fields often using the Quartz forms.
func genCrossExpr(r *rand.Rand) string {
	pick := func(options ...string) string { return options[r.IntN(len(options))] }
	var fields []string
	if r.IntN(4) == 0 {
		fields = append(fields, pick("0", "*/15", "10,40", "*/20", "30"))
	}
	fields = append(fields,
		pick("*", "0", "30", "*/15", "*/7", "5-20/5", "0,30", "10-12", "45"),
		pick("*", "0", "2", "3", "1-3", "*/6", "9-17", "2,14", "23", "1"),
	)
	dom := pick("*", "?", "*", "*/10")
	if r.IntN(2) == 0 {
		items := make([]string, 1+r.IntN(2))
		for i := range items {
			d := 1 + r.IntN(31)
			switch r.IntN(6) {
			case 0:
				items[i] = fmt.Sprint(d)
			case 1:
				items[i] = fmt.Sprintf("%d-%d", d, d+r.IntN(32-d))
			case 2:
				items[i] = "L"
			case 3, 4:
				items[i] = fmt.Sprintf("%dW", d)
			default:
				items[i] = fmt.Sprintf("1-%d/7", 15+r.IntN(17))
			}
		}
		// cron-parser refuses a value written twice ("L,L").
		slices.Sort(items)
		dom = strings.Join(slices.Compact(items), ",")
	}
	month := pick("*", "*", "*", "2", "3,10", "1-6", "*/3", "FEB", "MAR-OCT", "4,11")
	dow := pick("*", "?", "*", "*/2")
	if r.IntN(2) == 0 {
		w := r.IntN(8)
		day := fmt.Sprint(w)
		if w < 7 && r.IntN(3) == 0 {
			day = dowSpec.names[w]
		}
		switch r.IntN(5) {
		case 0:
			dow = day
		case 1:
			dow = pick("1-5", "MON-FRI", "0,6", "SAT,SUN", "2-4")
		case 2:
			dow = day + "L"
		default:
			dow = fmt.Sprintf("%s#%d", day, 1+r.IntN(5))
		}
	}
	return strings.Join(append(fields, dom, month, dow), " ")
}

// crossRefuses reports whether lib is known to refuse expr.
func crossRefuses(lib, expr string) bool {
	f := strings.Fields(expr)
	dom, dow := f[len(f)-3], f[len(f)-1]
	switch lib {
	case "croner":
		return strings.Contains(dom, "L-") || strings.Contains(dom, "LW") && strings.Contains(dom, ",")
	case "cronParser":
		return strings.Contains(dom, "W") || strings.Contains(dom, "L-") ||
			strings.Contains(dow, "#") && strings.Contains(dow, ",") || hasOverlappingItems(expr)
	}
	return false
}

// hasOverlappingItems reports whether a field lists a value twice, as in
// "1-23/7,1-31/7" (cron-parser refuses "duplicate values").
func hasOverlappingItems(expr string) bool {
	f := strings.Fields(expr)
	specs := []*fieldSpec{&secondSpec, &minuteSpec, &hourSpec, &domSpec, &monthSpec, &dowSpec}
	if len(f) == 5 {
		specs = specs[1:]
	}
	for i, field := range f {
		var seen uint64
		for item := range strings.SplitSeq(field, ",") {
			b, reason := parseItem(item, specs[i])
			if reason != "" {
				continue // a Quartz form; duplicates are not generated
			}
			if seen&b != 0 {
				return true
			}
			seen |= b
		}
	}
	return false
}

// starStepAsRange rewrites day fields such as "*/10" as the same set written
// as a range, which cronmesh treats as restricted like the libraries do.
func starStepAsRange(expr string) string {
	f := strings.Fields(expr)
	n := len(f)
	if strings.HasPrefix(f[n-3], "*/") {
		f[n-3] = "1-31" + f[n-3][1:]
	}
	if strings.HasPrefix(f[n-1], "*/") {
		f[n-1] = "0-7" + f[n-1][1:]
	}
	return strings.Join(f, " ")
}

func hourField(expr string) string {
	f := strings.Fields(expr)
	return f[len(f)-4]
}

// isSingleTime reports whether second, minute and hour are single values,
// croner's "fixed-time job".
func isSingleTime(expr string) bool {
	f := strings.Fields(expr)
	for _, field := range f[:len(f)-3] {
		if strings.ContainsAny(field, "*?,-/") {
			return false
		}
	}
	return true
}

// judgeCrossCheck compares one library's result with Next and returns the
// documented differences that explain every disagreement; it fails the test
// on anything it cannot explain.
func judgeCrossCheck(t *testing.T, cc crossCase, lib string, res libResult) []string {
	t.Helper()
	what := fmt.Sprintf("%s on %q in %s after %s", lib, cc.Expr, cc.Zone, cc.Start.Format(time.RFC3339))
	if crossRefuses(lib, cc.Expr) {
		require.NotEmpty(t, res.Error, "%s: expected a refusal, got %v", what, res.Times)
		return []string{diffRefused}
	}

	loc := loadLocation(t, cc.Zone)
	ours := NewCron(mustCron(t, cc.Expr), loc).NextN(cc.Start, cc.Count)
	c := mustCron(t, starStepAsRange(cc.Expr))
	var diffs []string
	if asRange := NewCron(c, loc).NextN(cc.Start, cc.Count); !slices.EqualFunc(ours, asRange, time.Time.Equal) {
		diffs = append(diffs, diffStarStep)
		ours = asRange
	}
	require.NotEmpty(t, ours, what)
	require.Empty(t, res.Error, what)
	require.NotEmpty(t, res.Times, what)

	// Compare the two lists up to the earlier of their last times: one
	// list may hold extra or fewer slots before that.
	horizon := min(ours[len(ours)-1].Unix(), res.Times[len(res.Times)-1].Unix())
	oursSet, libSet := map[int64]bool{}, map[int64]bool{}
	for _, o := range ours {
		oursSet[o.Unix()] = true
	}
	for _, l := range res.Times {
		libSet[l.Unix()] = true
	}
	var unexplained []string
	explain := func(d string) {
		if !slices.Contains(diffs, d) {
			diffs = append(diffs, d)
		}
	}
	for _, o := range ours {
		if u := o.Unix(); u <= horizon && !libSet[u] {
			// Ours only: the end of a gap in which some slot matched.
			if _, _, ok := gapBefore(o); ok && !matchesCivil(c, wallSeconds(o)) {
				explain(diffGapSkipped)
				continue
			}
			unexplained = append(unexplained, "only cronmesh: "+o.In(loc).Format(time.RFC3339))
		}
	}
	for _, l := range res.Times {
		if u := l.Unix(); u <= horizon && !oursSet[u] {
			lt := l.In(loc)
			switch {
			case !isFirstOccurrence(lt) && matchesCivil(c, wallSeconds(lt)):
				explain(diffSecondPass)
			case gapShifted(c, lt):
				explain(diffGapShifted)
			default:
				unexplained = append(unexplained, "only "+lib+": "+lt.Format(time.RFC3339))
			}
		}
	}
	require.Empty(t, unexplained, "%s\ncronmesh: %v\n%s: %v", what, utcStrings(ours), lib, utcStrings(res.Times))
	if lib == "cronParser" && !strings.HasPrefix(hourField(cc.Expr), "*") {
		// cron-parser repeats only expressions with a wildcard hour.
		require.NotContains(t, diffs, diffSecondPass, what)
	}
	if lib == "croner" && isSingleTime(cc.Expr) {
		// croner documents cronmesh's rule for a single time of day.
		require.NotContains(t, diffs, diffSecondPass, what)
		require.NotContains(t, diffs, diffGapSkipped, what)
	}
	sort.Strings(diffs)
	return diffs
}

// matchesCivil reports whether the wall time w (civil seconds) matches c.
func matchesCivil(c *Cron, w int64) bool {
	got, ok := c.nextCivil(w, w)
	return ok && got == w
}

// gapShifted reports whether t is a matching wall time in a spring-forward
// gap moved forward by the gap's length: the clocks jumped forward at most a
// gap's length before t, and t's wall time minus the jump matches.
func gapShifted(c *Cron, t time.Time) bool {
	start, _ := t.ZoneBounds()
	if start.IsZero() || t.Sub(start) > 3*time.Hour {
		return false
	}
	gapFrom, gapTo, ok := gapBefore(start)
	if !ok {
		return false
	}
	w := wallSeconds(t) - (gapTo - gapFrom)
	return w >= gapFrom && w < gapTo && matchesCivil(c, w)
}
