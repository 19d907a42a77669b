package api

import (
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
	"github.com/cronmesh/cronmesh/libs/targetcheck"
	"github.com/cronmesh/cronmesh/services/dispatcher/internal/store"
)

func httpTarget(url, secret string) *registryv1.Target {
	return &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Method: "POST", Url: url, SigningSecret: secret}}}
}

func TestRedriven(t *testing.T) {
	t.Parallel()
	last := &dispatchv1.DispatchRequest{ExecutionId: uuid.NewString(), Attempt: 6, Target: httpTarget("https://a.example", "whsec_a"), Priority: registryv1.Priority_PRIORITY_HIGH}
	before := proto.Clone(last)
	override := httpTarget("https://b.example", "whsec_b")
	got := redriven(last, override)
	require.EqualValues(t, 7, got.Attempt, "attempt numbers go on: events of the redrive are not the old ones'")
	require.EqualValues(t, 7, got.FirstAttempt, "the retry policy counts from the redrive")
	require.Equal(t, last.ExecutionId, got.ExecutionId)
	require.Equal(t, last.Priority, got.Priority)
	require.True(t, proto.Equal(override, got.Target), "got %v", got.Target)
	require.True(t, proto.Equal(before, last), "the dead letter's request is not modified")
}

func TestCheckOverride(t *testing.T) {
	t.Parallel()
	policy, err := targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{})
	require.NoError(t, err)
	h := &Handler{opts: Options{Targets: targetcheck.New(policy)}}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	withHeaders := func(target *registryv1.Target, plain, secret map[string]string) *registryv1.Target {
		target.GetHttp().Headers, target.GetHttp().SecretHeaders = plain, secret
		return target
	}
	amqpTarget := &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "alpha.x", RoutingKey: "k"}}}
	tests := []struct {
		name     string
		last     *registryv1.Target
		override *registryv1.Target
		fields   []string
		want     *registryv1.Target // the checked override when fields is empty
	}{
		{"keeps the secret", httpTarget("https://a.example", secret), httpTarget("https://b.example", ""), nil, httpTarget("https://b.example", secret)},
		{"keeps secret headers at the same origin", withHeaders(httpTarget("https://a.example/x", secret), nil, map[string]string{"X-Token": "t"}),
			httpTarget("https://a.example/y", ""), nil, withHeaders(httpTarget("https://a.example/y", secret), nil, map[string]string{"X-Token": "t"})},
		{"never carries secret headers to another origin", withHeaders(httpTarget("https://a.example/x", secret), nil, map[string]string{"X-Token": "t"}),
			httpTarget("https://b.example/y", ""), []string{`target_override.http.secret_headers["X-Token"]`}, nil},
		{"traceparent", httpTarget("https://a.example", secret), withHeaders(httpTarget("https://b.example", ""), map[string]string{"traceparent": "00-x"}, nil),
			[]string{`target_override.http.headers["traceparent"]`}, nil},
		{"body limit", httpTarget("https://a.example", secret), func() *registryv1.Target {
			o := httpTarget("https://b.example", "")
			o.GetHttp().Body = string(make([]byte, targetcheck.MaxBody+1))
			return o
		}(), []string{"target_override.http.body"}, nil},
		{"no kind", httpTarget("https://a.example", secret), &registryv1.Target{}, []string{"target_override"}, nil},
		{"ftp", httpTarget("https://a.example", secret), httpTarget("ftp://a.example/", ""), []string{"target_override.http.url"}, nil},
		{"amqp into cronmesh's exchanges", httpTarget("https://a.example", secret), &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: "cronmesh.dispatch", RoutingKey: "dispatch.high"}}},
			[]string{"target_override.amqp.exchange"}, nil},
		{"amqp override", httpTarget("https://a.example", secret), amqpTarget, nil, amqpTarget},
		{"a body template that does not parse", httpTarget("https://a.example", secret), func() *registryv1.Target {
			o := httpTarget("https://b.example", "")
			o.GetHttp().Body, o.GetHttp().BodyFormat = "{{nominal}}", registryv1.BodyFormat_BODY_FORMAT_TEMPLATE
			return o
		}(), []string{"target_override.http.body"}, nil},
		{"a slot header", httpTarget("https://a.example", secret), withHeaders(httpTarget("https://b.example", ""), map[string]string{"Cronmesh-Attempt": "1"}, nil),
			[]string{`target_override.http.headers["Cronmesh-Attempt"]`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			override := proto.Clone(tt.override).(*registryv1.Target)
			got, err := h.checkOverride("alpha", override, tt.last)
			require.True(t, proto.Equal(tt.override, override), "the request's override is not modified")
			if len(tt.fields) > 0 {
				var cerr *connect.Error
				require.ErrorAs(t, err, &cerr)
				require.Equal(t, connect.CodeInvalidArgument, cerr.Code())
				var fields []string
				for _, d := range cerr.Details() {
					v, derr := d.Value()
					require.NoError(t, derr)
					for _, fv := range v.(*errdetails.BadRequest).FieldViolations {
						fields = append(fields, fv.Field)
					}
				}
				require.Equal(t, tt.fields, fields)
				return
			}
			require.NoError(t, err)
			// The checker fills defaults (timeout, content type): compare
			// what the case is about.
			switch {
			case tt.want.GetHttp() != nil:
				require.Equal(t, tt.want.GetHttp().GetUrl(), got.GetHttp().GetUrl())
				require.Equal(t, tt.want.GetHttp().GetSigningSecret(), got.GetHttp().GetSigningSecret())
				require.Equal(t, tt.want.GetHttp().GetSecretHeaders(), got.GetHttp().GetSecretHeaders())
			default:
				require.Equal(t, tt.want.GetAmqp().GetExchange(), got.GetAmqp().GetExchange())
			}
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
	policy, err := targetcheck.NewAMQPPolicy(targetcheck.AMQPPolicyOptions{})
	require.NoError(t, err)
	h, err := NewHandler(Options{Store: struct{ Store }{}, Publisher: struct{ message.Publisher }{}, Targets: targetcheck.New(policy)})
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
			var cerr *connect.Error
			require.ErrorAs(t, err, &cerr)
			var fields []string
			for _, d := range cerr.Details() {
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
