package slotinfo_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	"github.com/cronmesh/cronmesh/libs/execid"
	"github.com/cronmesh/cronmesh/libs/slotinfo"
)

const jobID = "0195b9a4-0000-7000-8000-000000000001"

var nominal = time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC)

func testSlot() slotinfo.Slot {
	return slotinfo.Slot{
		NominalTime: nominal,
		FireTime:    nominal.Add(90*time.Minute + 250*time.Millisecond),
		Attempt:     2,
		JobID:       jobID,
		ExecutionID: execid.For(jobID, nominal),
		Namespace:   "alpha",
		TriggerKind: "catch-up",
	}
}

func TestFromRequestAndHeaders(t *testing.T) {
	t.Parallel()
	req := &dispatchv1.DispatchRequest{
		ExecutionId: execid.For(jobID, nominal),
		JobId:       jobID,
		Namespace:   "alpha",
		Attempt:     2,
		NominalTime: timestamppb.New(nominal.In(time.FixedZone("CEST", 7200))),
		FireTime:    timestamppb.New(nominal.Add(90*time.Minute + 250*time.Millisecond)),
		TriggerKind: dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP,
	}
	s := slotinfo.FromRequest(req)
	require.Equal(t, []slotinfo.Header{
		{Name: "cronmesh-nominal-time", Value: "2026-03-29T03:00:00Z"},
		{Name: "cronmesh-fire-time", Value: "2026-03-29T04:30:00.25Z"},
		{Name: "cronmesh-attempt", Value: "2"},
		{Name: "cronmesh-job-id", Value: jobID},
		{Name: "cronmesh-execution-id", Value: req.ExecutionId},
		{Name: "cronmesh-trigger-kind", Value: "catch-up"},
	}, s.Headers())

	// The nominal time header is the string the execution id derives from:
	// a receiver checks one against the other.
	at, err := time.Parse(time.RFC3339Nano, s.Headers()[0].Value)
	require.NoError(t, err)
	require.Equal(t, req.ExecutionId, execid.For(jobID, at))

	req.FireTime, req.Attempt = nil, 0
	h := slotinfo.FromRequest(req).Headers()
	require.Len(t, h, 5, "no fire time header without a fire time")
	require.Equal(t, slotinfo.Header{Name: "cronmesh-attempt", Value: "1"}, h[1])
}

func TestTriggerKindName(t *testing.T) {
	t.Parallel()
	for kind, want := range map[dispatchv1.TriggerKind]string{
		dispatchv1.TriggerKind_TRIGGER_KIND_UNSPECIFIED: "unspecified",
		dispatchv1.TriggerKind_TRIGGER_KIND_SCHEDULED:   "scheduled",
		dispatchv1.TriggerKind_TRIGGER_KIND_MANUAL:      "manual",
		dispatchv1.TriggerKind_TRIGGER_KIND_BACKFILL:    "backfill",
		dispatchv1.TriggerKind_TRIGGER_KIND_CATCH_UP:    "catch-up",
	} {
		require.Equal(t, want, slotinfo.TriggerKindName(kind))
	}
}

func TestIsReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"cronmesh-attempt": true, "Cronmesh-Nominal-Time": true, "CRONMESH-X": true, "cronmesh-": true,
		"cronmesh": false, "x-cronmesh-attempt": false, "webhook-id": false, "": false,
	} {
		require.Equal(t, want, slotinfo.IsReservedHeader(name), name)
	}
}

func TestTemplateRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, want string
		json            bool
	}{
		{"no placeholders", `{"a":{"b":1}}`, `{"a":{"b":1}}`, true},
		{"every placeholder",
			`{{nominal_time}}|{{fire_time}}|{{attempt}}|{{job_id}}|{{execution_id}}|{{trigger_kind}}|{{namespace}}`,
			"2026-03-29T03:00:00Z|2026-03-29T04:30:00.25Z|2|" + jobID + "|" + execid.For(jobID, nominal) + "|catch-up|alpha", false},
		{"spaces inside the braces", `{"slot":"{{ nominal_time }}","attempt":{{attempt}}}`, `{"slot":"2026-03-29T03:00:00Z","attempt":2}`, true},
		{"escape", `{{{{nominal_time}} is {{nominal_time}}`, `{{nominal_time}} is 2026-03-29T03:00:00Z`, false},
		{"closing braces and lone braces are literal", `}} { {x} }}}`, `}} { {x} }}}`, false},
		{"empty", ``, ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := slotinfo.Parse(tc.src)
			require.NoError(t, err)
			got, err := tmpl.Render(testSlot(), tc.json)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			require.LessOrEqual(t, len(got), tmpl.MaxSize())
		})
	}
}

func TestTemplateSyntaxErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		offset    int
		reason    string
	}{
		{"unknown name", `{"a":"{{nominal}}"}`, 6, `unknown placeholder "nominal"`},
		{"go template syntax", `{{.NominalTime}}`, 0, `unknown placeholder ".NominalTime"`},
		{"a function call is just an unknown name", `{{ printf "%s" 1 }}`, 0, `unknown placeholder`},
		{"unclosed", `abc {{nominal_time`, 4, `is not closed`},
		{"three braces", `{{{nominal_time}}`, 0, `unknown placeholder "{nominal_time"`},
		{"empty name", `x{{}}`, 1, `unknown placeholder ""`},
		{"second one bad", `{{attempt}} {{attempts}}`, 12, `"attempts"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := slotinfo.Parse(tc.src)
			var se *slotinfo.SyntaxError
			require.True(t, errors.As(err, &se), "%v", err)
			require.Equal(t, tc.offset, se.Offset)
			require.Contains(t, se.Error(), tc.reason)
		})
	}
}

func TestTemplateBound(t *testing.T) {
	t.Parallel()
	tmpl, err := slotinfo.Parse(strings.Repeat("{{job_id}}", 1000))
	require.NoError(t, err)
	require.Equal(t, 64*1000, tmpl.MaxSize(), "each placeholder counts its longest value, not its own length")

	s := testSlot()
	got, err := tmpl.Render(s, false)
	require.NoError(t, err)
	require.Len(t, got, 36*1000)

	s.JobID = strings.Repeat("x", 65) // longer than any job id cronmesh makes
	_, err = tmpl.Render(s, false)
	require.ErrorIs(t, err, slotinfo.ErrTooLarge)
}

func TestTemplateJSONEscape(t *testing.T) {
	t.Parallel()
	tmpl, err := slotinfo.Parse(`{"ns":"{{namespace}}"}`)
	require.NoError(t, err)
	s := testSlot()
	s.Namespace = "a\"b\\c\n"
	got, err := tmpl.Render(s, true)
	require.NoError(t, err)
	require.Equal(t, `{"ns":"a\"b\\c\u000a"}`, string(got))
	got, err = tmpl.Render(s, false)
	require.NoError(t, err)
	require.Equal(t, "{\"ns\":\"a\"b\\c\n\"}", string(got))
}

func TestIsJSON(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON": true,
		"application/cloudevents+json": true, "text/json": true,
		"text/plain": false, "application/xml": false, "": false, "json": false,
	} {
		require.Equal(t, want, slotinfo.IsJSON(ct), ct)
	}
}
