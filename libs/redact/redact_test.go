package redact

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, want string
	}{
		{"https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com"},
		{"HTTP://user:pass@example.com:8443/p?token=abc#frag", "http://example.com:8443"},
		{"https://[2001:db8::1]:443/x", "https://[2001:db8::1]:443"},
		{"mailto:someone@example.com", "mailto:"},
		{"https://example.com/%zz", "<invalid URL>"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, RawURL(tt.raw))
		})
	}
	require.Empty(t, URL(nil))
}

func TestURLError(t *testing.T) {
	t.Parallel()
	_, err := http.NewRequest(http.MethodGet, "https://example.com/secret-path?token=abc\x7f", nil)
	require.Error(t, err)
	got := URLError(err)
	require.NotContains(t, got.Error(), "secret-path")
	require.NotContains(t, got.Error(), "token")
	var ue *url.Error
	require.True(t, errors.As(got, &ue))

	plain := errors.New("plain")
	require.Same(t, plain, URLError(plain))
}
