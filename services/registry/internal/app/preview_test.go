package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// TestPreviewScheduleJSON sends the exact JSON of the API documentation, as
// `buf curl` would, and checks the answer's shape and values.
func TestPreviewScheduleJSON(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	body := `{"schedule": {"cron": "0 9 * * 1-5", "timeZone": "Europe/Berlin"}, "from": "2026-03-28T00:00:00Z", "count": 10}`
	req, err := http.NewRequest(http.MethodPost, reg.baseURL+"/cronmesh.registry.v1.JobService/PreviewSchedule", bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyAlpha)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))
	var got struct{ Times []string }
	require.NoError(t, json.Unmarshal(raw, &got))
	// Berlin moves to CEST (UTC+2) on Sunday 2026-03-29, so 09:00 local is
	// 07:00Z from Monday on.
	require.Equal(t, []string{
		"2026-03-30T07:00:00Z", "2026-03-31T07:00:00Z", "2026-04-01T07:00:00Z", "2026-04-02T07:00:00Z", "2026-04-03T07:00:00Z",
		"2026-04-06T07:00:00Z", "2026-04-07T07:00:00Z", "2026-04-08T07:00:00Z", "2026-04-09T07:00:00Z", "2026-04-10T07:00:00Z",
	}, got.Times)
}

func TestPreviewScheduleDST(t *testing.T) {
	t.Parallel()
	reg := startRegistry(t)
	client := reg.client(keyAlpha)
	at := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return ts
	}
	for _, tc := range []struct {
		name string
		cron string
		from string
		want []string
	}{
		{
			// 02:30 does not exist on 2026-03-29 in Berlin: it fires once at
			// 03:00 CEST, the first instant after the gap.
			name: "spring-forward gap", cron: "30 2 * * *", from: "2026-03-28T12:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			// 02:30 happens twice on 2026-10-25 in Berlin: it fires at the
			// first (CEST, 00:30Z), not again at 02:30 CET (01:30Z).
			name: "repeated autumn hour", cron: "30 2 * * *", from: "2026-10-24T12:00:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			// The last Sunday of March (0L) is the spring-forward day.
			name: "last Sunday of March", cron: "30 2 * 3 0L", from: "2026-03-01T00:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2027-03-28T01:00:00Z"},
		},
		{
			// The nearest weekday to the 15th: Sunday 2026-02-15 moves to
			// Monday the 16th; the last weekday of February is Friday the
			// 27th (the 28th is a Saturday).
			name: "W and LW", cron: "0 9 15W,LW 2 *", from: "2026-02-01T00:00:00Z",
			want: []string{"2026-02-16T08:00:00Z", "2026-02-27T08:00:00Z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := client.PreviewSchedule(context.Background(), connect.NewRequest(&registryv1.PreviewScheduleRequest{
				Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: tc.cron}, TimeZone: "Europe/Berlin"},
				From:     timestamppb.New(at(tc.from)),
				Count:    int32(len(tc.want)),
			}))
			require.NoError(t, err)
			var got []string
			for _, ts := range resp.Msg.Times {
				got = append(got, ts.AsTime().Format(time.RFC3339))
			}
			require.Equal(t, tc.want, got)
		})
	}

	_, err := client.PreviewSchedule(context.Background(), connect.NewRequest(&registryv1.PreviewScheduleRequest{
		Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 9 * * 1-5"}, TimeZone: "Europe/Berlln"},
	}))
	require.Equal(t, []string{"schedule.time_zone"}, rpctest.Violations(t, err))
	_, err = client.PreviewSchedule(context.Background(), connect.NewRequest(&registryv1.PreviewScheduleRequest{
		Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "0 9 * * 1#6"}},
	}))
	require.Equal(t, []string{"schedule.cron"}, rpctest.Violations(t, err))
	require.ErrorContains(t, err, `invalid day-of-week "1#6": occurrence 6 must be between 1 and 5`)
	_, err = client.PreviewSchedule(context.Background(), connect.NewRequest(&registryv1.PreviewScheduleRequest{
		Schedule: &registryv1.Schedule{Kind: &registryv1.Schedule_Cron{Cron: "@hourly"}}, Count: 1001,
	}))
	require.Equal(t, []string{"count"}, rpctest.Violations(t, err))
}
