package api

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	dispatchv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatch/v1"
	dispatcherv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/dispatcher/v1"
	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/apikey"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := range n {
		h[fmt.Sprintf("X-H%d", i)] = "v"
	}
	return h
}

func httpTarget(url, secret string) *registryv1.Target {
	return &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Method: "POST", Url: url, SigningSecret: secret}}}
}

func TestRedriven(t *testing.T) {
	t.Parallel()
	amqpTarget := &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "x", RoutingKey: "k"}}}
	tests := []struct {
		name     string
		last     *registryv1.Target
		override *registryv1.Target
		want     *registryv1.Target
	}{
		{"no override keeps the target", httpTarget("https://a.example", "whsec_a"), nil, httpTarget("https://a.example", "whsec_a")},
		{"override keeps the secret", httpTarget("https://a.example", "whsec_a"), httpTarget("https://b.example", ""), httpTarget("https://b.example", "whsec_a")},
		{"override with its own secret", httpTarget("https://a.example", "whsec_a"), httpTarget("https://b.example", "whsec_b"), httpTarget("https://b.example", "whsec_b")},
		{"http override of an amqp target has no secret to keep", amqpTarget, httpTarget("https://b.example", ""), httpTarget("https://b.example", "")},
		{"amqp override", httpTarget("https://a.example", "whsec_a"), amqpTarget, amqpTarget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			last := &dispatchv1.DispatchRequest{ExecutionId: uuid.NewString(), Attempt: 6, Target: tt.last, Priority: registryv1.Priority_PRIORITY_HIGH}
			before := proto.Clone(last)
			got := redriven(last, tt.override)
			require.EqualValues(t, 7, got.Attempt, "attempt numbers go on: events of the redrive are not the old ones'")
			require.EqualValues(t, 7, got.FirstAttempt, "the retry policy counts from the redrive")
			require.Equal(t, last.ExecutionId, got.ExecutionId)
			require.Equal(t, last.Priority, got.Priority)
			require.True(t, proto.Equal(tt.want, got.Target), "got %v", got.Target)
			require.True(t, proto.Equal(before, last), "the dead letter's request is not modified")
		})
	}
}

func TestValidateTarget(t *testing.T) {
	t.Parallel()
	long := "https://a.example/" + string(make([]byte, 2048))
	tests := []struct {
		name   string
		target *registryv1.Target
		fields []string
	}{
		{"https", httpTarget("https://a.example/hook?x=1", ""), nil},
		{"http", httpTarget("http://127.0.0.1:8080/", ""), nil},
		{"no kind", &registryv1.Target{}, []string{"t"}},
		{"no url", httpTarget("", ""), []string{"t.http.url"}},
		{"ftp", httpTarget("ftp://a.example/", ""), []string{"t.http.url"}},
		{"no host", httpTarget("https:///path", ""), []string{"t.http.url"}},
		{"unparsable", httpTarget("http://[::1", ""), []string{"t.http.url"}},
		{"too long", httpTarget(long, ""), []string{"t.http.url"}},
		{"method", &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://a.example", Method: "TRACE"}}}, []string{"t.http.method"}},
		{"amqp default exchange", &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{RoutingKey: "q"}}}, nil},
		{"amqp names", &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
			Exchange: string(make([]byte, 256)), RoutingKey: string(make([]byte, 256)), ContentType: string(make([]byte, 256)),
		}}}, []string{"t.amqp.exchange", "t.amqp.routing_key", "t.amqp.content_type"}},
		{"http sizes", &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: "https://a.example", Body: string(make([]byte, reqlimit.MaxBodyBytes+1)),
			SigningSecret:       "whsec_" + string(make([]byte, 100)),
			AcceptedStatusCodes: make([]int32, reqlimit.MaxStatusCodes+1),
			Headers:             manyHeaders(reqlimit.MaxHeaders + 1),
		}}}, []string{"t.http.headers", "t.http.accepted_status_codes", "t.http.body", "t.http.signing_secret"}},
		{"http header value", &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
			Url: "https://a.example", Headers: map[string]string{"X-A": string(make([]byte, reqlimit.MaxHeaderValueBytes+1))},
		}}}, []string{"t.http.headers"}},
		{"amqp sizes", &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
			RoutingKey: "q", Body: string(make([]byte, reqlimit.MaxBodyBytes+1)), Headers: manyHeaders(reqlimit.MaxHeaders + 1),
		}}}, []string{"t.amqp.body", "t.amqp.headers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var fields []string
			for _, v := range validateTarget("t", tt.target) {
				fields = append(fields, v.Field)
			}
			require.Equal(t, tt.fields, fields)
		})
	}
}

func TestPageToken(t *testing.T) {
	t.Parallel()
	c := store.Cursor{DeadTime: time.Date(2026, 11, 21, 12, 0, 0, 123456000, time.UTC), ID: uuid.NewString()}
	got, ok := decodeToken(encodeToken(c))
	require.True(t, ok)
	require.Equal(t, c, got)
	require.Empty(t, encodeToken(store.Cursor{}))
	got, ok = decodeToken("")
	require.True(t, ok)
	require.True(t, got.IsZero())
	for _, bad := range []string{"%%%", "bm9wZQ", "MTIzLm5vdC1hLXV1aWQ"} {
		_, ok := decodeToken(bad)
		require.False(t, ok, bad)
	}
}

// TestRequestFieldCaps sends, for each capped string of the DispatchService
// requests that is not already held to a UUID, a request just over its cap:
// each fails with INVALID_ARGUMENT naming the field, before the store or
// the broker is touched (the stand-ins here would panic).
func TestRequestFieldCaps(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(Options{Store: struct{ Store }{}, Publisher: struct{ message.Publisher }{}})
	require.NoError(t, err)
	ctx := apikey.WithNamespace(t.Context(), "alpha")
	tooLong := strings.Repeat("x", 513)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"list page token", func() error {
			_, err := h.ListDeadLetters(ctx, connect.NewRequest(&dispatcherv1.ListDeadLettersRequest{PageToken: tooLong}))
			return err
		}, "page_token"},
		{"redrive id", func() error {
			_, err := h.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{Id: tooLong}))
			return err
		}, "id"},
		{"redrive override", func() error {
			_, err := h.RedriveDeadLetter(ctx, connect.NewRequest(&dispatcherv1.RedriveDeadLetterRequest{
				Id: uuid.NewString(), TargetOverride: &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
					Url: "https://a.example", Body: tooLong + string(make([]byte, reqlimit.MaxBodyBytes)),
				}}},
			}))
			return err
		}, "target_override.http.body"},
		{"purge id", func() error {
			_, err := h.PurgeDeadLetter(ctx, connect.NewRequest(&dispatcherv1.PurgeDeadLetterRequest{Id: tooLong}))
			return err
		}, "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
			var fields []string
			for _, d := range err.(*connect.Error).Details() {
				v, derr := d.Value()
				require.NoError(t, derr)
				if br, ok := v.(*errdetails.BadRequest); ok {
					for _, fv := range br.GetFieldViolations() {
						fields = append(fields, fv.GetField())
					}
				}
			}
			require.Contains(t, fields, tt.field)
		})
	}
}
