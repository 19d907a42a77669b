package tracelink_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronmesh/cronmesh/services/history/internal/tracelink"
)

const id = "0af7651916cd43dd8448eb211c80319c"

func TestParse(t *testing.T) {
	t.Parallel()
	valid := []struct{ name, template, want string }{
		{"jaeger", "http://127.0.0.1:16686/trace/{trace_id}", "http://127.0.0.1:16686/trace/" + id},
		{"query parameter", "https://grafana.example.internal/explore?traceId={trace_id}&orgId=1", "https://grafana.example.internal/explore?traceId=" + id + "&orgId=1"},
		{"twice", "https://t.example.internal/{trace_id}?again={trace_id}", "https://t.example.internal/" + id + "?again=" + id},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := tracelink.Parse(tc.template)
			require.NoError(t, err)
			assert.Equal(t, tc.want, tpl.URL(id))
			assert.Equal(t, tc.template, tpl.String())
		})
	}
	invalid := []struct{ name, template, wantErr string }{
		{"no placeholder", "http://127.0.0.1:16686/trace/", "must contain {trace_id}"},
		{"misspelled placeholder", "http://127.0.0.1:16686/trace/{traceid}", "must contain {trace_id}"},
		{"relative", "/trace/{trace_id}", "absolute http"},
		{"other scheme", "ftp://host/{trace_id}", "absolute http"},
		{"no host", "http:///trace/{trace_id}", "no host"},
		{"does not parse", "http://[::1/trace/{trace_id}", "trace link template"},
		{"placeholder as the host", "http://{trace_id}", ""},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := tracelink.Parse(tc.template)
			if tc.wantErr == "" {
				// A trace id is a valid host name: odd but a URL.
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Nil(t, tpl)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.Contains(t, err.Error(), tc.template, "the error names the template")
		})
	}
}

func TestEmptyTemplateMakesNoLinks(t *testing.T) {
	t.Parallel()
	tpl, err := tracelink.Parse("")
	require.NoError(t, err)
	assert.Nil(t, tpl)
	assert.Empty(t, tpl.URL(id), "a nil template is usable")
	assert.Empty(t, (&tracelink.Template{}).URL(id))
}

func TestURLNeedsAValidTraceID(t *testing.T) {
	t.Parallel()
	tpl, err := tracelink.Parse("http://127.0.0.1:16686/trace/{trace_id}")
	require.NoError(t, err)
	for name, traceID := range map[string]string{
		"empty (a missed slot)": "",
		"all zero (invalid)":    "00000000000000000000000000000000",
		"upper case":            "0AF7651916CD43DD8448EB211C80319C",
		"too short":             id[:31],
		"too long":              id + "0",
		"not hex":               "0af7651916cd43dd8448eb211c80319g",
		"an injection":          "0af7651916cd43dd/../../admin?x=1",
	} {
		assert.Emptyf(t, tpl.URL(traceID), "%s: %q", name, traceID)
	}
	assert.Equal(t, "http://127.0.0.1:16686/trace/"+id, tpl.URL(id))
}
