package targetcheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func webhook(url string, plain, secret map[string]string) *registryv1.Target {
	return &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{
		Url: url, Headers: plain, SecretHeaders: secret, SigningSecret: testSecret,
	}}}
}

func fields(v *rpcerr.Violations) []string {
	var out []string
	for _, fv := range v.List() {
		out = append(out, fv.Field)
	}
	return out
}

func TestMoveCredentialHeaders(t *testing.T) {
	t.Parallel()
	target := webhook("https://a.example", map[string]string{
		"AUTHORIZATION": "Bearer a", "Cookie": "c", "x-api-key": "k", "X-Plain": "p",
	}, map[string]string{"Cookie": "kept-by-secret"})
	MoveCredentialHeaders(target)
	require.Equal(t, map[string]string{"X-Plain": "p", "Cookie": "c"}, target.GetHttp().Headers,
		"a name the secret headers already give stays, for validation to report")
	require.Equal(t, map[string]string{"AUTHORIZATION": "Bearer a", "x-api-key": "k", "Cookie": "kept-by-secret"}, target.GetHttp().SecretHeaders)

	amqp := &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Headers: map[string]string{"Private-Token": "t"}}}}
	MoveCredentialHeaders(amqp)
	require.Empty(t, amqp.GetAmqp().Headers)
	require.Equal(t, map[string]string{"Private-Token": "t"}, amqp.GetAmqp().SecretHeaders)

	// A placeholder (a name read back with an empty value) takes the
	// plain value.
	placeholder := webhook("https://a.example", map[string]string{"Authorization": "new"}, map[string]string{"Authorization": ""})
	MoveCredentialHeaders(placeholder)
	require.Equal(t, map[string]string{"Authorization": "new"}, placeholder.GetHttp().SecretHeaders)
	MoveCredentialHeaders(nil)
}

func TestRedact(t *testing.T) {
	t.Parallel()
	target := webhook("https://a.example", map[string]string{"X-Plain": "p"}, map[string]string{"X-Token": "s"})
	Redact(target)
	require.Empty(t, target.GetHttp().SigningSecret)
	require.Equal(t, map[string]string{"X-Plain": "p"}, target.GetHttp().Headers)
	require.Equal(t, map[string]string{"X-Token": ""}, target.GetHttp().SecretHeaders)
	amqp := &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{SecretHeaders: map[string]string{"k": "v"}}}}
	Redact(amqp)
	require.Equal(t, map[string]string{"k": ""}, amqp.GetAmqp().SecretHeaders)
	Redact(nil)
}

func TestKeepSecrets(t *testing.T) {
	t.Parallel()
	stored := webhook("https://a.example/x", nil, map[string]string{"X-Token": "tok", "X-Other": "oth"})
	amqpStored := &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
		Exchange: "alpha.x", RoutingKey: "k", SecretHeaders: map[string]string{"X-Token": "tok"},
	}}}
	amqpTo := func(exchange string, secret map[string]string) *registryv1.Target {
		return &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{Exchange: exchange, RoutingKey: "k", SecretHeaders: secret}}}
	}
	tests := []struct {
		name       string
		target     *registryv1.Target
		stored     *registryv1.Target
		replaceSet bool
		want       map[string]string
		fields     []string
	}{
		{"omitted keeps all", webhook("https://a.example/y", nil, nil), stored, false, map[string]string{"X-Token": "tok", "X-Other": "oth"}, nil},
		{"same origin with the default port spelled out", webhook("https://A.example:443/y", nil, nil), stored, false, map[string]string{"X-Token": "tok", "X-Other": "oth"}, nil},
		{"empty value keeps that one", webhook("https://a.example/y", nil, map[string]string{"X-Token": ""}), stored, false, map[string]string{"X-Token": "tok"}, nil},
		{"a given value wins", webhook("https://a.example/y", nil, map[string]string{"X-Token": "new"}), stored, false, map[string]string{"X-Token": "new"}, nil},
		{"replace with nothing removes all", webhook("https://a.example/y", nil, nil), stored, true, nil, nil},
		{"another host", webhook("https://b.example/x", nil, nil), stored, false, map[string]string{},
			[]string{`t.http.secret_headers["X-Other"]`, `t.http.secret_headers["X-Token"]`}},
		{"another scheme", webhook("http://a.example/x", nil, map[string]string{"X-Token": ""}), stored, false, map[string]string{},
			[]string{`t.http.secret_headers["X-Token"]`}},
		{"another port", webhook("https://a.example:8443/x", nil, map[string]string{"X-Token": ""}), stored, false, map[string]string{},
			[]string{`t.http.secret_headers["X-Token"]`}},
		{"another host, values given again", webhook("https://b.example/x", nil, map[string]string{"X-Token": "again"}), stored, false, map[string]string{"X-Token": "again"}, nil},
		{"amqp, same destination", amqpTo("alpha.x", nil), amqpStored, false, map[string]string{"X-Token": "tok"}, nil},
		{"amqp, another exchange", amqpTo("alpha.y", nil), amqpStored, false, map[string]string{}, []string{`t.amqp.secret_headers["X-Token"]`}},
		{"another kind keeps nothing", amqpTo("alpha.x", nil), stored, false, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := proto.Clone(tt.stored)
			v := &rpcerr.Violations{}
			KeepSecrets(v, "t", tt.target, tt.stored, tt.replaceSet)
			require.Equal(t, tt.fields, fields(v))
			got := tt.target.GetHttp().GetSecretHeaders()
			if tt.target.GetAmqp() != nil {
				got = tt.target.GetAmqp().GetSecretHeaders()
			}
			if len(tt.want) == 0 {
				require.Empty(t, got)
			} else {
				require.Equal(t, tt.want, got)
			}
			require.True(t, proto.Equal(before, tt.stored), "the stored target is not modified")
		})
	}
	// An omitted signing secret is the stored one.
	target := webhook("https://b.example", nil, nil)
	target.GetHttp().SigningSecret = ""
	KeepSecrets(&rpcerr.Violations{}, "t", target, stored, false)
	require.Equal(t, testSecret, target.GetHttp().SigningSecret)
}

func TestCheckerTarget(t *testing.T) {
	t.Parallel()
	policy, err := NewAMQPPolicy(AMQPPolicyOptions{})
	require.NoError(t, err)
	c := New(policy)
	tests := []struct {
		name   string
		target *registryv1.Target
		fields []string
	}{
		{"fine", webhook("https://a.example/x?y=1", map[string]string{"X-A": "a"}, map[string]string{"X-B": "b"}), nil},
		{"no kind", &registryv1.Target{}, []string{"t"}},
		{"url with credentials", webhook("https://u:p@a.example/", nil, nil), []string{"t.http.url"}},
		{"traceparent", webhook("https://a.example", map[string]string{"traceparent": "x"}, nil), []string{`t.http.headers["traceparent"]`}},
		{"baggage as a secret header", webhook("https://a.example", nil, map[string]string{"Baggage": "x"}), []string{`t.http.secret_headers["Baggage"]`}},
		{"empty secret value", webhook("https://a.example", nil, map[string]string{"X-B": ""}), []string{`t.http.secret_headers["X-B"]`}},
		{"a name in both maps", webhook("https://a.example", map[string]string{"x-b": "1"}, map[string]string{"X-B": "2"}), []string{`t.http.secret_headers["X-B"]`}},
		{"33 headers in all", webhook("https://a.example", manyHeaders("P", 17), manyHeaders("S", 16)), []string{"t.http.headers"}},
		{"bad signing secret", func() *registryv1.Target {
			target := webhook("https://a.example", nil, nil)
			target.GetHttp().SigningSecret = "hunter2"
			return target
		}(), []string{"t.http.signing_secret"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &rpcerr.Violations{}
			c.Target(v, "t", "alpha", tt.target)
			require.Equal(t, tt.fields, fields(v))
		})
	}
	partial := &rpcerr.Violations{}
	c.Partial(partial, "t", "alpha", webhook("https://a.example", nil, map[string]string{"X-B": ""}))
	require.True(t, partial.Empty(), "a partial target may leave secret values to KeepSecrets")

	defaults := &registryv1.Target{Kind: &registryv1.Target_Http{Http: &registryv1.HttpTarget{Url: "https://a.example", Method: "put"}}}
	c.Target(&rpcerr.Violations{}, "t", "alpha", defaults)
	require.Equal(t, "PUT", defaults.GetHttp().Method)
	require.Equal(t, DefaultTimeout, defaults.GetHttp().Timeout.AsDuration())
	require.Empty(t, defaults.GetHttp().SigningSecret, "the checker never invents a secret")
}

func manyHeaders(prefix string, n int) map[string]string {
	h := map[string]string{}
	for i := range n {
		h[prefix+string(rune('a'+i))] = "v"
	}
	return h
}

func TestCheckerSlotHeadersAndBodyTemplate(t *testing.T) {
	t.Parallel()
	policy, err := NewAMQPPolicy(AMQPPolicyOptions{})
	require.NoError(t, err)
	c := New(policy)
	templated := func(body string, format registryv1.BodyFormat) *registryv1.Target {
		target := webhook("https://a.example", nil, nil)
		target.GetHttp().Body, target.GetHttp().BodyFormat = body, format
		return target
	}
	amqp := func(body string, format registryv1.BodyFormat, headers map[string]string) *registryv1.Target {
		return &registryv1.Target{Kind: &registryv1.Target_Amqp{Amqp: &registryv1.AmqpTarget{
			Exchange: "alpha.x", RoutingKey: "k", Body: body, BodyFormat: format, Headers: headers,
		}}}
	}
	// 4,097 job ids of 64 bytes at most exceed 256 KiB though the template
	// itself is 40 KiB.
	tooLarge := strings.Repeat("{{job_id}}", MaxBody/64+1)
	tests := []struct {
		name   string
		target *registryv1.Target
		field  string // "" means valid
		reason string
	}{
		{"a literal body with braces", templated(`{{.NominalTime}} {{nope`, registryv1.BodyFormat_BODY_FORMAT_LITERAL), "", ""},
		{"an unspecified format is literal", templated(`{{nope`, registryv1.BodyFormat_BODY_FORMAT_UNSPECIFIED), "", ""},
		{"a template", templated(`{"slot":"{{nominal_time}}","attempt":{{attempt}}}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE), "", ""},
		{"an unknown placeholder", templated(`{"slot":"{{nominal}}"}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE),
			"t.http.body", `template error at byte 9: unknown placeholder "nominal"`},
		{"Go template syntax", templated(`{{.NominalTime}}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE),
			"t.http.body", `unknown placeholder ".NominalTime"`},
		{"unclosed", templated(`{{attempt`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE), "t.http.body", `is not closed`},
		{"a rendering over the limit", templated(tooLarge, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE),
			"t.http.body", "as a template may render to 262208 bytes"},
		{"the same text literal is fine", templated(tooLarge, registryv1.BodyFormat_BODY_FORMAT_LITERAL), "", ""},
		{"an unknown format", templated(`x`, registryv1.BodyFormat(7)), "t.http.body_format", "got 7"},
		{"an AMQP template", amqp(`{{execution_id}}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, nil), "", ""},
		{"a bad AMQP template", amqp(`{{ execution }}`, registryv1.BodyFormat_BODY_FORMAT_TEMPLATE, nil), "t.amqp.body", `unknown placeholder "execution"`},
		{"a slot header on HTTP", webhook("https://a.example", map[string]string{"Cronmesh-Attempt": "9"}, nil),
			`t.http.headers["Cronmesh-Attempt"]`, "is reserved: cronmesh sets the cronmesh-* headers"},
		{"any cronmesh- header, secret too", webhook("https://a.example", nil, map[string]string{"CRONMESH-FUTURE": "x"}),
			`t.http.secret_headers["CRONMESH-FUTURE"]`, "is reserved"},
		{"a slot header on AMQP", amqp("", 0, map[string]string{"cronmesh-nominal-time": "x"}),
			`t.amqp.headers["cronmesh-nominal-time"]`, "is reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &rpcerr.Violations{}
			c.Target(v, "t", "alpha", tt.target)
			if tt.field == "" {
				require.True(t, v.Empty(), "%v", v.List())
				return
			}
			require.Len(t, v.List(), 1, "%v", v.List())
			require.Equal(t, tt.field, v.List()[0].Field)
			require.Contains(t, v.List()[0].Description, tt.reason)
		})
	}
}
