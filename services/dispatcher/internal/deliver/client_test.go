package deliver

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"negative MaxTimeout", Options{MaxTimeout: -1}, "must not be negative"},
		{"negative AMQPTimeout", Options{AMQPTimeout: -1}, "must not be negative"},
		{"negative pool", Options{MaxIdleConnsPerHost: -1}, "must not be negative"},
		{"invalid network", Options{AllowedNetworks: []netip.Prefix{{}}}, "invalid allowed network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	c, err := New(Options{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}})
	require.NoError(t, err)
	require.Equal(t, DefaultMaxTimeout, c.maxTimeout)
	require.Equal(t, DefaultAMQPTimeout, c.amqpTimeout)
	require.Equal(t, DefaultUserAgent, c.userAgent)
	require.NotNil(t, c.amqpPolicy, "AMQP targets are checked at delivery by default")
	require.Nil(t, c.transport.Proxy, "a proxy would connect past the SSRF guard")
	require.Equal(t, DefaultMaxIdleConnsPerHost, c.transport.MaxIdleConnsPerHost)
	require.Equal(t, DefaultMaxTimeout, c.transport.ResponseHeaderTimeout)

	c, err = New(Options{MaxTimeout: time.Minute, UserAgent: "x/1"})
	require.NoError(t, err)
	require.Equal(t, time.Minute, c.maxTimeout)
	require.Equal(t, "x/1", c.userAgent)
}

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     int
		accepted []int32
		want     Result
	}{
		{200, nil, Succeeded},
		{201, nil, Succeeded},
		{299, nil, Succeeded},
		{101, nil, Permanent},
		{301, nil, Permanent},
		{307, nil, Permanent},
		{400, nil, Permanent},
		{403, nil, Permanent},
		{408, nil, Retryable},
		{409, nil, Permanent},
		{422, nil, Permanent},
		{429, nil, Retryable},
		{500, nil, Retryable},
		{599, nil, Retryable},
		{202, []int32{202}, Succeeded},
		{200, []int32{202}, Permanent},
		{204, []int32{200, 201}, Permanent},
		{409, []int32{200, 409}, Succeeded},
		{503, []int32{200}, Retryable},
		{503, []int32{503}, Succeeded},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, classifyStatus(tt.code, tt.accepted), "%d accepted %v", tt.code, tt.accepted)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := testNow()
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"1", time.Second},
		{" 30 ", 30 * time.Second},
		{"3599", 3599 * time.Second},
		{"3600", time.Hour},
		{"99999999999999999", time.Hour},
		{"-1", 0},
		{"1.5", 0},
		{"tomorrow", 0},
		{now.Add(45 * time.Second).Format(http.TimeFormat), 45 * time.Second},
		{now.Add(3 * time.Hour).Format(http.TimeFormat), time.Hour},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(10 * time.Second).Format(time.RFC850), 10 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, parseRetryAfter(tt.value, now), "%q", tt.value)
	}
}

func TestResultString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "succeeded", Succeeded.String())
	require.Equal(t, "retryable", Retryable.String())
	require.Equal(t, "permanent", Permanent.String())
	require.Equal(t, "Result(0)", Result(0).String())
}
